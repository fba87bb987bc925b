// Package slackfake is a fake of Slack for tests: an httptest server on
// 127.0.0.1 that answers chat.postMessage (POST <URL>/api/chat.postMessage,
// so base_url is BaseURL()) and an incoming webhook (POST WebhookURL())
// with Slack's own success and error replies, records each message as a
// reader sees it, and can be scripted to fail.
//
//	api := slackfake.New(t)
//	api.RateLimit(2, 3*time.Second) // the next two posts get 429, Retry-After: 3
//	api.Fail(connectortest.Unavailable) // every post gets 500 ...
//	api.Recover()                       // ... until now
//
// The wire formats follow Slack's documentation:
//   - chat.postMessage: https://api.slack.com/methods/chat.postMessage
//     (the success body with channel, ts and message; errors as HTTP 200
//     {"ok":false,"error":"<code>"}, ratelimited as 429 with Retry-After),
//     and the common errors every method may return (not_authed,
//     invalid_auth, invalid_json, internal_error, …).
//   - incoming webhooks: 200 "ok", or a status with a plain-text code
//     (https://api.slack.com/changelog/2016-05-17-changes-to-errors-for-incoming-webhooks:
//     400 invalid_payload, 403 action_prohibited, 404 channel_not_found,
//     410 channel_is_archived, 500 rollup_error); a wrong key gets 403
//     invalid_token and an unknown path 404 no_service, as Slack answers
//     (slackapi/slack-github-action#249,
//     cloudfoundry-community/slack-notification-resource#96).
//   - rate limits: 429 with Retry-After, for both
//     (https://api.slack.com/apis/rate-limits).
//   - text: & < > escaped as &amp; &lt; &gt;, <…> are mentions and links
//     (https://api.slack.com/reference/surfaces/formatting).
//
// Slack does not refuse a long text, it truncates it above 40,000
// characters; the fake enforces Options.MaxText (default slack.MaxText,
// 4,000 characters as the reader sees them) so that a connector that does
// not split is caught: chat.postMessage answers msg_too_long, a webhook
// 400 invalid_payload.
package slackfake

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/slack"
)

// DefaultToken is the bot token a new Server accepts.
const DefaultToken = "xoxb-1234567890-slackfake-TOKEN"

// The ids of the fake's workspace, app and webhook.
const (
	Team    = "T0FAKE0001"
	Bot     = "B0FAKE0001"
	User    = "U0FAKE0001"
	App     = "A0FAKE0001"
	HookKey = "slackfakeHOOKkey0123456789"
)

// Options configure a Server.
type Options struct {
	// Token is the bot token chat.postMessage accepts. Default DefaultToken.
	Token string
	// MaxText is the longest text, in characters as the reader sees it,
	// the fake takes. Default slack.MaxText.
	MaxText int
}

// Post is one message the fake took.
type Post struct {
	// Webhook: it came through the incoming webhook, else chat.postMessage.
	Webhook bool
	// Channel is the channel as the request named it ("" for the webhook);
	// ChannelID the id the fake answered with.
	Channel, ChannelID string
	// Raw is the text as sent, escapes and all.
	Raw string
	// Text is what a reader sees: mentions and links shown as Slack shows
	// them, escapes undone, without the leading mention and the important
	// mark.
	Text string
	// Urgency is "important" when the text starts with the important mark
	// (after a mention), else "info".
	Urgency string
	// Mentions are who the message notifies: "channel", "here",
	// "everyone", user group ids (S…) and user ids (U…, W…).
	Mentions []string
	// Mrkdwn is whether Slack formats the text (the request's mrkdwn,
	// default true).
	Mrkdwn bool
	// TS is the message's ts (chat.postMessage).
	TS string
	// Header is the request's header.
	Header http.Header
}

