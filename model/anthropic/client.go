package anthropic

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/internal/httpcall"
)

// DefaultBaseURL is the API root used when model.base_url is empty. Like the
// official SDKs, the root has no /v1: the client appends /v1/messages.
const DefaultBaseURL = "https://api.anthropic.com"

// Version is the anthropic-version header sent with every request.
const Version = "2023-06-01"

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
	cfg, err := httpcall.Config("anthropic", DefaultBaseURL, cfg)
	if err != nil {
		return nil, err
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
	headers := map[string]string{"anthropic-version": Version}
	if c.cfg.APIKey != "" {
		headers["x-api-key"] = c.cfg.APIKey
	}
	hreq, err := httpcall.NewRequest(ctx, c.errs(), c.endpoint, body, headers, c.cfg.Headers)
	if err != nil {
		return model.Reply{}, err
	}

	start := time.Now()
	reply, status, err := c.do(ctx, hreq)
	httpcall.Log(c.log, "anthropic", c.cfg.Model, status, time.Since(start), reply, err)
	if err != nil {
		return model.Reply{}, err
	}
	return reply, nil
}

func (c *Client) do(ctx context.Context, hreq *http.Request) (model.Reply, int, error) {
	resp, err := httpcall.Do(ctx, c.errs(), c.hc, hreq)
	if err != nil {
		return model.Reply{}, resp.Status, err
	}
	if !resp.OK() {
		return model.Reply{}, resp.Status, c.statusError(resp.Status, "", resp.Header, resp.Body)
	}
	reply, err := decodeReply(resp.Body)
	if err != nil {
		var se *serverError
		if errors.As(err, &se) {
			return model.Reply{}, resp.Status, c.statusError(resp.Status, se.typ, resp.Header, resp.Body)
		}
		return model.Reply{}, resp.Status, &model.Error{Class: model.ClassPermanent, Status: resp.Status,
			Message: fmt.Sprintf("anthropic: reply from %s is not a message (is model.base_url an Anthropic Messages API root, e.g. https://api.anthropic.com?)", c.where),
			Err:     err}
	}
	if reply.Model == "" {
		reply.Model = c.cfg.Model
	}
	return reply, resp.Status, nil
}
