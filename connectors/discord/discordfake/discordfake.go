// Package discordfake is a fake of a Discord webhook for tests: an
// httptest server on 127.0.0.1 that answers Execute Webhook (POST
// WebhookURL(), JSON) with Discord's own message objects and error bodies,
// records each message as a reader sees it, and can be scripted to fail.
//
//	dc := discordfake.New(t)
//	dc.RateLimit(2, 1500*time.Millisecond) // 429, retry_after 1.5, Retry-After: 2
//	dc.Fail(connectortest.Unavailable)     // every post gets 500 ...
//	dc.Recover()                           // ... until now
//
// The wire formats follow Discord's documentation:
//   - Execute Webhook, its wait and thread_id parameters and JSON params:
//     https://discord.com/developers/docs/resources/webhook#execute-webhook
//     (200 with the message object when wait=true, 204 without).
//   - content "up to 2000 characters"; a longer one gets 400 Invalid Form
//     Body (code 50035) with errors.content._errors BASE_TYPE_MAX_LENGTH
//     "Must be 2000 or fewer in length."
//     (https://discord.com/developers/docs/reference#error-messages).
//   - JSON error codes (10015 Unknown Webhook, 50027 Invalid Webhook Token,
//     50006 empty message, 50109 invalid JSON, 220001 forum without thread):
//     https://discord.com/developers/docs/topics/opcodes-and-status-codes#json
//   - 429 {"message":"You are being rate limited.","retry_after":<seconds,
//     float>,"global":<bool>} with Retry-After and the X-RateLimit-*
//     headers: https://discord.com/developers/docs/topics/rate-limits
//   - allowed_mentions and message flags:
//     https://discord.com/developers/docs/resources/message
//
// What a reader sees is an approximation of Discord's markdown: a
// backslash before punctuation shows the punctuation; unescaped * _ ~ ` |
// are taken as formatting and not shown, nor are line-start # > - markers;
// [label](url) shows label; <@id>, <@&id> and <#id> show as @id, @&id,
// #id; URLs show as they are. It is enough to tell escaped text from text
// Discord would format.
package discordfake

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/discord"
)

// The ids of the fake's webhook and its channel, and the token a new Server
// accepts.
const (
	WebhookID    = "223704706495545344"
	ChannelID    = "199737254929760256"
	GuildID      = "199737254929760257"
	DefaultToken = "discordfake-TOKEN-3d89bb7572e0fb30d8128367b3b1b44f"
)

// Options configure a Server.
type Options struct {
	// MaxText is the longest content, in characters, the fake takes.
	// Default discord.MaxText (2000).
	MaxText int
	// Forum makes the webhook's channel a forum: a post without thread_id
	// gets 400 code 220001.
	Forum bool
	// Bucket, when above 0, is how many posts the webhook takes per
	// Window (default 2s); the fake sends X-RateLimit-Limit, -Remaining,
	// -Reset-After and -Bucket, and answers a post over the limit with a
	// real 429.
	Bucket int
	Window time.Duration
}

// Post is one message the fake took.
type Post struct {
	// Content is the content as sent, escapes and all.
	Content string
	// Text is what a reader sees (see the package comment), without the
	// leading mention and the important mark.
	Text string
	// Urgency is "important" when the content starts with the important
	// mark (after a mention), else "info".
	Urgency string
	// Mentions are who the message notifies, as allowed_mentions lets
	// through: user ids, role ids as &id, "everyone" (which @here is too).
	Mentions []string
	// Flags are the message's flags; Silent is SUPPRESS_NOTIFICATIONS.
	Flags  int
	Silent bool
	// Username is the username the post asked for.
	Username string
	// ThreadID is the thread_id parameter ("" for the channel).
	ThreadID string
	// ID is the message id the fake answered with.
	ID string
	// AllowedMentions is the request's allowed_mentions, as sent.
	AllowedMentions json.RawMessage
	// Header is the request's header.
	Header http.Header
}

// Server is the fake. Its Script fails requests as Discord does:
// Unavailable is 500, Unauthorized 401 {"message": "401: Unauthorized",
// "code": 0}, BadRequest 400 Invalid Form Body, Stall no answer,
// RateLimited a 429 with retry_after the fault's wait (1s when it names
// none), Retry-After those seconds rounded up, global false. Its methods
// are safe for concurrent use.
type Server struct {
	connectortest.Recorder
	*connectortest.Script[failure]
	// URL is the server's root.
	URL string

	opts Options

	mu          sync.Mutex
	token       string
	deleted     bool
	rateLimited int
	seq         int
	window      time.Time // the bucket's window started then
	used        int       // posts in the window
	posts       []Post
}

