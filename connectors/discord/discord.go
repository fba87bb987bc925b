// Package discord is the connector that posts notifications to a Discord
// channel, or a thread of it, through a webhook
// (https://discord.com/developers/docs/resources/webhook#execute-webhook).
//
// The model's text is sent as plain text: Discord's markdown characters are
// escaped with a backslash (links stay links), and allowed_mentions lets no
// mention through but the configured one, so the text cannot notify
// @everyone or anybody else. Info notifications are sent silently
// (SUPPRESS_NOTIFICATIONS) unless notify_info is set; important ones start
// with ⚠️ and, when mention_on_important names a role or user, with that
// mention. Texts longer than MaxText are split into several messages.
//
// Discord's webhooks take no idempotency key: a notification sent again
// (after a crash between Discord's answer and the dispatcher's record of
// it) shows twice.
package discord

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/internal/httpapi"
	"github.com/agentwork/agentwork/internal/retryafter"
)

// MaxText is the longest content of one message, in characters (Unicode
// code points) as sent, escapes included: Discord's limit. Longer texts are
// split, measured by Length.
const MaxText = 2000

// ImportantMark starts the text of an important notification, after the
// mention if there is one.
const ImportantMark = "⚠️ "

// TruncatedMark ends the text of a notification the model's token limit
// cut short.
const TruncatedMark = " [cut short by the model's token limit]"

// The message flags the connector sets
// (https://discord.com/developers/docs/resources/message#message-object-message-flags).
const (
	// FlagSuppressNotifications sends a message without push and desktop
	// notifications (a "@silent" message).
	FlagSuppressNotifications = 1 << 12
)

// UserAgent is sent with every request, in the form Discord asks of API
// clients (https://discord.com/developers/docs/reference#user-agent);
// Cloudflare may block requests without one.
const UserAgent = "DiscordBot (https://github.com/agentwork/agentwork, 1)"

// maxBucketWait is the longest Send waits for an empty rate-limit bucket to
// refill before sending; a longer wait is returned as a retry.
const maxBucketWait = 5 * time.Second

// Options are what a Connector takes beside its Config.
type Options struct {
	// Client sends the requests; it is used with redirects off (a
	// redirect is reported, not followed, so the token goes nowhere else).
	// Default: a client with a transport of its own.
	Client *http.Client
}

// Connector posts notifications through a Discord webhook. Safe for
// concurrent use.
//
// Rate limits: Discord sends X-RateLimit-Remaining and
// X-RateLimit-Reset-After with every answer. When a bucket is empty, Send
// waits for it to refill (up to 5s, within ctx) before it posts, or returns
// a *connectors.RetryableError without posting: Discord counts every 429,
// 401, 403 and 404 against the IP and bans it for a while after 10,000 in
// ten minutes (https://discord.com/developers/docs/topics/rate-limits).
type Connector struct {
	api        *httpapi.Client
	endpoint   url.URL
	id         string // the webhook's id, safe to show
	username   string
	thread     string
	mention    string // <@&id> or <@id>, or ""
	roles      []string
	users      []string
	notifyInfo bool
	now        func() time.Time

	mu    sync.Mutex
	until time.Time // the bucket is empty until then
}

var _ connectors.Connector = (*Connector)(nil)

// New returns a Connector for c, which must be valid. It does no I/O.
func New(c Config, o Options) (*Connector, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("discord: %w", err)
	}
	u, _ := url.Parse(c.WebhookURL)
	m := webhookPath.FindStringSubmatch(u.Path)
	conn := &Connector{
		// The URL, its path and the token in it are secret.
		api:        httpapi.New(o.Client, c.WebhookURL, u.Path, u.EscapedPath(), m[2]),
		endpoint:   *u,
		id:         m[1],
		username:   c.Username,
		thread:     c.ThreadID,
		mention:    c.MentionOnImportant,
		notifyInfo: c.NotifyInfo,
		now:        time.Now,
	}
	if mm := mentionSyntax.FindStringSubmatch(c.MentionOnImportant); mm != nil {
		if mm[1] == "&" {
			conn.roles = []string{mm[2]}
		} else {
			conn.users = []string{mm[2]}
		}
	}
	return conn, nil
}

