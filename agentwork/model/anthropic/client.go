package anthropic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork/model"
)

// DefaultBaseURL is the API root used when model.base_url is empty. Like the
// official SDKs, the root has no /v1: the client appends /v1/messages.
const DefaultBaseURL = "https://api.anthropic.com"

// Version is the anthropic-version header sent with every request.
const Version = "2023-06-01"

const (
	maxReplyBytes = 8 << 20  // a message larger than this is refused
	maxErrorBytes = 64 << 10 // how much of an error body is read
)

// Client calls an Anthropic Messages endpoint. It is safe for concurrent use.
type Client struct {
	cfg      model.Config
	endpoint string // {base_url}/v1/messages
	where    string // base_url without credentials or query, for messages
	hc       *http.Client
	log      *zap.Logger
	now      func() time.Time
	secrets  []string // values redacted from every message
}

var (
	_ model.Provider = (*Client)(nil)
	_ model.Namer    = (*Client)(nil)
)

// Option configures a Client.
type Option func(*Client) error

// WithHTTPClient sets the HTTP client (default: a new http.Client on
// http.DefaultTransport). Its Timeout, if any, applies besides model.timeout.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) error {
		if hc == nil {
			return errors.New("anthropic: WithHTTPClient(nil)")
		}
		c.hc = hc
		return nil
	}
}

// WithLogger sets the logger (default zap.NewNop()). Calls are logged at
// debug level: model, status, duration and token counts, never the prompt or
// the key.
func WithLogger(l *zap.Logger) Option {
	return func(c *Client) error {
		if l == nil {
			l = zap.NewNop()
		}
		c.log = l
		return nil
	}
}

// New returns a client for cfg. cfg.Provider must be "anthropic" or empty;
// cfg.Model is required; an empty cfg.BaseURL means DefaultBaseURL. A
// base_url ending in /v1 is accepted as the root (the client never sends
// /v1/v1/messages). Anthropic takes temperatures from 0 to 1 only. New does
// no I/O.
func New(cfg model.Config, opts ...Option) (*Client, error) {
	switch cfg.Provider {
	case "", "anthropic":
	default:
		return nil, fmt.Errorf("anthropic: model.provider is %q, want anthropic", cfg.Provider)
	}
	cfg.Provider = "anthropic"
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	// A key read from a file or an env var often ends in a newline.
	cfg.APIKey = strings.TrimSpace(cfg.APIKey)
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("anthropic: %w", err)
	}
	if cfg.Temperature != nil && *cfg.Temperature > 1 {
		return nil, fmt.Errorf("anthropic: model.temperature: %g is out of range for Anthropic (want 0-1)", *cfg.Temperature)
	}
	if err := checkSecretsAndHeaders(cfg); err != nil {
		return nil, fmt.Errorf("anthropic: %w", err)
	}
	base, err := url.Parse(strings.TrimSuffix(strings.TrimRight(cfg.BaseURL, "/"), "/v1"))
	if err != nil {
		return nil, fmt.Errorf("anthropic: model.base_url: %w", err)
	}
	c := &Client{
		cfg:      cfg,
		endpoint: base.String() + "/v1/messages",
		where:    publicURL(base),
		hc:       &http.Client{},
		log:      zap.NewNop(),
		now:      time.Now,
		secrets:  secretsOf(cfg),
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Name returns "anthropic/<model>".
func (c *Client) Name() string { return "anthropic/" + c.cfg.Model }

// Complete sends req as one Messages request and returns the reply. It makes
// exactly one attempt, bounded by ctx and model.timeout. Errors are
// *model.Error.
func (c *Client) Complete(ctx context.Context, req model.Request) (model.Reply, error) {
	body, err := encodeRequest(c.cfg, req)
	if err != nil {
		return model.Reply{}, &model.Error{Class: model.ClassPermanent, Message: "anthropic: cannot encode the request", Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return model.Reply{}, &model.Error{Class: model.ClassPermanent, Message: fmt.Sprintf("anthropic: cannot build a request for %s; check model.base_url", c.where)}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set("User-Agent", "agentwork")
	hreq.Header.Set("anthropic-version", Version)
	if c.cfg.APIKey != "" {
		hreq.Header.Set("x-api-key", c.cfg.APIKey)
	}
	for k, v := range c.cfg.Headers {
		hreq.Header.Set(k, v)
	}

	start := time.Now()
	reply, status, err := c.do(ctx, hreq)
	log := c.log.With(zap.String("provider", "anthropic"), zap.String("model", c.cfg.Model),
		zap.Int("status", status), zap.Duration("duration", time.Since(start)))
	if err != nil {
		log.Debug("model call failed", zap.String("class", string(model.Classify(err))), zap.Error(err))
		return model.Reply{}, err
	}
	log.Debug("model call", zap.Int("input_tokens", reply.Usage.InputTokens),
		zap.Int("output_tokens", reply.Usage.OutputTokens), zap.Int("tool_calls", len(reply.ToolCalls)))
	return reply, nil
}

func (c *Client) do(ctx context.Context, hreq *http.Request) (model.Reply, int, error) {
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return model.Reply{}, 0, c.transportError(ctx, err, false)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBytes))
		_ = resp.Body.Close()
	}()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		return model.Reply{}, resp.StatusCode, c.statusError(resp.StatusCode, "", resp.Header, b)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes+1))
	if err != nil {
		return model.Reply{}, resp.StatusCode, c.transportError(ctx, err, true)
	}
	if len(b) > maxReplyBytes {
		return model.Reply{}, resp.StatusCode, &model.Error{Class: model.ClassPermanent, Status: resp.StatusCode,
			Message: fmt.Sprintf("anthropic: reply from %s is larger than %d MiB; lower model.max_tokens", c.where, maxReplyBytes>>20)}
	}
	reply, err := decodeReply(b)
	if err != nil {
		var se *serverError
		if errors.As(err, &se) {
			return model.Reply{}, resp.StatusCode, c.statusError(resp.StatusCode, se.typ, resp.Header, b)
		}
		return model.Reply{}, resp.StatusCode, &model.Error{Class: model.ClassPermanent, Status: resp.StatusCode,
			Message: fmt.Sprintf("anthropic: reply from %s is not a message (is model.base_url an Anthropic Messages API root, e.g. https://api.anthropic.com?)", c.where),
			Err:     err}
	}
	if reply.Model == "" {
		reply.Model = c.cfg.Model
	}
	return reply, resp.StatusCode, nil
}