// Server is the fake. Its Script fails requests as Slack does:
// Unavailable is 500 (rollup_error, internal_error), Unauthorized a
// rejected key or token, BadRequest a rejected message, Stall no answer,
// RateLimited a 429 with Retry-After, the fault's wait in whole seconds
// rounded up (1 when it names none). Its methods are safe for concurrent
// use.
type Server struct {
	connectortest.Recorder
	*connectortest.Script[failure]
	// URL is the server's root.
	URL string

	opts Options

	mu    sync.Mutex
	token string
	seq   int
	posts []Post
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
	if o.Token == "" {
		o.Token = DefaultToken
	}
	if o.MaxText <= 0 {
		o.MaxText = slack.MaxText
	}
	s := &Server{Script: connectortest.NewScript(faultFailure), opts: o, token: o.Token}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = srv.URL
	t.Cleanup(func() {
		s.Release()
		srv.Close()
	})
	return s
}

// BaseURL is the base_url of a bot_token connector for this server.
func (s *Server) BaseURL() string { return s.URL + "/api" }

// WebhookURL is the incoming webhook's URL.
func (s *Server) WebhookURL() string { return s.URL + "/services/" + Team + "/" + Bot + "/" + HookKey }

// Token is the bot token the server accepts now.
func (s *Server) Token() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token
}

// SetToken changes the bot token the server accepts: the old one gets
// invalid_auth from now on.
func (s *Server) SetToken(token string) {
	s.mu.Lock()
	s.token = token
	s.mu.Unlock()
}

// Posts returns the messages taken, in order.
func (s *Server) Posts() []Post {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.posts)
}

// failure is how a scripted request fails: a fault kind, or a Slack error
// code.
type failure struct {
	kind       connectortest.FaultKind
	code       string
	retryAfter time.Duration
}

// faultFailure is the fake's failure for f (see Server).
func faultFailure(f connectortest.Fault) failure {
	return failure{kind: f.Kind, retryAfter: cmp.Or(f.RetryAfter, time.Second)}
}

// ErrorNext answers the next n requests (-1: all, until Recover) with the
// Slack error code: chat.postMessage with HTTP 200 {"ok":false,"error":code}
// (429 with Retry-After: 1 for ratelimited), the webhook with the code's
// status (400 invalid_payload, 403 action_prohibited, 404
// channel_not_found, 410 channel_is_archived, 500 rollup_error; 400 for
// others).
func (s *Server) ErrorNext(n int, code string) {
	s.AnswerNext(n, failure{code: code, retryAfter: time.Second})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	// Read the body first: only then does the server notice a client
	// hanging up (for stalled requests).
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	webhook := strings.HasPrefix(r.URL.Path, "/services/")
	if !webhook && !strings.HasPrefix(r.URL.Path, "/api/") {
		plain(w, http.StatusNotFound, "no_service")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		plain(w, http.StatusMethodNotAllowed, "invalid_method")
		return
	}
	if f, ok := s.Next(); ok {
		s.fail(w, r, webhook, f)
		return
	}
	if webhook {
		s.serveWebhook(w, r, body)
		return
	}
	s.serveAPI(w, r, body)
}

// fail answers a request with its scripted failure.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, webhook bool, f failure) {
	code := f.code
	switch f.kind {
	case connectortest.Stall:
		s.Stall(r.Context())
		return
	case connectortest.RateLimited:
		code = "ratelimited"
	case connectortest.Unavailable:
		if webhook {
			code = "rollup_error"
		} else {
			code = "internal_error"
		}
	case connectortest.Unauthorized:
		if webhook {
			code = "invalid_token"
		} else {
			code = "invalid_auth"
		}
	case connectortest.BadRequest:
		if webhook {
			code = "invalid_payload"
		} else {
			code = "invalid_arguments"
		}
	}
	status := http.StatusOK
	switch {
	case code == "ratelimited":
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(f.retryAfter.Seconds()))))
	case f.kind == connectortest.Unavailable:
		status = http.StatusInternalServerError
	}
	if !webhook {
		apiError(w, status, code)
		return
	}
	if code == "ratelimited" {
		plain(w, status, "rate_limited")
		return
	}
	plain(w, webhookStatus(code), code)
}

