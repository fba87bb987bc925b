// Package telegram is the connector that sends notifications to a Telegram
// chat, group, forum topic or channel through a bot, with the Bot API's
// sendMessage (https://core.telegram.org/bots/api#sendmessage).
//
// A text longer than Telegram's 4096 characters (UTF-16 code units,
// counted after entity parsing) is split into several messages
// (connectors.Split). Text is sent as plain text unless parse_mode is
// HTML, and then escaped so that it still shows literally. "info"
// notifications arrive silently (disable_notification), "important" ones
// with a sound and a ⚠️ in front.
//
// The Bot API's quirks are handled here: a 429's retry_after becomes the
// retry delay; a group that became a supergroup (400 with
// migrate_to_chat_id) is written to at its new id at once, and after that
// by this connector, with a note in the receipt to update the config; a
// message whose entities Telegram cannot parse is sent again as plain
// text. A bad token, an unknown chat or a blocked bot fail for good.
//
// A notification with an Approval shows its actions as inline buttons
// under the last part (connectors.Buttons), and Answer receives their
// presses by getUpdates long polling (connectors.Answers): see Answer.
//
// Telegram has no idempotency key: if the process dies after Telegram
// accepted a message and before the dispatcher recorded it (a window of
// milliseconds, see connectors.Connector), the message is sent again.
//
// The sub-package telegramfake is an httptest fake of the Bot API for
// tests.
package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/internal/httpapi"
	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/internal/retryafter"
	"github.com/agentwork/agentwork/internal/secret"
)

// MaxText is the longest text of one message, in UTF-16 code units after
// entity parsing (https://core.telegram.org/bots/api#sendmessage: "1-4096
// characters after entities parsing").
const MaxText = 4096

// Marks added to a notification's text.
const (
	// ImportantPrefix starts the text of an "important" notification (it
	// also arrives with a sound; "info" arrives silently).
	ImportantPrefix = "⚠️ "
	// TruncatedMarker ends the text of a reply the model's token limit cut
	// short.
	TruncatedMarker = "\n\n[cut short by the model's token limit]"
)

// Options configures a Connector beyond its Config.
type Options struct {
	// Client sends the requests; it is used with redirects off (a
	// redirected POST would become a GET, and the token would go
	// elsewhere). Default: a client with a transport of its own.
	Client *http.Client
	// Logger receives what Answer could not do (answer a press, edit a
	// question). Default zap.NewNop().
	Logger *zap.Logger
	// Clock times Answer's waits between polls. Default the real clock.
	Clock clock.Clock
}

// Connector sends notifications to a Telegram chat with a bot. Safe for
// concurrent use; it does not implement connectors.Concurrent, so that the
// parts of one notification are not interleaved with another's.
type Connector struct {
	name     string
	base     string // the API root with the token: <base_url>/bot<token>/; never printed
	endpoint string // the sendMessage URL, token and all: never printed
	where    string // the same with the token redacted, for errors
	log      *zap.Logger
	clock    clock.Clock
	chat     string
	thread   int64
	html     bool
	preview  bool
	api      *httpapi.Client

	mu    sync.Mutex
	moved map[string]string // chat id → the supergroup it became
}

var (
	_ connectors.Connector = (*Connector)(nil)
	_ connectors.Buttons   = (*Connector)(nil)
	_ connectors.Answers   = (*Connector)(nil)
)