var (
	_ connectortest.Observer      = (*Server)(nil)
	_ connectortest.FaultInjector = (*Server)(nil)
)

// New starts a fake with opts (at most one) on 127.0.0.1. It is closed
// when the test ends; requests stalled by a fault are released first.
func New(t testing.TB, opts ...Options) *Server {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.MaxText <= 0 {
		o.MaxText = discord.MaxText
	}
	if o.Window <= 0 {
		o.Window = 2 * time.Second
	}
	s := &Server{Script: connectortest.NewScript(faultFailure), opts: o, token: DefaultToken}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = srv.URL
	t.Cleanup(func() {
		s.Release()
		srv.Close()
	})
	return s
}

// WebhookURL is the webhook's URL, with the token it takes now, as
// Discord shows it (under /api).
func (s *Server) WebhookURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.URL + "/api/webhooks/" + WebhookID + "/" + s.token
}

// SetToken changes the token the webhook takes (as "Reset Token" in
// Discord does): the old URL gets 401 Invalid Webhook Token.
func (s *Server) SetToken(token string) {
	s.mu.Lock()
	s.token = token
	s.mu.Unlock()
}

// Delete deletes the webhook: every post gets 404 Unknown Webhook, until
// Recover.
func (s *Server) Delete() {
	s.mu.Lock()
	s.deleted = true
	s.mu.Unlock()
}

// Posts returns the messages taken, in order.
func (s *Server) Posts() []Post {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.posts)
}

// RateLimited returns how many requests the bucket (Options.Bucket)
// answered with 429; scripted 429s do not count.
func (s *Server) RateLimited() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rateLimited
}

// failure is how a scripted request fails.
type failure struct {
	kind       connectortest.FaultKind
	retryAfter time.Duration
	global     bool
	status     int // with body: an answer of the test's own
	header     http.Header
	body       string
}

// faultFailure is the fake's failure for f (see Server).
func faultFailure(f connectortest.Fault) failure {
	return failure{kind: f.Kind, retryAfter: cmp.Or(f.RetryAfter, time.Second)}
}

// RateLimitGlobal answers the next n requests as RateLimit does, for the
// global limit: global true, X-RateLimit-Global: true, X-RateLimit-Scope:
// global.
func (s *Server) RateLimitGlobal(n int, after time.Duration) {
	s.AnswerNext(n, failure{kind: connectortest.RateLimited, retryAfter: after, global: true})
}

// Answer answers the next n requests (-1: all, until Recover) with status,
// header (may be nil) and body, e.g. 403 {"message": "Missing
// Permissions", "code": 50013}.
func (s *Server) Answer(n, status int, header http.Header, body string) {
	s.AnswerNext(n, failure{status: status, header: header, body: body})
}

// Recover ends every scripted failure and undoes Delete.
func (s *Server) Recover() {
	s.Script.Recover()
	s.mu.Lock()
	s.deleted = false
	s.mu.Unlock()
}

var route = regexp.MustCompile(`^/api(?:/v[0-9]+)?/webhooks/([^/]+)/([^/]+)$`)

var snowflake = regexp.MustCompile(`^[0-9]{1,20}$`)

// request is the part of an Execute Webhook body the fake reads.
type request struct {
	Content         *string          `json:"content"`
	Username        string           `json:"username"`
	Flags           int              `json:"flags"`
	AllowedMentions *json.RawMessage `json:"allowed_mentions"`
	Embeds          []any            `json:"embeds"`
}