// CloseIdleConnections closes the connections the connector keeps open
// for its next sends.
func (c *Connector) CloseIdleConnections() { c.api.CloseIdleConnections() }

// Send posts n to the webhook's channel, or to the thread the config or
// n's target names, and waits for Discord to confirm (wait=true). A text
// longer than MaxText goes as several messages, in order, after the
// n.SentParts sent before. The receipt's MessageIDs are the messages' ids.
//
// Errors: 429 is a *connectors.RetryableError after the retry_after
// Discord sent (rounded up to whole seconds); 5xx and network failures are
// retryable; 401 (a bad token), 404 (a deleted webhook, an unknown thread),
// 403 and 400 are *connectors.PermanentError and never retried.
func (c *Connector) Send(ctx context.Context, n connectors.Notification) (connectors.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return connectors.Receipt{}, fmt.Errorf("discord: %w", err)
	}
	thread := c.thread
	if d := n.Destination(); d != "" {
		if !snowflake.MatchString(d) {
			return connectors.Receipt{}, connectors.Permanent(fmt.Errorf("discord: target %s: %q is not a thread id (digits only)", n.Target, d))
		}
		thread = d
	}
	text := n.Text
	if n.Truncated {
		text += TruncatedMark
	}
	important := n.Urgency == "important"
	prefix := ""
	if important {
		prefix = ImportantMark
		if c.mention != "" {
			prefix = c.mention + " " + ImportantMark
		}
	}
	parts := connectors.Split(text, MaxText-utf8.RuneCountInString(prefix), Length)
	return connectors.SendParts(ctx, parts, n.SentParts, func(i int, part string) (string, error) {
		p := payload{
			Content:         Escape(part),
			Username:        c.username,
			AllowedMentions: allowedMentions{Parse: []string{}},
		}
		if i == 0 && important {
			p.Content = prefix + p.Content
			p.AllowedMentions.Roles, p.AllowedMentions.Users = c.roles, c.users
		}
		if !important && !c.notifyInfo {
			p.Flags = FlagSuppressNotifications
		}
		return c.execute(ctx, thread, p)
	})
}

// payload is the body of Execute Webhook.
type payload struct {
	Content         string          `json:"content"`
	Username        string          `json:"username,omitempty"`
	AllowedMentions allowedMentions `json:"allowed_mentions"`
	Flags           int             `json:"flags,omitempty"`
}

// allowedMentions says which mentions in the content notify
// (https://discord.com/developers/docs/resources/message#allowed-mentions-object):
// an empty parse and the configured role or user only.
type allowedMentions struct {
	Parse []string `json:"parse"`
	Roles []string `json:"roles,omitempty"`
	Users []string `json:"users,omitempty"`
}

// escaped are the characters Escape puts a backslash before: those of
// Discord's markdown (bold, italic, underline, strike, code, spoilers,
// quotes, headers, lists, masked links) and of its <…> mentions, and the
// backslash itself.
const escaped = "\\*_~`|<>#-[]"

// Escape returns s with a backslash before each character of Discord's
// markdown, so that the reader sees s as written: Discord shows a
// backslashed punctuation character as it is. URLs (http:// and https://
// up to white space or <) are left as they are, so that they stay links.
func Escape(s string) string {
	var b strings.Builder
	b.Grow(len(s) + len(s)/8)
	for i := 0; i < len(s); {
		if n := urlLen(s[i:]); n > 0 {
			b.WriteString(s[i : i+n])
			i += n
			continue
		}
		c := s[i]
		if strings.IndexByte(escaped, c) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
		i++
	}
	return b.String()
}

// urlLen returns the length of the URL s starts with, or 0.
func urlLen(s string) int {
	if !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") {
		return 0
	}
	n := strings.IndexFunc(s, func(r rune) bool { return r == '<' || r == ' ' || r == '\n' || r == '\t' || r == '\r' })
	if n < 0 {
		return len(s)
	}
	return n
}

