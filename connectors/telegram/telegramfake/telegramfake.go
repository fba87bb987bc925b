// Package telegramfake is a fake of the Telegram Bot API for tests: what a
// bot that sends messages with buttons and reads their presses sees
// (sendMessage with an inline keyboard, getUpdates, answerCallbackQuery,
// editMessageText, editMessageReplyMarkup, setWebhook, deleteWebhook). It
// is an httptest server on 127.0.0.1 that answers with the API's real
// success and error bodies, enforces its limits, records what arrived as
// a reader would see it, and can be scripted to fail the ways the real API
// does. A test presses a button as a given user with Press or PressButton.
//
// The wire format follows the Bot API docs and what the API was seen to
// answer:
//
//   - requests and replies: https://core.telegram.org/bots/api#making-requests
//     ({"ok":true,"result":...} or {"ok":false,"error_code":...,
//     "description":...,"parameters":{...}}, parameters per
//     https://core.telegram.org/bots/api#responseparameters)
//   - sendMessage and its 1-4096 characters after entity parsing:
//     https://core.telegram.org/bots/api#sendmessage; the Message it
//     returns: https://core.telegram.org/bots/api#message
//   - HTML parse mode: https://core.telegram.org/bots/api#html-style
//   - 429 body with retry_after: https://github.com/tdlib/telegram-bot-api/issues/184
//   - 400 with migrate_to_chat_id: https://github.com/TwiN/gatus/issues/179
//   - 400 "message is too long": https://github.com/j-hc/revanced-magisk-module/issues/262
//   - 403 "Forbidden: bot was blocked by the user", 400 "Bad Request: chat
//     not found", 401 "Unauthorized", 404 "Not Found" (a path without a
//     valid token), 502 as nginx's HTML page: as the API answers them.
//   - buttons: https://core.telegram.org/bots/api#inlinekeyboardmarkup and
//     #inlinekeyboardbutton (callback_data 1-64 bytes; more is 400
//     "BUTTON_DATA_INVALID")
//   - presses: https://core.telegram.org/bots/api#getupdates (an offset
//     confirms the updates below it; timeout is a long poll; allowed_updates
//     holds for later calls), #update, #callbackquery, #user; 409 "can't use
//     getUpdates method while webhook is active" and "terminated by other
//     getUpdates request" as the API answers them
//   - #answercallbackquery (once per query; after that 400 "query is too
//     old and response timeout expired or query ID is invalid")
//   - #editmessagetext and #editmessagereplymarkup (a reply_markup left out
//     removes the keyboard; 400 "message is not modified: ..." for an edit
//     that changes nothing, "message to edit not found")
//   - #setwebhook (secret_token of 1-256 [A-Za-z0-9_-])
//
// An e2e test starts the fake, points the connector's base_url at URL and
// its bot_token at Token, and reads Messages, Texts or Requests.
package telegramfake

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
)

// DefaultToken is the bot token New's server accepts.
const DefaultToken = "123456789:AAFakeTokenForAgentworkTests_0123456789"

// MaxText is the most a message may hold, in UTF-16 code units after
// entity parsing.
const MaxText = 4096

// Server is the fake Bot API. Its Recorder holds the messages that
// arrived: Text as a reader sees it (HTML parsed), Urgency "info" when
// sent with disable_notification and "important" otherwise, Destination
// the chat id as sent ("-1001234567890", "@channel", or the supergroup a
// migrated group became), with "/<message_thread_id>" for a topic. Its
// Script fails sends as the API does: Unavailable is nginx's 502 page,
// RateLimited a 429 with retry_after (whole seconds, at least 1),
// Unauthorized a 401, BadRequest 400 "chat not found", Stall an answer
// that never comes (until the client gives up or Close). Safe for
// concurrent use.
type Server struct {
	connectortest.Recorder
	*connectortest.Script[answer]
	// URL is the API root to configure as base_url (http://127.0.0.1:port).
	URL string
	// Token is the bot token the server accepts; any other is 401.
	Token string

	srv  *httptest.Server
	once sync.Once
	done chan struct{} // closed by Close: ends waiting getUpdates calls

	mu       sync.Mutex
	now      func() time.Time
	seq      map[string]int64 // the last message id per chat
	requests []Request
	entities int
	blocked  map[string]bool
	notFound map[string]bool
	migrated map[string]string

	sent     map[msgKey]*sent  // every message made, as it is now
	change   chan struct{}     // closed and replaced at each change
	updates  []update          // not yet confirmed, in update_id order
	lastUpd  int64             // the last update_id given
	allowed  []string          // allowed_updates of the last getUpdates that set it
	polling  int64             // the getUpdates call that may wait; earlier ones are terminated
	queries  map[string]*query // callback queries by id
	answers  []CallbackAnswer  // answerCallbackQuery calls that succeeded
	edits    []Edit            // edit calls, answered or not
	webhook  string            // setWebhook's url, "" when none
	polls    int               // getUpdates calls
	pollFail *connectortest.Script[answer]
}