type allowed struct {
	Parse []string `json:"parse"`
	Roles []string `json:"roles"`
	Users []string `json:"users"`
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	// Read the body first: only then does the server notice a client
	// hanging up (for stalled requests).
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	m := route.FindStringSubmatch(r.URL.Path)
	if m == nil {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "404: Not Found", "code": 0})
		return
	}
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"message": "405: Method Not Allowed", "code": 0})
		return
	}
	if f, ok := s.Next(); ok {
		s.fail(w, r, f)
		return
	}
	s.mu.Lock()
	token, deleted := s.token, s.deleted
	s.mu.Unlock()
	switch {
	case m[1] != WebhookID || deleted:
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Unknown Webhook", "code": 10015})
		return
	case m[2] != token:
		writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "Invalid Webhook Token", "code": 50027})
		return
	}
	q := r.URL.Query()
	thread := q.Get("thread_id")
	if _, ok := q["thread_id"]; ok && !snowflake.MatchString(thread) {
		formError(w, "thread_id", "NUMBER_TYPE_COERCE", fmt.Sprintf("Value %q is not snowflake.", thread))
		return
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		formError(w, "content_type", "CONTENT_TYPE_INVALID", "Expected \"Content-Type\" header to be one of {'application/json', 'multipart/form-data', 'application/x-www-form-urlencoded'}.")
		return
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": "The request body contains invalid JSON.", "code": 50109})
		return
	}
	if s.opts.Forum && thread == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": "Webhooks posted to forum channels must have a thread_name or thread_id", "code": 220001})
		return
	}
	if s.bucket(w) {
		return
	}
	content := ""
	if req.Content != nil {
		content = *req.Content
	}
	if strings.TrimSpace(content) == "" && len(req.Embeds) == 0 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": "Cannot send an empty message", "code": 50006})
		return
	}
	if n := utf8.RuneCountInString(content); n > s.opts.MaxText {
		formError(w, "content", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", s.opts.MaxText))
		return
	}
	const settable = 1<<2 | discord.FlagSuppressNotifications | 1<<15 // SUPPRESS_EMBEDS, SUPPRESS_NOTIFICATIONS, IS_COMPONENTS_V2
	if req.Flags&^settable != 0 {
		formError(w, "flags", "MESSAGE_FLAGS_INVALID", "Invalid flags: only SUPPRESS_EMBEDS, SUPPRESS_NOTIFICATIONS and IS_COMPONENTS_V2 can be set.")
		return
	}
	var am *allowed
	if req.AllowedMentions != nil {
		am = &allowed{}
		if err := json.Unmarshal(*req.AllowedMentions, am); err != nil {
			formError(w, "allowed_mentions", "MODEL_TYPE_CONVERT", "Only dictionaries may be used in a ModelType")
			return
		}
		if msg := checkAllowed(am); msg != "" {
			formError(w, "allowed_mentions", "ALLOWED_MENTIONS_INVALID", msg)
			return
		}
	}
	p := Post{
		Content:  content,
		Username: req.Username,
		Flags:    req.Flags,
		Silent:   req.Flags&discord.FlagSuppressNotifications != 0,
		ThreadID: thread,
		Header:   r.Header.Clone(),
		Urgency:  "info",
	}
	if req.AllowedMentions != nil {
		p.AllowedMentions = slices.Clone(*req.AllowedMentions)
	}
	rest := content
	if after, ok := afterMention(rest); ok {
		rest, p.Urgency = after, "important"
	} else if after, ok := strings.CutPrefix(rest, discord.ImportantMark); ok {
		rest, p.Urgency = after, "important"
	}
	p.Text, _ = Render(rest)
	_, candidates := Render(content)
	p.Mentions = notified(candidates, am)
	msg := s.record(&p)
	if b, _ := strconv.ParseBool(q.Get("wait")); !b {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, msg)
}

// fail answers a request with its scripted failure.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, f failure) {
	switch {
	case f.body != "":
		w.Header().Set("Content-Type", "application/json")
		for k, v := range f.header {
			w.Header()[k] = v
		}
		w.WriteHeader(f.status)
		_, _ = io.WriteString(w, f.body)
	case f.kind == connectortest.Stall:
		s.Stall(r.Context())
	case f.kind == connectortest.RateLimited:
		rateLimited(w, f.retryAfter, f.global)
	case f.kind == connectortest.Unavailable:
		writeJSON(w, http.StatusInternalServerError, map[string]any{"message": "500: Internal Server Error", "code": 0})
	case f.kind == connectortest.Unauthorized:
		writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "401: Unauthorized", "code": 0})
	case f.kind == connectortest.BadRequest:
		formError(w, "content", "BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.")
	}
}