// Length is the length of s as Send counts it against MaxText: its
// characters, each one Escape may escape counted twice. It is at least the
// length of Escape(s), and it adds up over any cut of s, as
// connectors.Split needs.
func Length(s string) int {
	n := 0
	for _, r := range s {
		n++
		if r < utf8.RuneSelf && strings.IndexByte(escaped, byte(r)) >= 0 {
			n++
		}
	}
	return n
}

// message is the part of Discord's answer Send reads.
type message struct {
	ID string `json:"id"`
}

// apiError is Discord's error body
// (https://discord.com/developers/docs/reference#error-messages), and
// the fields of a 429's.
type apiError struct {
	Message    string          `json:"message"`
	Code       int             `json:"code"`
	Errors     json.RawMessage `json:"errors"`
	RetryAfter float64         `json:"retry_after"`
	Global     bool            `json:"global"`
}

// execute posts p and returns the message's id.
func (c *Connector) execute(ctx context.Context, thread string, p payload) (string, error) {
	if err := c.waitBucket(ctx); err != nil {
		return "", err
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return "", connectors.Permanent(fmt.Errorf("discord: encode the message: %w", err))
	}
	u := c.endpoint
	q := u.Query()
	q.Set("wait", "true")
	if thread != "" {
		q.Set("thread_id", thread)
	}
	u.RawQuery = q.Encode()
	h := http.Header{"Content-Type": {"application/json"}, "User-Agent": {UserAgent}}
	r, err := c.api.Post(ctx, u.String(), h, raw)
	if err != nil && !r.OK() {
		// A 2xx whose body was cut short is posted: a retry would post it
		// twice. It goes on below without the message id.
		return "", fmt.Errorf("discord: POST %s (webhook %s): %w", c.endpoint.Host, c.id, err)
	}
	c.noteBucket(r.Header)
	if r.OK() {
		var m message
		_ = json.Unmarshal(r.Body, &m) // 204 (no wait) has no body
		return m.ID, nil
	}
	return "", c.statusError(r.StatusCode, r.Header, r.Body, thread)
}

// statusError classifies an answer with an error status.
func (c *Connector) statusError(status int, h http.Header, body []byte, thread string) error {
	var e apiError
	isJSON := json.Unmarshal(body, &e) == nil
	what := "discord: webhook " + c.id
	if thread != "" {
		what += " (thread " + thread + ")"
	}
	said := ""
	if isJSON && e.Message != "" {
		said = fmt.Sprintf(": %q (code %d)", c.api.Snippet(e.Message), e.Code)
		if details := formErrors(e.Errors); details != "" {
			said += ": " + c.api.Snippet(details)
		}
	} else if s := c.api.Snippet(string(body)); s != "" {
		said = fmt.Sprintf(": %q", s)
	}
	if status == http.StatusTooManyRequests {
		d := retryAfter429(e.RetryAfter, h, c.now())
		scope := h.Get("X-RateLimit-Scope")
		if scope == "" {
			scope = "unknown"
		}
		return connectors.RateLimit(fmt.Errorf("%s answered 429: rate limited (global %t, scope %s); retry after %s", what, e.Global || h.Get("X-RateLimit-Global") == "true", scope, d), d)
	}
	hint := "Discord rejected the message"
	switch {
	case httpapi.Retryable(status):
		hint = "a fault at Discord; retrying"
	case status/100 == 3:
		hint = "a redirect, not followed: check webhook_url"
	case e.Code == 10003 || (status == http.StatusNotFound && e.Code != 10015 && thread != ""):
		hint = "no such thread in the webhook's channel: check thread_id or the target's thread id"
	case status == http.StatusNotFound:
		hint = "the webhook was deleted or webhook_url is wrong: create a webhook and update webhook_url (not retried: Discord bans IPs that keep calling a missing webhook)"
	case status == http.StatusUnauthorized:
		hint = "Discord rejected the webhook's token: check webhook_url (was the webhook's token reset?)"
	case e.Code == 220001:
		hint = "the webhook's channel is a forum: set thread_id, or name a thread in the target (dc:<thread id>)"
	case e.Code == 50006:
		hint = "the message was empty"
	case e.Code == 40333:
		hint = "Cloudflare blocks the requests of this machine; see Discord's status page"
	case e.Code == 200000 || e.Code == 240000:
		hint = "Discord's moderation blocked the message"
	case status == http.StatusForbidden:
		hint = "the webhook may not post there: check the channel's and the thread's permissions"
	}
	err := fmt.Errorf("%s answered %d%s: %s", what, status, said, hint)
	after, _ := retryafter.Header(h, c.now())
	return httpapi.Classify(err, status, roundUp(after))
}

