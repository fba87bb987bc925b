// Package webhook is the connector that POSTs each notification to a URL
// of the user's, signed the Standard Webhooks way
// (https://github.com/standard-webhooks/standard-webhooks, spec v1.0.0)
// with the same code the inbound webhook trigger verifies signatures with
// (internal/stdwebhook).
//
// A request:
//
//	POST <url>
//	Content-Type: application/json
//	webhook-id: <the notification id, '.' written %2E>
//	webhook-timestamp: <Unix seconds of this attempt>
//	webhook-signature: v1,<base64> [v1,<base64> ...]   (one per secret)
//
//	{"specversion":"1.0","id":"<notification id>","source":"agentwork/connectors/<name>",
//	 "type":"agentwork.<source>.notification","subject":"<name>","time":"...",
//	 "datacontenttype":"application/json","runid":"...",
//	 "data":{"id","run_id","request_id","source","name","text","urgency",
//	         "truncated","target","time","metadata"}}
//
// The body is a CloudEvents 1.0 event in its JSON format (the envelope the
// nats connector publishes), sent as application/json so that any JSON
// receiver reads it. webhook-id is the same on every attempt of a
// notification: it is the receiver's idempotency key. A text is never
// split.
//
// The connector refuses to connect to link-local, private and cloud
// metadata addresses unless allow_private is set, checking each address
// when it connects (internal/netguard, which http_fetch uses too); it
// follows no redirects and uses no HTTP proxy from the environment (the
// proxy would connect instead).
package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/internal/httpapi"
	"github.com/agentwork/agentwork/internal/retryafter"
	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/internal/stdwebhook"
)

// Timeout bounds one request, as the Standard Webhooks spec suggests
// (15-30 s); the dispatcher's delivery.send_timeout bounds it too.
const Timeout = 30 * time.Second