// webhookStatus is the HTTP status an incoming webhook answers code with.
func webhookStatus(code string) int {
	switch code {
	case "action_prohibited", "invalid_token":
		return http.StatusForbidden
	case "channel_not_found", "no_service":
		return http.StatusNotFound
	case "channel_is_archived":
		return http.StatusGone
	case "rollup_error":
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

// message is the part of a request body the fake reads.
type message struct {
	Channel string `json:"channel"`
	Text    string `json:"text"`
	Mrkdwn  *bool  `json:"mrkdwn"`
}

func (s *Server) serveWebhook(w http.ResponseWriter, r *http.Request, body []byte) {
	want := "/services/" + Team + "/" + Bot + "/"
	key, ok := strings.CutPrefix(r.URL.Path, want)
	switch {
	case !ok:
		plain(w, http.StatusNotFound, "no_service")
		return
	case key != HookKey:
		plain(w, http.StatusForbidden, "invalid_token")
		return
	}
	var m message
	if err := json.Unmarshal(body, &m); err != nil || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		plain(w, http.StatusBadRequest, "invalid_payload")
		return
	}
	if strings.TrimSpace(m.Text) == "" {
		plain(w, http.StatusBadRequest, "no_text")
		return
	}
	p, n := s.read(m, r.Header)
	if n > s.opts.MaxText {
		plain(w, http.StatusBadRequest, "invalid_payload")
		return
	}
	p.Webhook = true
	s.record(p)
	plain(w, http.StatusOK, "ok")
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, body []byte) {
	if r.URL.Path != "/api/chat.postMessage" {
		apiError(w, http.StatusOK, "unknown_method")
		return
	}
	auth := r.Header.Get("Authorization")
	tok, bearer := strings.CutPrefix(auth, "Bearer ")
	switch {
	case auth == "" || !bearer:
		apiError(w, http.StatusOK, "not_authed")
		return
	case tok != s.Token():
		apiError(w, http.StatusOK, "invalid_auth")
		return
	}
	ct := r.Header.Get("Content-Type")
	if !strings.HasPrefix(ct, "application/json") {
		// The fake reads JSON only; Slack would read a form too.
		apiError(w, http.StatusOK, "invalid_arguments")
		return
	}
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		apiError(w, http.StatusOK, "invalid_json")
		return
	}
	switch {
	case m.Channel == "":
		apiError(w, http.StatusOK, "channel_not_found")
		return
	case strings.TrimSpace(m.Text) == "":
		apiError(w, http.StatusOK, "no_text")
		return
	}
	p, n := s.read(m, r.Header)
	if n > s.opts.MaxText {
		apiError(w, http.StatusOK, "msg_too_long")
		return
	}
	p.Channel, p.ChannelID = m.Channel, channelID(m.Channel)
	p.TS = s.record(p)
	reply := map[string]any{
		"ok":      true,
		"channel": p.ChannelID,
		"ts":      p.TS,
		"message": map[string]any{
			"type":    "message",
			"subtype": "bot_message",
			"text":    p.Raw,
			"user":    User,
			"bot_id":  Bot,
			"app_id":  App,
			"team":    Team,
			"ts":      p.TS,
		},
	}
	if !strings.Contains(strings.ToLower(ct), "charset=utf-8") {
		// Slack warns about a JSON body without a charset.
		reply["warning"] = "missing_charset"
		reply["response_metadata"] = map[string]any{"warnings": []string{"missing_charset"}}
	}
	writeJSON(w, http.StatusOK, reply)
}

// read renders a request's message as a reader sees it, and returns the
// length of the whole text as shown, mention and mark included.
func (s *Server) read(m message, h http.Header) (Post, int) {
	p := Post{Raw: m.Text, Mrkdwn: m.Mrkdwn == nil || *m.Mrkdwn, Urgency: "info", Header: h.Clone()}
	body := m.Text
	if rest, ok := afterMention(body); ok {
		body, p.Urgency = rest, "important"
	} else if rest, ok := strings.CutPrefix(body, slack.ImportantMark); ok {
		body, p.Urgency = rest, "important"
	}
	p.Text, _ = Render(body, p.Mrkdwn)
	var whole string
	whole, p.Mentions = Render(m.Text, p.Mrkdwn)
	return p, utf8.RuneCountInString(whole)
}