// formErrors flattens the errors object of a 400 Invalid Form Body
// ({"content":{"_errors":[{"code":…,"message":…}]}}) into
// "content: Must be 2000 or fewer in length.".
func formErrors(raw json.RawMessage) string {
	var tree map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &tree) != nil {
		return ""
	}
	var out []string
	var walk func(path string, t map[string]json.RawMessage)
	walk = func(path string, t map[string]json.RawMessage) {
		for _, k := range slices.Sorted(maps.Keys(t)) {
			if k == "_errors" {
				var errs []struct{ Message string }
				_ = json.Unmarshal(t[k], &errs)
				for _, e := range errs {
					out = append(out, path+": "+e.Message)
				}
				continue
			}
			var sub map[string]json.RawMessage
			if json.Unmarshal(t[k], &sub) == nil {
				p := k
				if path != "" {
					p = path + "." + k
				}
				walk(p, sub)
			}
		}
	}
	walk("", tree)
	return strings.Join(out, "; ")
}

// retryAfter429 is the wait of a 429: the body's retry_after (seconds, a
// float) rounded up to whole seconds. Retry-After, in whole seconds, is
// the sanity check: a body value more than a second above it (Discord has
// been seen to send milliseconds) gives way to it, as does a missing one.
func retryAfter429(body float64, h http.Header, now time.Time) time.Duration {
	d := roundUp(retryafter.Seconds(body))
	hd, _ := retryafter.Header(h, now)
	if hd = roundUp(hd); hd > 0 && (d == 0 || d > hd+time.Second) {
		d = hd
	}
	return d
}

// roundUp rounds d up to whole seconds, as Discord's Retry-After counts.
func roundUp(d time.Duration) time.Duration { return (d + time.Second - 1).Truncate(time.Second) }

// noteBucket records an empty rate-limit bucket: X-RateLimit-Remaining 0
// and X-RateLimit-Reset-After seconds.
func (c *Connector) noteBucket(h http.Header) {
	if strings.TrimSpace(h.Get("X-RateLimit-Remaining")) != "0" {
		return
	}
	secs, err := strconv.ParseFloat(strings.TrimSpace(h.Get("X-RateLimit-Reset-After")), 64)
	wait := retryafter.Seconds(secs)
	if err != nil || wait == 0 {
		return
	}
	until := c.now().Add(wait)
	c.mu.Lock()
	if until.After(c.until) {
		c.until = until
	}
	c.mu.Unlock()
}

// waitBucket waits until the rate-limit bucket has room: at most
// maxBucketWait and within ctx, else it returns a retryable error.
func (c *Connector) waitBucket(ctx context.Context) error {
	c.mu.Lock()
	wait := c.until.Sub(c.now())
	c.mu.Unlock()
	if wait <= 0 {
		return nil
	}
	if dl, ok := ctx.Deadline(); wait > maxBucketWait || (ok && time.Until(dl) < wait) {
		return connectors.RateLimit(fmt.Errorf("discord: webhook %s: its rate limit is used up for %s; not sent (Discord counts every 429 against this machine)", c.id, wait.Round(time.Millisecond)), wait)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("discord: webhook %s: waiting for its rate limit: %w", c.id, ctx.Err())
	case <-t.C:
		return nil
	}
}