// New returns the connector named name (its name in agentwork.yaml, used in
// notes) for c. It does no I/O.
func New(name string, c Config, opts Options) (*Connector, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	base := strings.TrimRight(c.BaseURL, "/")
	if base == "" {
		base = DefaultBaseURL
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	return &Connector{
		name:     name,
		base:     base + "/bot" + c.BotToken + "/",
		log:      opts.Logger,
		clock:    opts.Clock,
		endpoint: base + "/bot" + c.BotToken + "/sendMessage",
		where:    secret.URL(base) + "/bot[redacted]/sendMessage",
		chat:     c.ChatID,
		thread:   c.MessageThreadID,
		html:     c.ParseMode == ParseModeHTML,
		preview:  c.LinkPreview,
		api:      httpapi.New(opts.Client, c.BotToken),
		moved:    map[string]string{},
	}, nil
}

// CloseIdleConnections closes the idle connections of the connector's
// HTTP client.
func (c *Connector) CloseIdleConnections() { c.api.CloseIdleConnections() }

// Parts returns the messages n is sent as: its text, after ImportantPrefix
// for an "important" one and before TruncatedMarker for a truncated one,
// split into parts of at most MaxText UTF-16 code units.
func Parts(n connectors.Notification) []string {
	text := n.Text
	if n.Urgency == "important" {
		text = ImportantPrefix + text
	}
	if n.Truncated {
		text += TruncatedMarker
	}
	return connectors.Split(text, MaxText, connectors.UTF16)
}

// Send sends n's parts (see Parts) in order, after the n.SentParts an
// earlier attempt sent, to the configured chat or the target's (see
// Config.CheckDestination). "info" (or no urgency) is sent with
// disable_notification, "important" with a sound.
//
// The receipt's MessageIDs are <chat id>:<message_id> for each part sent
// (Telegram's message ids count per chat), e.g. "-1001234567890:42".
//
// Errors: a 429 is a *connectors.RetryableError after the retry_after it
// names; 5xx, 408 and network errors are retryable; 400 (chat not found,
// ...), 401, 403 (bot blocked, kicked) and 404 are
// *connectors.PermanentError. The API's answers are an *Error inside. The
// token is in none of them.
func (c *Connector) Send(ctx context.Context, n connectors.Notification) (connectors.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return connectors.Receipt{}, fmt.Errorf("telegram: %w", err)
	}
	r := route{chat: c.chat, thread: c.thread}
	fromTarget := false
	if d := n.Destination(); d != "" {
		dr, err := parseDestination(d)
		if err != nil {
			return connectors.Receipt{}, connectors.Permanent(fmt.Errorf("telegram: target %q: %w", n.Target, err))
		}
		if dr.chat != "" {
			r.chat, fromTarget = dr.chat, true
		}
		r.thread = dr.thread
	}
	if strings.TrimSpace(n.Text) == "" {
		return connectors.Receipt{}, connectors.Permanent(errors.New("telegram: the text is empty or white space, which Telegram does not send"))
	}
	keyboard, links, err := buttons(n.Approval)
	if err != nil {
		return connectors.Receipt{}, connectors.Permanent(fmt.Errorf("telegram: %w", err))
	}
	switch {
	case keyboard != nil:
		// The buttons answer: the links the asker ended the text with
		// (Prompt.Links) are cut off.
		if cut := strings.TrimSuffix(n.Text, n.Approval.Links()); strings.TrimSpace(cut) != "" {
			n.Text = cut
		}
	case links != "":
		n.Text = strings.TrimSuffix(n.Text, n.Approval.Links()) + links
	}
	parts := Parts(n)
	s := &sending{c: c, n: n, route: r, fromTarget: fromTarget, silent: n.Urgency != "important", total: len(parts), keyboard: keyboard}
	rec, err := connectors.SendParts(ctx, parts, n.SentParts, func(i int, part string) (string, error) { return s.part(ctx, i, part) })
	if links != "" {
		s.note(fmt.Sprintf("approval %q: its id is too long for a button's callback_data (%d bytes at most), so the question carries its links instead of buttons", n.Approval.ID, MaxCallbackData))
	}
	rec.Notes = s.notes
	return rec, err
}

// sending is the state of one Send.
type sending struct {
	c          *Connector
	n          connectors.Notification
	route      route
	fromTarget bool // route.chat is the target's, not chat_id
	silent     bool
	total      int
	keyboard   *inlineKeyboard // on the last part
	notes      []string
	noted      map[string]bool
}