// Payload is the data of the event a webhook receives: the notification.
type Payload struct {
	// ID is the notification id, unique per notification and target,
	// stable across attempts.
	ID        string `json:"id"`
	RunID     string `json:"run_id"`
	RequestID string `json:"request_id,omitempty"`
	// Source and Name say which work produced it: heartbeat/default,
	// cron/<job>, task/<name>.
	Source string `json:"source"`
	Name   string `json:"name"`
	// Text is the model's text, untrusted: escape it where it is shown.
	Text string `json:"text"`
	// Urgency is "info" or "important".
	Urgency string `json:"urgency"`
	// Truncated: the model's token limit cut the text short.
	Truncated bool `json:"truncated"`
	// Target is the target the notification was queued for.
	Target   string            `json:"target"`
	Time     time.Time         `json:"time"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Options configures a Connector. See Config for the fields.
type Options struct {
	URL          string
	Secrets      []string
	Headers      map[string]string
	AllowPrivate bool
	// Now stamps webhook-timestamp and notifications without a time.
	// Default time.Now.
	Now func() time.Time
}

// Connector POSTs notifications to a URL. Safe for concurrent use.
type Connector struct {
	name    string
	url     string
	shown   string // scheme://host, for errors
	keys    [][]byte
	headers http.Header
	api     *httpapi.Client
	dialer  *net.Dialer
	now     func() time.Time
}

var _ connectors.Connector = (*Connector)(nil)

// New returns a Connector named name (the source of its events). It does
// no I/O.
func New(name string, opts Options) (*Connector, error) {
	cfg := Config{URL: opts.URL, Secrets: opts.Secrets, Headers: opts.Headers, AllowPrivate: opts.AllowPrivate}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	u, _ := url.Parse(opts.URL)
	c := &Connector{name: name, url: opts.URL, shown: Redacted(u), headers: http.Header{}, now: opts.Now}
	if c.now == nil {
		c.now = time.Now
	}
	// Everything of the URL but scheme and host may be a token.
	secrets := []string{opts.URL, u.String(), u.EscapedPath(), u.Path, u.RawQuery}
	if pw, ok := u.User.Password(); ok {
		secrets = append(secrets, pw, u.User.String())
	}
	for _, vs := range u.Query() {
		secrets = append(secrets, vs...)
	}
	for _, s := range opts.Secrets {
		k, _ := stdwebhook.DecodeSecret(s) // validated above
		c.keys = append(c.keys, k)
		secrets = append(secrets, s, strings.TrimPrefix(s, "whsec_"))
	}
	for k, v := range opts.Headers {
		c.headers.Set(k, v)
		// The whole value, and the credential after "Bearer " alone: a
		// receiver that quotes it must not put it in an error.
		secrets = append(secrets, secret.Words(v)...)
	}
	c.dialer = &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if !opts.AllowPrivate {
		c.dialer.Control = guard.Control
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil
	transport.DialContext = c.dialer.DialContext
	c.api = httpapi.New(&http.Client{Transport: transport, Timeout: Timeout}, longEnough(secrets)...)
	return c, nil
}

// longEnough drops the parts of secrets too short to redact without
// redacting ordinary words ("/", "a"): shorter than secret.Min.
func longEnough(ss []string) []string {
	var out []string
	for _, s := range ss {
		if len(s) >= secret.Min {
			out = append(out, s)
		}
	}
	return out
}

// ID returns the webhook-id of a notification id: the id with '%', '.'
// (which agentwork's verifier and some receivers refuse in an id, as the
// signed content joins id, timestamp and body with dots) and bytes outside
// printable ASCII
// percent-encoded, so distinct ids stay distinct; an id that would be
// longer than stdwebhook.MaxIDLen becomes "sha256-<hex>".
func ID(notificationID string) string {
	var b strings.Builder
	for i := 0; i < len(notificationID); i++ {
		c := notificationID[i]
		if c == '%' || c == '.' || c <= ' ' || c >= 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	id := b.String()
	if len(id) > stdwebhook.MaxIDLen || id == "" {
		sum := sha256.Sum256([]byte(notificationID))
		id = "sha256-" + hex.EncodeToString(sum[:])
	}
	return id
}

// Send POSTs n, signed, and returns once the receiver answered 2xx. The
// receipt's message id is the notification id. 429 and 5xx answers are
// retried (after their Retry-After, if any), as are network errors; 3xx,
// 410 and the other 4xx answers, and a refused address, are
// *connectors.PermanentError.
func (c *Connector) Send(ctx context.Context, n connectors.Notification) (connectors.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return connectors.Receipt{}, fmt.Errorf("webhook: %w", err)
	}
	if n.SentParts >= 1 {
		return connectors.Receipt{Parts: 1}, nil // an earlier attempt delivered it
	}
	body, err := c.body(n)
	if err != nil {
		return connectors.Receipt{}, connectors.Permanent(err)
	}
	id := n.ID
	if id == "" {
		id = bus.NewID()
	}
	h := c.headers.Clone()
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "agentwork-webhook")
	ts := stdwebhook.Timestamp(c.now())
	h.Set(stdwebhook.HeaderID, ID(id))
	h.Set(stdwebhook.HeaderTimestamp, ts)
	if len(c.keys) > 0 {
		h.Set(stdwebhook.HeaderSignature, stdwebhook.Sign(c.keys, ID(id), ts, body))
	}
	r, err := c.api.Post(ctx, c.url, h, body)
	switch {
	case r.OK(): // the receiver took it, whatever became of the rest of its answer
		return connectors.Receipt{Parts: 1, MessageIDs: []string{id}}, nil
	case err != nil:
		return connectors.Receipt{}, c.transportError(err)
	}
	return connectors.Receipt{}, c.classify(r)
}

// body is the CloudEvents envelope of n.
func (c *Connector) body(n connectors.Notification) ([]byte, error) {
	at := n.Time
	if at.IsZero() {
		at = c.now()
	}
	urgency := n.Urgency
	if urgency == "" {
		urgency = "info"
	}
	p := Payload{
		ID: n.ID, RunID: n.RunID, RequestID: n.RequestID, Source: n.Source, Name: n.Name,
		Text: n.Text, Urgency: urgency, Truncated: n.Truncated, Target: n.Target, Time: at.UTC(), Metadata: n.Metadata,
	}
	source := n.Source
	if !bus.ValidToken(source) {
		source = bus.Token(source)
	}
	ev, err := bus.NewEvent("agentwork/connectors/"+c.name, bus.TypeOf(source, "notification"), n.Name, at, p)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	if n.ID != "" {
		ev.ID = n.ID
	}
	ev.RunID, ev.CausationID = n.RunID, n.RequestID
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("webhook: marshal: %w", err)
	}
	return b, nil
}

// transportError names a failed request: a refused address as permanent,
// anything else (ctx's error, a network failure) as it is.
func (c *Connector) transportError(err error) error {
	if errors.Is(err, ErrBlocked) {
		// The dialer's error, without what is around it: it names the
		// address, which is no secret.
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			err = op.Err
		}
		return connectors.Permanent(fmt.Errorf("webhook: POST %s: %w%s", c.shown, err, allowHint))
	}
	return fmt.Errorf("webhook: POST %s: %w", c.shown, err)
}

// classify maps a receiver's answer other than 2xx.
func (c *Connector) classify(r httpapi.Reply) error {
	msg := r.Status
	if s := c.api.Snippet(string(r.Body)); s != "" {
		msg += ": " + s
	}
	err := fmt.Errorf("webhook: POST %s: %s", c.shown, c.api.Redact(msg))
	switch code := r.StatusCode; {
	case code == http.StatusGone:
		err = fmt.Errorf("%w; the receiver says the endpoint is gone: update url or remove the connector", err)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		err = fmt.Errorf("%w; check that the receiver has one of the connector's secrets (and headers)", err)
	case code/100 == 3:
		err = fmt.Errorf("%w; webhooks follow no redirects: set url to the address it redirects to", err)
	}
	after, _ := retryafter.Header(r.Header, c.now())
	return httpapi.Classify(err, r.StatusCode, after)
}
