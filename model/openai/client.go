package openai

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

// DefaultBaseURL is the API root used when model.base_url is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// The request fields that cap the reply length; see WithMaxTokensField.
const (
	MaxTokens           = "max_tokens"
	MaxCompletionTokens = "max_completion_tokens"
)

// Client calls an OpenAI-compatible Chat Completions endpoint.
// It is safe for concurrent use.
type Client struct {
	cfg      model.Config
	endpoint string // {base_url}/chat/completions
	where    string // base_url without credentials or query, for messages
	maxField string
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
			return errors.New("openai: WithHTTPClient(nil)")
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

// WithMaxTokensField sets the request field that carries model.max_tokens:
// MaxTokens ("max_tokens", understood by every compatible server) or
// MaxCompletionTokens ("max_completion_tokens", which OpenAI's reasoning
// models require). The default is max_completion_tokens for api.openai.com
// and max_tokens for any other server.
func WithMaxTokensField(name string) Option {
	return func(c *Client) error {
		switch name {
		case MaxTokens, MaxCompletionTokens:
			c.maxField = name
			return nil
		}
		return fmt.Errorf("openai: max tokens field %q: want %s or %s", name, MaxTokens, MaxCompletionTokens)
	}
}

// New returns a client for cfg. cfg.Provider must be "openai" or empty;
// cfg.Model is required; an empty cfg.BaseURL means DefaultBaseURL. New does
// no I/O.
func New(cfg model.Config, opts ...Option) (*Client, error) {
	cfg, err := httpcall.Config("openai", DefaultBaseURL, cfg)
	if err != nil {
		return nil, err
	}
	base, err := url.Parse(strings.TrimRight(cfg.BaseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("openai: model.base_url: %w", err)
	}
	c := &Client{
		cfg:      cfg,
		endpoint: base.String() + "/chat/completions",
		where:    publicURL(base),
		hc:       &http.Client{},
		log:      zap.NewNop(),
		now:      time.Now,
		secrets:  secretsOf(cfg),
	}
	if base.Hostname() == "api.openai.com" {
		c.maxField = MaxCompletionTokens
	} else {
		c.maxField = MaxTokens
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Name returns "openai/<model>".
func (c *Client) Name() string { return "openai/" + c.cfg.Model }

// Complete sends req as one chat completion request and returns the reply.
// It makes exactly one attempt, bounded by ctx and model.timeout. Errors are
// *model.Error.
func (c *Client) Complete(ctx context.Context, req model.Request) (model.Reply, error) {
	body, err := encodeRequest(c.cfg, c.maxField, req)
	if err != nil {
		return model.Reply{}, &model.Error{Class: model.ClassPermanent, Message: "openai: cannot encode the request", Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var auth map[string]string
	if c.cfg.APIKey != "" {
		auth = map[string]string{"Authorization": "Bearer " + c.cfg.APIKey}
	}
	hreq, err := httpcall.NewRequest(ctx, c.errs(), c.endpoint, body, auth, c.cfg.Headers)
	if err != nil {
		return model.Reply{}, err
	}

	start := time.Now()
	reply, status, err := c.do(ctx, hreq)
	httpcall.Log(c.log, "openai", c.cfg.Model, status, time.Since(start), reply, err)
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
		return model.Reply{}, resp.Status, c.statusError(resp.Status, resp.Header, resp.Body)
	}
	reply, err := decodeReply(resp.Body)
	if err != nil {
		var se *serverError
		if errors.As(err, &se) {
			status := se.status
			if status < 400 || status > 599 {
				status = resp.Status
			}
			return model.Reply{}, resp.Status, c.statusError(status, resp.Header, resp.Body)
		}
		if errors.Is(err, errNoChoices) {
			return model.Reply{}, resp.Status, &model.Error{Class: model.ClassTransient, Status: resp.Status,
				Message: fmt.Sprintf("openai: %s answered a chat completion with no choices: the server produced nothing (a content filter, or a failing backend behind a gateway); trying again", c.where)}
		}
		return model.Reply{}, resp.Status, &model.Error{Class: model.ClassPermanent, Status: resp.Status,
			Message: fmt.Sprintf("openai: reply from %s is not a chat completion (is model.base_url an OpenAI-compatible API root, e.g. .../v1?)", c.where),
			Err:     err}
	}
	if reply.Model == "" {
		reply.Model = c.cfg.Model
	}
	return reply, resp.Status, nil
}