func (s *sending) note(msg string) {
	if s.noted == nil {
		s.noted = map[string]bool{}
	}
	if !s.noted[msg] {
		s.noted[msg] = true
		s.notes = append(s.notes, msg)
	}
}

// part sends part i and returns its message id.
func (s *sending) part(ctx context.Context, i int, part string) (string, error) {
	c := s.c
	chat := c.current(s.route.chat)
	if chat != s.route.chat {
		s.note(s.movedNote(s.route.chat, chat))
	}
	req := request{
		ChatID:              chatID(chat),
		MessageThreadID:     s.route.thread,
		Text:                part,
		DisableNotification: s.silent,
	}
	if !c.preview {
		req.LinkPreviewOptions = &linkPreviewOptions{IsDisabled: true}
	}
	if i == s.total-1 {
		req.ReplyMarkup = s.keyboard
	}
	if c.html {
		req.Text, req.ParseMode = EscapeHTML(part), ParseModeHTML
	}
	migrated, plain := false, false
	for {
		msgID, at, err := c.post(ctx, chat, req)
		if err == nil {
			if at == "" {
				at = chat
			}
			return at + ":" + strconv.FormatInt(msgID, 10), nil
		}
		var te *Error
		if !errors.As(err, &te) {
			return "", err
		}
		switch {
		case te.MigrateTo != "" && !migrated && te.MigrateTo != chat:
			// The group became a supergroup with a new id: send there now,
			// and from now on.
			c.migrate(s.route.chat, te.MigrateTo)
			s.note(s.movedNote(s.route.chat, te.MigrateTo))
			chat, migrated = te.MigrateTo, true
			req.ChatID = chatID(chat)
			continue
		case req.ParseMode != "" && !plain && te.Code == http.StatusBadRequest && isParseError(te.Description):
			// Telegram could not parse the HTML (the escaping should
			// prevent that): the same part as plain text.
			req.Text, req.ParseMode, plain = part, "", true
			s.note(fmt.Sprintf("part %d of %d was sent as plain text: Telegram could not parse it as HTML (%s)", i+1, s.total, te.Description))
			continue
		}
		return "", classify(te)
	}
}

// movedNote tells the user that chat became supergroup to.
func (s *sending) movedNote(chat, to string) string {
	if !s.fromTarget {
		return fmt.Sprintf("chat %s became supergroup %s: sent there; update chat_id in agentwork.yaml (connectors.%s.chat_id: %q)", chat, to, s.c.name, to)
	}
	old, now := s.n.Target, s.c.name+":"+to
	if s.route.thread != 0 {
		now += "/" + strconv.FormatInt(s.route.thread, 10)
	}
	return fmt.Sprintf("chat %s became supergroup %s: sent there; update the targets that name it (%s → %s)", chat, to, old, now)
}

// current returns the chat to write to for chat: the supergroup it became,
// if a send learned that.
func (c *Connector) current(chat string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if to, ok := c.moved[chat]; ok {
		return to
	}
	return chat
}

func (c *Connector) migrate(from, to string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.moved[from] = to
}

// isParseError reports whether a 400's description says the entities of
// the text could not be parsed ("Bad Request: can't parse entities: ...").
func isParseError(desc string) bool {
	return strings.Contains(strings.ToLower(desc), "can't parse entities")
}

// htmlEscaper escapes what Telegram's HTML parse mode interprets
// (https://core.telegram.org/bots/api#html-style: "All <, > and & symbols
// that are not a part of a tag or an HTML entity must be replaced with the
// corresponding HTML entities").
var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// EscapeHTML escapes & < > in s for parse_mode HTML, so that Telegram
// shows s literally. The escapes count one character each towards MaxText
// (it is measured after entity parsing).
func EscapeHTML(s string) string { return htmlEscaper.Replace(s) }