var (
	_ connectortest.Observer      = (*Server)(nil)
	_ connectortest.FaultInjector = (*Server)(nil)
)

// Request is one sendMessage call as the fake received and answered it.
type Request struct {
	// ChatID is chat_id as sent: a number's digits or an @username.
	ChatID string
	// MessageThreadID is message_thread_id (0: none).
	MessageThreadID int64
	// Text is text as sent (HTML escapes and tags included).
	Text                string
	ParseMode           string
	DisableNotification bool
	// LinkPreviewDisabled: link_preview_options.is_disabled (or the older
	// disable_web_page_preview).
	LinkPreviewDisabled bool
	// Status is the HTTP status the fake answered; Description its error
	// description ("" on success).
	Status      int
	Description string
	// MessageID is the id of the message made (0 on failure).
	MessageID int64
	// ReplyMarkup is reply_markup as sent (JSON), "" when none; Message
	// returns the buttons it made.
	ReplyMarkup string
}

// New starts a fake that accepts DefaultToken and stops at t's cleanup.
func New(t testing.TB) *Server {
	t.Helper()
	s := NewServer(DefaultToken)
	t.Cleanup(s.Close)
	return s
}

// NewServer starts a fake that accepts token. Close stops it.
func NewServer(token string) *Server {
	s := &Server{
		Script:   connectortest.NewScript(faultAnswer),
		Token:    token,
		now:      time.Now,
		seq:      map[string]int64{},
		blocked:  map[string]bool{},
		notFound: map[string]bool{},
		migrated: map[string]string{},
		sent:     map[msgKey]*sent{},
		change:   make(chan struct{}),
		lastUpd:  700000000,
		queries:  map[string]*query{},
		pollFail: connectortest.NewScript(faultAnswer),
		done:     make(chan struct{}),
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close releases stalled requests and stops the server. Idempotent.
func (s *Server) Close() {
	s.once.Do(func() {
		s.Release()
		s.pollFail.Release()
		close(s.done)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
}

// FailStatus answers the next n sends (-1: every one, until Recover) with
// status: 502 as nginx's HTML page in front of the API, any other status
// as the API's JSON with the status text (500 "Internal Server Error").
func (s *Server) FailStatus(n, status int) { s.AnswerNext(n, outage(status)) }

// Recover ends every scripted failure and FailEntities.
func (s *Server) Recover() {
	s.Script.Recover()
	s.pollFail.Recover()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entities = 0
}

// Migrate makes chat from a basic group that became the supergroup to:
// sends to from are answered 400 "group chat was upgraded to a supergroup
// chat" with parameters.migrate_to_chat_id to.
func (s *Server) Migrate(from, to string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.migrated[from] = to
}

// FailEntities answers the next n sends that have a parse_mode with 400
// "can't parse entities", whatever their text.
func (s *Server) FailEntities(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entities = n
}

// Block makes chat a person who blocked the bot: 403 "Forbidden: bot was
// blocked by the user".
func (s *Server) Block(chat string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blocked[chat] = true
}

// Unblock undoes Block.
func (s *Server) Unblock(chat string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.blocked, chat)
}

// ChatNotFound makes chat one the bot cannot see: 400 "Bad Request: chat
// not found".
func (s *Server) ChatNotFound(chat string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notFound[chat] = true
}

// Requests returns every sendMessage call so far, answered or not, in
// order of arrival.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Texts returns the texts of the messages that arrived in chat (in any of
// its topics), as a reader sees them, in order.
func (s *Server) Texts(chat string) []string {
	msgs, _ := s.Messages(context.Background(), 0)
	var out []string
	for _, m := range msgs {
		if c, _, _ := strings.Cut(m.Destination, "/"); c == chat {
			out = append(out, m.Text)
		}
	}
	return out
}

// seconds is d in whole seconds, at least 1.
func seconds(d time.Duration) int { return max(1, int((d+time.Second-1)/time.Second)) }

// sendMessage is the body of a sendMessage request.
type sendMessage struct {
	ChatID                json.RawMessage `json:"chat_id"`
	MessageThreadID       int64           `json:"message_thread_id"`
	Text                  *string         `json:"text"`
	ParseMode             string          `json:"parse_mode"`
	DisableNotification   bool            `json:"disable_notification"`
	DisableWebPagePreview bool            `json:"disable_web_page_preview"`
	LinkPreviewOptions    *struct {
		IsDisabled bool `json:"is_disabled"`
	} `json:"link_preview_options"`
	ReplyMarkup json.RawMessage `json:"reply_markup"`
}

// answer is what the fake replies.
type answer struct {
	status int
	body   any    // JSON
	html   string // or a page
	stall  bool
}

func apiError(status int, desc string) answer {
	return answer{status: status, body: map[string]any{"ok": false, "error_code": status, "description": desc}}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	// Read the body first: only then does the server notice a client
	// hanging up (r.Context() is cancelled) while a request stalls.
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	a := s.handle(r, raw)
	if a.stall {
		s.Stall(r.Context())
		return
	}
	if a.html != "" {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.html)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_ = json.NewEncoder(w).Encode(a.body)
}

// handle decides the answer to one request and records a sendMessage in
// Requests (and, when it made a message, in the Recorder).
func (s *Server) handle(r *http.Request, raw []byte) (a answer) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/bot")
	if !ok {
		return apiError(http.StatusNotFound, "Not Found")
	}
	token, method, ok := strings.Cut(rest, "/")
	if !ok || token == "" {
		return apiError(http.StatusNotFound, "Not Found")
	}
	if token != s.Token {
		return apiError(http.StatusUnauthorized, "Unauthorized")
	}
	switch strings.ToLower(method) {
	case "sendmessage":
		return s.sendMessage(r, raw)
	case "getupdates":
		return s.getUpdates(r, raw)
	case "answercallbackquery":
		return s.answerCallbackQuery(r, raw)
	case "editmessagetext":
		return s.editMessage(r, raw, true)
	case "editmessagereplymarkup":
		return s.editMessage(r, raw, false)
	case "setwebhook":
		return s.setWebhook(r, raw)
	case "deletewebhook":
		return s.deleteWebhook()
	}
	return apiError(http.StatusNotFound, "Not Found: method not found")
}

// sendMessage answers a sendMessage request.
func (s *Server) sendMessage(r *http.Request, raw []byte) (a answer) {
	var body sendMessage
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") || json.Unmarshal(raw, &body) != nil {
		return apiError(http.StatusBadRequest, "Bad Request: chat_id is empty")
	}
	req := &Request{
		ChatID:              chatString(body.ChatID),
		MessageThreadID:     body.MessageThreadID,
		ParseMode:           body.ParseMode,
		DisableNotification: body.DisableNotification,
		LinkPreviewDisabled: body.DisableWebPagePreview || (body.LinkPreviewOptions != nil && body.LinkPreviewOptions.IsDisabled),
	}
	if body.Text != nil {
		req.Text = *body.Text
	}
	var buttons [][]Button
	if body.ReplyMarkup != nil {
		req.ReplyMarkup = string(body.ReplyMarkup)
		var m replyMarkup
		if err := json.Unmarshal(body.ReplyMarkup, &m); err != nil {
			return apiError(http.StatusBadRequest, "Bad Request: can't parse reply keyboard markup JSON object")
		}
		buttons = m.InlineKeyboard
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		if a.stall {
			return
		}
		req.Status = a.status
		if m, ok := a.body.(map[string]any); ok {
			req.Description, _ = m["description"].(string)
		}
		s.requests = append(s.requests, *req)
	}()
	if f, ok := s.Next(); ok {
		return f
	}
	switch {
	case req.ChatID == "":
		return apiError(http.StatusBadRequest, "Bad Request: chat_id is empty")
	case s.migrated[req.ChatID] != "":
		to, _ := strconv.ParseInt(s.migrated[req.ChatID], 10, 64)
		return answer{status: http.StatusBadRequest, body: map[string]any{
			"ok": false, "error_code": 400, "description": "Bad Request: group chat was upgraded to a supergroup chat",
			"parameters": map[string]any{"migrate_to_chat_id": to},
		}}
	case s.notFound[req.ChatID] || !validChat(req.ChatID):
		return apiError(http.StatusBadRequest, "Bad Request: chat not found")
	case s.blocked[req.ChatID]:
		return apiError(http.StatusForbidden, "Forbidden: bot was blocked by the user")
	case req.MessageThreadID < 0:
		return apiError(http.StatusBadRequest, "Bad Request: message thread not found")
	}
	if desc := checkKeyboard(buttons); desc != "" {
		return apiError(http.StatusBadRequest, desc)
	}
	text := req.Text
	switch req.ParseMode {
	case "":
	case "HTML", "html":
		if s.entities > 0 {
			s.entities--
			return apiError(http.StatusBadRequest, "Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 0")
		}
		parsed, err := ParseHTML(text)
		if err != nil {
			return apiError(http.StatusBadRequest, "Bad Request: can't parse entities: "+err.Error())
		}
		text = parsed
	default:
		// The fake speaks HTML only (the connector offers no Markdown).
		return apiError(http.StatusBadRequest, "Bad Request: unsupported parse_mode")
	}
	text = strings.TrimSpace(text)
	switch {
	case text == "":
		return apiError(http.StatusBadRequest, "Bad Request: message text is empty")
	case connectors.UTF16(text) > MaxText:
		return apiError(http.StatusBadRequest, "Bad Request: message is too long")
	case !utf8.ValidString(text):
		return apiError(http.StatusBadRequest, "Bad Request: text must be encoded in UTF-8")
	}
	s.seq[req.ChatID]++
	req.MessageID = s.seq[req.ChatID]
	dest := req.ChatID
	if req.MessageThreadID != 0 {
		dest += "/" + strconv.FormatInt(req.MessageThreadID, 10)
	}
	urgency := "important"
	if req.DisableNotification {
		urgency = "info"
	}
	s.Add(connectortest.Message{Text: text, Urgency: urgency, Destination: dest})
	key := msgKey{req.ChatID, req.MessageID}
	s.sent[key] = &sent{req: *req, text: text, buttons: buttons}
	s.changed()
	return answer{status: http.StatusOK, body: map[string]any{"ok": true, "result": s.message(key)}}
}

// faultAnswer is the API's answer to f (see Server).
func faultAnswer(f connectortest.Fault) answer {
	switch f.Kind {
	case connectortest.Unavailable:
		return outage(http.StatusBadGateway)
	case connectortest.RateLimited:
		return rateLimited(seconds(f.RetryAfter))
	case connectortest.Unauthorized:
		return apiError(http.StatusUnauthorized, "Unauthorized")
	case connectortest.BadRequest:
		return apiError(http.StatusBadRequest, "Bad Request: chat not found")
	case connectortest.Stall:
		return answer{stall: true}
	}
	panic(fmt.Sprintf("telegramfake: unknown fault %s", f.Kind))
}

// outage is the answer of a server in trouble.
func outage(status int) answer {
	if status == http.StatusBadGateway {
		// nginx in front of the Bot API.
		return answer{status: status, html: "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.18.0</center>\r\n</body>\r\n</html>\r\n"}
	}
	return apiError(status, http.StatusText(status))
}

func rateLimited(secs int) answer {
	return answer{status: http.StatusTooManyRequests, body: map[string]any{
		"ok": false, "error_code": 429, "description": fmt.Sprintf("Too Many Requests: retry after %d", secs),
		"parameters": map[string]any{"retry_after": secs},
	}}
}

// message is the Message the API returns for the sent message at k, as
// it is now (edits included). s.mu is held.
func (s *Server) message(k msgKey) map[string]any {
	m := s.sent[k]
	req, text := &m.req, m.text
	chat := map[string]any{}
	switch id, err := strconv.ParseInt(req.ChatID, 10, 64); {
	case err != nil: // @username: a public channel
		h := fnv.New32a()
		_, _ = h.Write([]byte(req.ChatID))
		chat["id"] = -1000000000000 - int64(h.Sum32())
		chat["type"] = "channel"
		chat["title"] = req.ChatID[1:]
		chat["username"] = req.ChatID[1:]
	case id > 0:
		chat["id"], chat["type"], chat["first_name"] = id, "private", "Test User"
	case id <= -1000000000000:
		chat["id"], chat["type"], chat["title"] = id, "supergroup", "agentwork test"
		if req.MessageThreadID != 0 {
			chat["is_forum"] = true
		}
	default:
		chat["id"], chat["type"], chat["title"] = id, "group", "agentwork test"
	}
	botID, _, _ := strings.Cut(s.Token, ":")
	bot, _ := strconv.ParseInt(botID, 10, 64)
	msg := map[string]any{
		"message_id": req.MessageID,
		"from":       map[string]any{"id": bot, "is_bot": true, "first_name": "agentwork fake", "username": "agentwork_fake_bot"},
		"chat":       chat,
		"date":       s.now().Unix(),
		"text":       text,
	}
	if req.MessageThreadID != 0 {
		msg["message_thread_id"] = req.MessageThreadID
		msg["is_topic_message"] = true
	}
	if m.edited {
		msg["edit_date"] = s.now().Unix()
	}
	if len(m.buttons) > 0 {
		msg["reply_markup"] = map[string]any{"inline_keyboard": m.buttons}
	}
	return msg
}

// chatString is chat_id as a string: an integer's digits or a string's
// value ("" when absent or of another type).
func chatString(raw json.RawMessage) string {
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return str
	}
	return ""
}

