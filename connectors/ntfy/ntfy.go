// Package ntfy is the connector that publishes notifications to an ntfy
// topic (https://ntfy.sh or a self-hosted server), which pushes them to
// the ntfy apps on phones and desktops.
//
// Each message is one POST {base_url}/{topic} whose body is the text and
// whose headers carry the rest (https://docs.ntfy.sh/publish/):
//
//	POST /mytopic
//	Authorization: Bearer tk_...        (or Basic; none for an open topic)
//	Content-Type: text/plain; charset=utf-8
//	X-Title: agentwork: heartbeat/default
//	X-Priority: 4
//	X-Tags: warning
//
//	Disk /var is 95% full
//
// The raw body, rather than "publish as JSON", keeps the limit plain: the
// server takes at most 4096 bytes of message and no more JSON than twice
// that, which a text full of quotes could pass after escaping. Headers that
// are not printable ASCII are RFC 2047 encoded, which ntfy decodes.
//
// Quirks (binwiederhier/ntfy server/server.go, util/peek.go):
//   - The limit is in bytes, and a body of exactly 4096 bytes already counts
//     as too long (Peek reports LimitReached when it filled its buffer): a
//     server with attachments turns it into a file, one without answers 400
//     (40014). Texts are split at MaxMessage, 4095 bytes.
//   - The server trims white space around the message.
//   - Rate limits answer 429 with a JSON error and usually no Retry-After
//     (a proxy in front may add one, which is honoured).
//   - ntfy has no idempotency key: a send repeated after a crash shows
//     twice.
package ntfy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/internal/headertext"
	"github.com/agentwork/agentwork/connectors/internal/httpapi"
	"github.com/agentwork/agentwork/internal/retryafter"
	"github.com/agentwork/agentwork/internal/secret"
)

// MaxMessage is the longest message, in bytes, the connector sends in one
// publish: one less than ntfy's default message-size-limit of 4096.
const MaxMessage = 4095

// Bytes is the measure of MaxMessage: the length of s in bytes.
func Bytes(s string) int { return len(s) }

// The priorities of ntfy (1 min … 5 max) an urgency maps to.
const (
	PriorityInfo      = 3 // default: sound and vibration as the app is set up
	PriorityImportant = 4 // high: a long vibration burst and a pop-over
)

// TruncatedMark is appended to a text the model's token limit cut short.
const TruncatedMark = " [cut short by the model's token limit]"

// Options configures a Connector. See Config for the fields.
type Options struct {
	BaseURL  string
	Topic    string
	Token    string
	Username string
	Password string
	Title    string
	Tags     []string
	// Client sends the requests; it is used with redirects off (a POST
	// turned into a GET would be lost silently). Default: a client with a
	// transport of its own and a timeout of a minute.
	Client *http.Client
}

// Connector publishes notifications to an ntfy topic. Safe for concurrent
// use.
type Connector struct {
	base  string // without a trailing slash
	topic string
	auth  string // the Authorization header, or ""
	title string
	tags  []string
	api   *httpapi.Client
}

var _ connectors.Connector = (*Connector)(nil)

// New returns a Connector. It does no I/O.
func New(opts Options) (*Connector, error) {
	cfg := Config{BaseURL: opts.BaseURL, Topic: opts.Topic, Token: opts.Token, Username: opts.Username, Password: opts.Password, Title: opts.Title, Tags: opts.Tags}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ntfy: %w", err)
	}
	c := &Connector{
		base:  strings.TrimSuffix(cmpOr(opts.BaseURL, DefaultBaseURL), "/"),
		topic: opts.Topic,
		title: cmpOr(opts.Title, DefaultTitle),
		tags:  opts.Tags,
	}
	secrets := []string{opts.Token, opts.Password}
	if len(opts.Topic) >= secret.Min {
		// A shorter topic is no secret anyone relies on, and redacting it
		// would mangle words in the server's messages.
		secrets = append(secrets, opts.Topic)
	}
	switch {
	case opts.Token != "":
		c.auth = "Bearer " + opts.Token
	case opts.Username != "":
		basic := base64.StdEncoding.EncodeToString([]byte(opts.Username + ":" + opts.Password))
		c.auth = "Basic " + basic
		secrets = append(secrets, basic)
	}
	hc := opts.Client
	if hc == nil {
		hc = &http.Client{Timeout: time.Minute}
	}
	c.api = httpapi.New(hc, secrets...)
	return c, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Send publishes n to the connector's topic, or to the topic n's target