// request is the body of sendMessage.
type request struct {
	ChatID              any                 `json:"chat_id"`
	MessageThreadID     int64               `json:"message_thread_id,omitempty"`
	Text                string              `json:"text"`
	ParseMode           string              `json:"parse_mode,omitempty"`
	LinkPreviewOptions  *linkPreviewOptions `json:"link_preview_options,omitempty"`
	DisableNotification bool                `json:"disable_notification,omitempty"`
	ReplyMarkup         *inlineKeyboard     `json:"reply_markup,omitempty"`
}

type linkPreviewOptions struct {
	IsDisabled bool `json:"is_disabled"`
}

// chatID is chat as the API takes it: a number, or an @username string.
func chatID(chat string) any {
	if strings.HasPrefix(chat, "@") {
		return chat
	}
	return json.Number(chat)
}

// reply is the Bot API's answer (https://core.telegram.org/bots/api#making-requests).
type reply struct {
	OK          bool            `json:"ok"`
	Result      json.RawMessage `json:"result"`
	ErrorCode   int             `json:"error_code"`
	Description string          `json:"description"`
	Parameters  *struct {
		RetryAfter      int         `json:"retry_after"`
		MigrateToChatID json.Number `json:"migrate_to_chat_id"`
	} `json:"parameters"`
}

// message is the part of a Message the connector reads.
type message struct {
	MessageID int64 `json:"message_id"`
	Chat      struct {
		ID json.Number `json:"id"`
	} `json:"chat"`
}

// post sends one sendMessage request for chat and returns the message
// Telegram made: its id and its chat's id ("" when the reply omits it).
func (c *Connector) post(ctx context.Context, chat string, body request) (msgID int64, chatID string, err error) {
	result, err := c.call(ctx, "sendMessage", chat, body)
	if err != nil {
		return 0, "", err
	}
	var m message
	_ = json.Unmarshal(result, &m)
	return m.MessageID, m.Chat.ID.String(), nil
}

// call calls the Bot API's method with body, about chat ("" when none),
// and returns the reply's result, or an *Error for an answer other than
// ok.
func (c *Connector) call(ctx context.Context, method, chat string, body any) (json.RawMessage, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, connectors.Permanent(fmt.Errorf("telegram: encode the request: %w", err))
	}
	endpoint, where := c.endpoint, c.where
	if method != "sendMessage" {
		endpoint = c.base + method
		where = strings.TrimSuffix(c.where, "sendMessage") + method
	}
	r, err := c.api.Post(ctx, endpoint, http.Header{"Content-Type": {"application/json"}}, raw)
	if err != nil {
		if chat == "" {
			return nil, fmt.Errorf("telegram: %s: POST %s: %w", method, where, err)
		}
		return nil, fmt.Errorf("telegram: send to chat %s: POST %s: %w", chat, where, err)
	}
	var rep reply
	jsonErr := json.Unmarshal(r.Body, &rep)
	if jsonErr == nil && rep.OK && r.OK() {
		return rep.Result, nil
	}
	e := &Error{Status: r.StatusCode, Code: r.StatusCode, Chat: chat, Method: method}
	if jsonErr == nil && !rep.OK && rep.ErrorCode != 0 {
		e.Code = rep.ErrorCode
		e.Description = c.api.Snippet(rep.Description)
		if p := rep.Parameters; p != nil {
			e.RetryAfter = retryafter.Seconds(float64(p.RetryAfter))
			if id, err := p.MigrateToChatID.Int64(); err == nil && id != 0 {
				e.MigrateTo = strconv.FormatInt(id, 10)
			}
		}
	} else {
		// Not the API's JSON: a proxy's or load balancer's page (Telegram's
		// own 502 is nginx HTML). Its status is all that is said.
		e.Description = http.StatusText(r.StatusCode)
		if e.Description == "" {
			e.Description = "unexpected reply"
		}
		if r.StatusCode/100 == 3 {
			e.Description += " to " + secret.URL(c.api.Redact(r.Header.Get("Location")))
		} else if r.OK() {
			e.Description = "a reply that is not the Bot API's (a proxy?); the message may have been sent"
		}
	}
	return nil, e
}