// afterMention returns s after a leading "<mention> " and the important
// mark.
func afterMention(s string) (string, bool) {
	end := strings.IndexByte(s, '>')
	if !strings.HasPrefix(s, "<") || end < 0 {
		return s, false
	}
	if rest, ok := strings.CutPrefix(s[end+1:], " "+slack.ImportantMark); ok {
		return rest, true
	}
	return s, false
}

// record stores p, tells the Recorder, and returns p's ts.
func (s *Server) record(p Post) string {
	s.mu.Lock()
	s.seq++
	p.TS = fmt.Sprintf("%d.%06d", time.Now().Unix(), s.seq)
	s.posts = append(s.posts, p)
	s.Add(connectortest.Message{Text: p.Text, Urgency: p.Urgency, Destination: p.Channel})
	s.mu.Unlock()
	return p.TS
}

// Render returns Slack message text as a reader sees it, and whom it
// notifies: <!channel>, <!here> and <!everyone> show as @channel, @here,
// @everyone and notify them, <!subteam^S…> and <@U…> show their label (or
// @id) and notify the group or user, <#C…|name> shows #name, <url|label>
// shows label and <url> the url; &amp; &lt; &gt; show as & < >. With
// mrkdwn, the characters of bold, italic, strike and code (* _ ~ `) are
// taken as formatting and not shown (a simplification of Slack's rules,
// enough to tell formatted text from plain).
func Render(text string, mrkdwn bool) (string, []string) {
	var b strings.Builder
	var mentions []string
	for i := 0; i < len(text); {
		switch c := text[i]; {
		case c == '<':
			end := strings.IndexByte(text[i:], '>')
			if end < 0 {
				b.WriteByte(c)
				i++
				continue
			}
			shown, who := entity(text[i+1 : i+end])
			b.WriteString(unescape(shown))
			if who != "" {
				mentions = append(mentions, who)
			}
			i += end + 1
		case c == '&':
			n := 1
			for _, e := range []string{"&amp;", "&lt;", "&gt;"} {
				if strings.HasPrefix(text[i:], e) {
					b.WriteString(unescape(e))
					n = len(e)
					break
				}
			}
			if n == 1 {
				b.WriteByte(c)
			}
			i += n
		case mrkdwn && strings.IndexByte("*_~`", c) >= 0:
			i++
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), mentions
}

var unescaper = strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">")

func unescape(s string) string { return unescaper.Replace(s) }

// entity returns how the <…> entity e shows, and whom it notifies.
func entity(e string) (shown, who string) {
	target, label, hasLabel := strings.Cut(e, "|")
	switch {
	case target == "!channel" || target == "!here" || target == "!everyone":
		return "@" + target[1:], target[1:]
	case strings.HasPrefix(target, "!subteam^"):
		id := strings.TrimPrefix(target, "!subteam^")
		if hasLabel {
			return label, id
		}
		return "@" + id, id
	case strings.HasPrefix(target, "!"):
		return label, "" // <!date^…|fallback> and the like
	case strings.HasPrefix(target, "@"):
		if hasLabel {
			return label, target[1:]
		}
		return target, target[1:]
	case strings.HasPrefix(target, "#"):
		if hasLabel {
			return "#" + label, ""
		}
		return target, ""
	case hasLabel:
		return label, ""
	}
	return target, ""
}

// channelID is the id the fake gives a channel: a C… id as it is, a #name
// a stable made-up id.
func channelID(ch string) string {
	if !strings.HasPrefix(ch, "#") {
		return ch
	}
	sum := sha256.Sum256([]byte(ch))
	return "C" + strings.ToUpper(hex.EncodeToString(sum[:5]))
}

func plain(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func apiError(w http.ResponseWriter, status int, code string) {
	writeJSON(w, status, map[string]any{"ok": false, "error": code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	raw, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(raw)
}