// rateLimited answers 429 as Discord does.
func rateLimited(w http.ResponseWriter, after time.Duration, global bool) {
	h := w.Header()
	h.Set("Retry-After", strconv.Itoa(int(math.Ceil(after.Seconds()))))
	if global {
		h.Set("X-RateLimit-Global", "true")
		h.Set("X-RateLimit-Scope", "global")
	} else {
		h.Set("X-RateLimit-Scope", "user")
	}
	writeJSON(w, http.StatusTooManyRequests, map[string]any{
		"message":     "You are being rate limited.",
		"retry_after": math.Round(after.Seconds()*1000) / 1000,
		"global":      global,
	})
}

// bucket applies Options.Bucket: it sets the rate-limit headers, and
// answers 429 and reports true when the window's posts are used up.
func (s *Server) bucket(w http.ResponseWriter) bool {
	if s.opts.Bucket <= 0 {
		return false
	}
	s.mu.Lock()
	now := time.Now()
	if now.Sub(s.window) >= s.opts.Window {
		s.window, s.used = now, 0
	}
	resetAfter := s.opts.Window - now.Sub(s.window)
	over := s.used >= s.opts.Bucket
	if over {
		s.rateLimited++
	} else {
		s.used++
	}
	remaining := s.opts.Bucket - s.used
	s.mu.Unlock()
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(s.opts.Bucket))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("X-RateLimit-Reset-After", strconv.FormatFloat(resetAfter.Seconds(), 'f', 3, 64))
	h.Set("X-RateLimit-Reset", strconv.FormatFloat(float64(now.Add(resetAfter).UnixMilli())/1000, 'f', 3, 64))
	h.Set("X-RateLimit-Bucket", "discordfake-webhook")
	if over {
		rateLimited(w, resetAfter, false)
	}
	return over
}

// checkAllowed applies Discord's rules to allowed_mentions.
func checkAllowed(a *allowed) string {
	for _, p := range a.Parse {
		if p != "roles" && p != "users" && p != "everyone" {
			return fmt.Sprintf("Value %q is not a valid enum value.", p)
		}
	}
	if slices.Contains(a.Parse, "users") && len(a.Users) > 0 {
		return `parse:["users"] and users: [ids] are mutually exclusive.`
	}
	if slices.Contains(a.Parse, "roles") && len(a.Roles) > 0 {
		return `parse:["roles"] and roles: [ids] are mutually exclusive.`
	}
	return ""
}

// notified returns the mention candidates allowed_mentions lets notify;
// without allowed_mentions, Discord parses them all.
func notified(candidates []string, a *allowed) []string {
	var out []string
	for _, c := range candidates {
		ok := a == nil
		switch {
		case ok:
		case c == "everyone":
			ok = slices.Contains(a.Parse, "everyone")
		case strings.HasPrefix(c, "&"):
			ok = slices.Contains(a.Parse, "roles") || slices.Contains(a.Roles, c[1:])
		default:
			ok = slices.Contains(a.Parse, "users") || slices.Contains(a.Users, c)
		}
		if ok {
			out = append(out, c)
		}
	}
	return out
}

// afterMention returns s after a leading "<@…> " and the important mark.
func afterMention(s string) (string, bool) {
	m := leadMention.FindString(s)
	if m == "" {
		return s, false
	}
	if rest, ok := strings.CutPrefix(s[len(m):], discord.ImportantMark); ok {
		return rest, true
	}
	return s, false
}

var leadMention = regexp.MustCompile(`^<@[&!]?[0-9]+> `)

// record stores p with a new message id and tells the Recorder; it returns
// the message object Discord answers with.
func (s *Server) record(p *Post) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	now := time.Now()
	p.ID = strconv.FormatInt((now.UnixMilli()-1420070400000)<<22|int64(s.seq&0xfff), 10)
	s.posts = append(s.posts, *p)
	channel := ChannelID
	if p.ThreadID != "" {
		channel = p.ThreadID
	}
	s.Add(connectortest.Message{Text: p.Text, Urgency: p.Urgency, Destination: channel})
	username := p.Username
	if username == "" {
		username = "agentwork fake"
	}
	var users, roles []string
	everyone := false
	for _, m := range p.Mentions {
		switch {
		case m == "everyone":
			everyone = true
		case strings.HasPrefix(m, "&"):
			roles = append(roles, m[1:])
		default:
			users = append(users, m)
		}
	}
	mentions := []any{}
	for _, u := range users {
		mentions = append(mentions, map[string]any{"id": u, "username": "user" + u, "discriminator": "0", "global_name": nil, "avatar": nil})
	}
	return map[string]any{
		"id":               p.ID,
		"type":             0,
		"content":          p.Content,
		"channel_id":       channel,
		"author":           map[string]any{"bot": true, "id": WebhookID, "username": username, "avatar": nil, "discriminator": "0000"},
		"attachments":      []any{},
		"embeds":           []any{},
		"mentions":         mentions,
		"mention_roles":    append([]string{}, roles...),
		"pinned":           false,
		"mention_everyone": everyone,
		"tts":              false,
		"timestamp":        now.UTC().Format("2006-01-02T15:04:05.000000-07:00"),
		"edited_timestamp": nil,
		"flags":            p.Flags,
		"components":       []any{},
		"webhook_id":       WebhookID,
	}
}