// names, split into messages of at most MaxMessage bytes. The receipt's
// message ids are ntfy's. A 429 is a *connectors.RetryableError (after the
// Retry-After, if the answer has one); 401, 403 and other 4xx are
// *connectors.PermanentError; 5xx and network errors are retryable.
func (c *Connector) Send(ctx context.Context, n connectors.Notification) (connectors.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return connectors.Receipt{}, fmt.Errorf("ntfy: %w", err)
	}
	topic, where := c.topic, c.base+"/<topic>"
	if d := n.Destination(); d != "" {
		if err := CheckTopic(d); err != nil {
			return connectors.Receipt{}, connectors.Permanent(fmt.Errorf("ntfy: destination: %w", err))
		}
		topic, where = d, c.base+"/"+d
	}
	text := strings.ToValidUTF8(n.Text, "\uFFFD")
	if n.Truncated {
		text += TruncatedMark
	}
	h := c.headers(n)
	return connectors.SendParts(ctx, connectors.Split(text, MaxMessage, Bytes), n.SentParts, func(_ int, part string) (string, error) {
		return c.publish(ctx, topic, where, h, part)
	})
}

// headers are the publish headers of n's messages.
func (c *Connector) headers(n connectors.Notification) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	if c.auth != "" {
		h.Set("Authorization", c.auth)
	}
	if title := headertext.Fill(c.title, n.Source, n.Name); title != "" {
		h.Set("X-Title", headertext.Encode(title))
	}
	prio, tags := PriorityInfo, c.tags
	if n.Urgency == "important" {
		prio, tags = PriorityImportant, append(tags[:len(tags):len(tags)], "warning")
	}
	h.Set("X-Priority", strconv.Itoa(prio))
	if len(tags) > 0 {
		h.Set("X-Tags", headertext.Encode(strings.Join(tags, ",")))
	}
	return h
}

// message is the part of ntfy's answer to a publish the connector reads
// (server/types.go, message).
type message struct {
	ID    string `json:"id"`
	Event string `json:"event"`
}

// apiError is ntfy's error body (server/errors.go, errHTTP):
// {"code":40101,"http":401,"error":"unauthorized","link":"..."}.
type apiError struct {
	Code    int    `json:"code"`
	HTTP    int    `json:"http"`
	Message string `json:"error"`
}

// publish sends one message and returns the id ntfy gave it. where names
// the endpoint in errors (the configured topic is left out).
func (c *Connector) publish(ctx context.Context, topic, where string, h http.Header, text string) (string, error) {
	r, err := c.api.Post(ctx, c.base+"/"+url.PathEscape(topic), h, []byte(text))
	switch {
	case err != nil && r.OK():
		return "", nil // published; only the reply was cut short: a retry would publish it twice
	case err != nil:
		return "", fmt.Errorf("ntfy: POST %s: %w", where, err)
	}
	if r.OK() {
		var m message
		if err := json.Unmarshal(r.Body, &m); err != nil || m.ID == "" {
			return "", connectors.Permanent(fmt.Errorf("ntfy: POST %s: %s answered without an ntfy message (is base_url an ntfy server?)", where, r.Status))
		}
		return m.ID, nil
	}
	return "", c.classify(r, where)
}

// classify maps an ntfy error answer to a retryable or permanent error.
func (c *Connector) classify(r httpapi.Reply, where string) error {
	msg := r.Status
	var e apiError
	if json.Unmarshal(r.Body, &e) == nil && e.Message != "" {
		msg = fmt.Sprintf("%s (ntfy error %d: %s)", r.Status, e.Code, e.Message)
	} else if s := c.api.Snippet(string(r.Body)); s != "" {
		msg += ": " + s
	}
	err := fmt.Errorf("ntfy: POST %s: %s", where, c.api.Redact(msg))
	switch code := r.StatusCode; {
	case code == http.StatusTooManyRequests:
		err = fmt.Errorf("%w; ntfy limits requests per visitor (see https://docs.ntfy.sh/publish/#limitations)", err)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		err = fmt.Errorf("%w; check token (or username and password) and that the user may write to the topic", err)
	case code/100 == 3:
		loc := c.api.Redact(secret.URL(r.Header.Get("Location")))
		err = fmt.Errorf("%w; the server redirects to %s: set base_url to the address it redirects to", err, loc)
	}
	after, _ := retryafter.Header(r.Header, time.Now())
	return httpapi.Classify(err, r.StatusCode, after)
}