// Error is an answer of the Bot API other than ok: its status, error_code,
// description and parameters. Send returns it wrapped in a
// *connectors.RetryableError or *connectors.PermanentError.
type Error struct {
	// Status is the HTTP status; Code is the body's error_code (the
	// status, when the body is not the API's).
	Status, Code int
	// Description is the API's description ("Bad Request: chat not
	// found"), or the status text when the body was not the API's.
	Description string
	// RetryAfter is parameters.retry_after of a 429.
	RetryAfter time.Duration
	// MigrateTo is parameters.migrate_to_chat_id: the chat became this
	// supergroup.
	MigrateTo string
	// Chat is the chat the message was for ("" for a call about none,
	// such as getUpdates).
	Chat string
	// Method is the Bot API method called ("sendMessage", "getUpdates").
	Method string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("telegram: chat %s: %d %s", e.Chat, e.Code, e.Description)
	if e.Chat == "" {
		msg = fmt.Sprintf("telegram: %s: %d %s", e.Method, e.Code, e.Description)
	}
	if h := e.hint(); h != "" {
		msg += " (" + h + ")"
	}
	return msg
}

// hint says what to do about e.
func (e *Error) hint() string {
	d := strings.ToLower(e.Description)
	switch {
	case strings.Contains(d, "webhook is active"):
		return "a webhook is set for this bot, and Telegram hands presses only to it: delete it (https://api.telegram.org/bot<token>/deleteWebhook) or stop whatever else uses this bot for a webhook"
	case strings.Contains(d, "terminated by other getupdates"):
		return "another program (or another agentwork instance) reads this bot's updates: run one receiver per bot, or give each a bot of its own"
	case e.Code == http.StatusTooManyRequests:
		return "Telegram's flood control; about 1 message a second per chat and 20 a minute per group are allowed"
	case e.Code == http.StatusUnauthorized:
		return "Telegram does not know bot_token: check it with @BotFather (/mybots → API Token); /revoke replaces it"
	case e.Code == http.StatusNotFound:
		return "check base_url, and bot_token (Telegram answers 404 to a malformed token)"
	case strings.Contains(d, "blocked by the user"):
		return "the user blocked the bot; they must unblock it (or /start it again) before it can write to them"
	case strings.Contains(d, "kicked") || strings.Contains(d, "not a member"):
		return "add the bot to the chat again (a channel needs it as an admin allowed to post)"
	case strings.Contains(d, "bot can't initiate conversation"):
		return "the user must send /start to the bot once before it can write to them"
	case e.Code == http.StatusForbidden:
		return "the bot may not write to this chat: add it, or let it post (a channel needs it as an admin)"
	case strings.Contains(d, "chat not found"):
		return "check chat_id or the target's chat, and that the bot was added to that chat"
	case strings.Contains(d, "thread not found") || strings.Contains(d, "topic"):
		return "check message_thread_id or the target's topic: the topic may be closed or deleted"
	case strings.Contains(d, "too long"):
		return "a part exceeded Telegram's limit; please report this"
	case e.Code >= 500:
		return "Telegram or the server at base_url has trouble; retried"
	case e.Code/100 == 3:
		return "base_url redirects; set it to where it points"
	}
	return ""
}

// classify wraps e as what it means for another attempt: a reply that is
// not the API's is retried, the others as their code says (a 429 after
// its retry_after).
func classify(e *Error) error {
	switch {
	case e.Status/100 == 2:
		return connectors.Retry(e, 0)
	case e.Code >= 300:
		return httpapi.Classify(e, e.Code, e.RetryAfter)
	}
	return e
}
