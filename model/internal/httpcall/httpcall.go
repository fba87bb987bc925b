// Package httpcall is the request/response plumbing the openai and anthropic
// clients share: checking a provider's config, building the POST of a JSON
// body, sending it and reading the reply within size limits, and the debug
// log line of a call. What differs between providers (the endpoint, the
// auth and version headers, the wire format, the error body) stays with
// the client; errors are classified by httperr.
package httpcall

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/internal/httperr"
)

const (
	// MaxReplyBytes caps a 2xx reply body; a larger one is refused.
	MaxReplyBytes = 8 << 20
	// maxErrorBytes is how much of an error body is read.
	maxErrorBytes = 64 << 10
)

// Config returns cfg checked for provider: cfg.Provider must be provider or
// empty and is set to provider, an empty BaseURL becomes defaultBaseURL,
// the API key is trimmed, defaults are filled in and the result validated.
// Errors start with provider.
func Config(provider, defaultBaseURL string, cfg model.Config) (model.Config, error) {
	switch cfg.Provider {
	case "", provider:
	default:
		return model.Config{}, fmt.Errorf("%s: model.provider is %q, want %s", provider, cfg.Provider, provider)
	}
	cfg.Provider = provider
	if cfg.BaseURL == "" {
		cfg.BaseURL = defaultBaseURL
	}
	// A key read from a file or an env var often ends in a newline.
	cfg.APIKey = strings.TrimSpace(cfg.APIKey)
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return model.Config{}, fmt.Errorf("%s: %w", provider, err)
	}
	return cfg, nil
}

// NewRequest builds the POST of the JSON body to url with the headers every
// call sends (Content-Type, Accept, User-Agent), then each of headers in
// order, a later one overriding an earlier one: the provider's own, then
// model.headers. Its error is a permanent *model.Error naming ep.Where.
func NewRequest(ctx context.Context, ep httperr.Endpoint, url string, body []byte, headers ...map[string]string) (*http.Request, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, &model.Error{Class: model.ClassPermanent, Message: fmt.Sprintf("%s: cannot build a request for %s; check model.base_url", ep.Provider, ep.Where)}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set("User-Agent", "agentwork")
	for _, h := range headers {
		for k, v := range h {
			hreq.Header.Set(k, v)
		}
	}
	return hreq, nil
}

// Reply is an HTTP reply read whole.
type Reply struct {
	// Status is the HTTP status, 0 if no reply came.
	Status int
	Header http.Header
	// Body is the body of a 2xx reply, or the first 64 KiB of another.
	Body []byte
}

// OK reports whether the status is 2xx.
func (r Reply) OK() bool { return r.Status >= 200 && r.Status <= 299 }

// Do sends hreq with hc and reads the reply. A reply with any status is
// returned with a nil error for the caller to decode or classify; the error,
// a *model.Error, is for a reply that did not come whole (see
// httperr.Endpoint.TransportError) or a 2xx larger than MaxReplyBytes.
func Do(ctx context.Context, ep httperr.Endpoint, hc *http.Client, hreq *http.Request) (Reply, error) {
	resp, err := hc.Do(hreq)
	if err != nil {
		return Reply{}, ep.TransportError(ctx, err, false)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBytes))
		_ = resp.Body.Close()
	}()
	r := Reply{Status: resp.StatusCode, Header: resp.Header}
	if !r.OK() {
		r.Body, _ = io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		return r, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxReplyBytes+1))
	if err != nil {
		return r, ep.TransportError(ctx, err, true)
	}
	if len(b) > MaxReplyBytes {
		return r, &model.Error{Class: model.ClassPermanent, Status: resp.StatusCode,
			Message: fmt.Sprintf("%s: reply from %s is larger than %d MiB; lower model.max_tokens", ep.Provider, ep.Where, MaxReplyBytes>>20)}
	}
	r.Body = b
	return r, nil
}

// Log logs one call at debug level: provider, model, status, duration, and
// the token counts of reply or the class of err. Never the prompt or the key.
func Log(log *zap.Logger, provider, modelName string, status int, d time.Duration, reply model.Reply, err error) {
	log = log.With(zap.String("provider", provider), zap.String("model", modelName),
		zap.Int("status", status), zap.Duration("duration", d))
	if err != nil {
		log.Debug("model call failed", zap.String("class", string(model.Classify(err))), zap.Error(err))
		return
	}
	log.Debug("model call", zap.Int("input_tokens", reply.Usage.InputTokens),
		zap.Int("output_tokens", reply.Usage.OutputTokens), zap.Int("tool_calls", len(reply.ToolCalls)))
}