// formError answers 400 Invalid Form Body with one error for field.
func formError(w http.ResponseWriter, field, code, message string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{
		"message": "Invalid Form Body",
		"code":    50035,
		"errors": map[string]any{
			field: map[string]any{"_errors": []any{map[string]any{"code": code, "message": message}}},
		},
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	raw, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(raw)
}

var (
	// mentionEntity is a user, role or channel mention, a timestamp or a
	// custom emoji.
	mentionEntity = regexp.MustCompile(`^<(@!?|@&|#)([0-9]+)>|^<t:(-?[0-9]+)(:[tTdDfFR])?>|^<a?:([A-Za-z0-9_]+):[0-9]+>`)
	// maskedLink is [label](url).
	maskedLink = regexp.MustCompile(`^\[([^\[\]]*)\]\((https?://[^\s)]+)\)`)
	// lineMarker is a header, subtext, quote or list marker at a line's start.
	lineMarker = regexp.MustCompile(`^[ \t]*(#{1,3} |-# |>>> |> |[-*] )`)
)

// Render returns content as a reader sees it (see the package comment),
// and the mentions in it that may notify: user ids, role ids as &id, and
// "everyone" for @everyone and @here.
func Render(content string) (string, []string) {
	var b strings.Builder
	var mentions []string
	lineStart := true
	for i := 0; i < len(content); {
		rest := content[i:]
		if lineStart {
			lineStart = false
			if m := lineMarker.FindString(rest); m != "" {
				i += len(m)
				continue
			}
		}
		c := rest[0]
		switch {
		case strings.HasPrefix(rest, "http://") || strings.HasPrefix(rest, "https://"):
			n := strings.IndexAny(rest, "< \t\r\n")
			if n < 0 {
				n = len(rest)
			}
			b.WriteString(rest[:n])
			i += n
		case c == '\\' && len(rest) > 1 && rest[1] < utf8.RuneSelf && isPunct(rest[1]):
			b.WriteByte(rest[1])
			i += 2
		case c == '<':
			m := mentionEntity.FindStringSubmatch(rest)
			if m == nil {
				b.WriteByte(c)
				i++
				continue
			}
			switch {
			case m[1] == "@" || m[1] == "@!":
				b.WriteString("@" + m[2])
				mentions = append(mentions, m[2])
			case m[1] == "@&":
				b.WriteString("@&" + m[2])
				mentions = append(mentions, "&"+m[2])
			case m[1] == "#":
				b.WriteString("#" + m[2])
			case m[3] != "":
				b.WriteString("[time " + m[3] + "]")
			default:
				b.WriteString(":" + m[5] + ":")
			}
			i += len(m[0])
		case c == '@' && (strings.HasPrefix(rest, "@everyone") || strings.HasPrefix(rest, "@here")):
			mentions = append(mentions, "everyone")
			b.WriteByte(c)
			i++
		case c == '[':
			if m := maskedLink.FindStringSubmatch(rest); m != nil {
				b.WriteString(m[1])
				i += len(m[0])
				continue
			}
			b.WriteByte(c)
			i++
		case strings.IndexByte("*_~`|", c) >= 0:
			i++
		default:
			if c == '\n' {
				lineStart = true
			}
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), mentions
}

// isPunct reports whether the ASCII byte c is neither a letter, a digit
// nor white space: what a backslash escapes in Discord's markdown.
func isPunct(c byte) bool {
	return !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == ' ' || c == '\t' || c == '\n' || c == '\r')
}