// validChat reports whether chat is an integer or an @username.
func validChat(chat string) bool {
	if strings.HasPrefix(chat, "@") {
		return len(chat) > 1
	}
	_, err := strconv.ParseInt(chat, 10, 64)
	return err == nil
}

// The tags Telegram's HTML parse mode knows (https://core.telegram.org/bots/api#html-style).
var htmlTags = map[string]bool{
	"b": true, "strong": true, "i": true, "em": true, "u": true, "ins": true,
	"s": true, "strike": true, "del": true, "span": true, "tg-spoiler": true,
	"a": true, "tg-emoji": true, "code": true, "pre": true, "blockquote": true,
}

// ParseHTML returns the text a reader sees of s in parse_mode HTML: tags
// dropped, the entities &lt; &gt; &amp; &quot; and numeric ones decoded.
// Its errors read as Telegram's ("Unsupported start tag \"x\" at byte
// offset 3").
func ParseHTML(s string) (string, error) {
	var b strings.Builder
	var open []string
	for i := 0; i < len(s); {
		switch s[i] {
		case '<':
			end := strings.IndexByte(s[i:], '>')
			if end < 0 {
				return "", parseError(fmt.Sprintf("Unclosed start tag at byte offset %d", i))
			}
			tag := s[i+1 : i+end]
			if name, ok := strings.CutPrefix(tag, "/"); ok {
				name = strings.ToLower(strings.TrimSpace(name))
				if len(open) == 0 {
					return "", parseError(fmt.Sprintf("Unexpected end tag at byte offset %d", i))
				}
				if top := open[len(open)-1]; name != top {
					return "", parseError(fmt.Sprintf("Unmatched end tag at byte offset %d, expected \"</%s>\", found \"</%s>\"", i, top, name))
				}
				open = open[:len(open)-1]
			} else {
				name, _, _ := strings.Cut(tag, " ")
				name = strings.ToLower(name)
				if !htmlTags[name] {
					return "", parseError(fmt.Sprintf("Unsupported start tag \"%s\" at byte offset %d", name, i))
				}
				open = append(open, name)
			}
			i += end + 1
		case '&':
			if r, n := entity(s[i:]); n > 0 {
				b.WriteString(r)
				i += n
				continue
			}
			b.WriteByte('&')
			i++
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	if len(open) > 0 {
		return "", parseError(fmt.Sprintf("Can't find end tag corresponding to start tag \"%s\"", open[len(open)-1]))
	}
	return b.String(), nil
}

// parseError is an error of ParseHTML, worded as Telegram's.
type parseError string

func (e parseError) Error() string { return string(e) }

// entity decodes the HTML entity at the start of s and returns its text
// and length, or n = 0 when s starts with none Telegram knows.
func entity(s string) (string, int) {
	end := strings.IndexByte(s[:min(len(s), 12)], ';')
	if end < 0 {
		return "", 0
	}
	name := s[1:end]
	switch name {
	case "lt":
		return "<", end + 1
	case "gt":
		return ">", end + 1
	case "amp":
		return "&", end + 1
	case "quot":
		return `"`, end + 1
	}
	if num, ok := strings.CutPrefix(name, "#"); ok {
		base := 10
		if hex, ok := strings.CutPrefix(strings.ToLower(num), "x"); ok {
			num, base = hex, 16
		}
		if v, err := strconv.ParseUint(num, base, 32); err == nil && utf8.ValidRune(rune(v)) {
			return string(rune(v)), end + 1
		}
	}
	return "", 0
}
