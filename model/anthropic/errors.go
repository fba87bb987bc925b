package anthropic

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentwork/agentwork/internal/retryafter"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/internal/httperr"
)

// errorStatus maps Anthropic's error types to the status they come with, for
// an error object in a 200 body.
var errorStatus = map[string]int{
	"invalid_request_error": http.StatusBadRequest,
	"authentication_error":  http.StatusUnauthorized,
	"billing_error":         http.StatusPaymentRequired,
	"permission_error":      http.StatusForbidden,
	"not_found_error":       http.StatusNotFound,
	"request_too_large":     http.StatusRequestEntityTooLarge,
	"rate_limit_error":      http.StatusTooManyRequests,
	"api_error":             http.StatusInternalServerError,
	"timeout_error":         http.StatusGatewayTimeout,
	"overloaded_error":      httperr.StatusOverloaded,
}

// errs describes c for the shared error classification: Anthropic's
// hints and its anthropic-ratelimit-* headers.
func (c *Client) errs() httperr.Endpoint {
	return httperr.Endpoint{
		Provider: "anthropic",
		Where:    c.where,
		Model:    c.cfg.Model,
		Timeout:  c.cfg.Timeout,
		Secrets:  c.secrets,
		Now:      c.now,
		Reset:    rateLimitReset,
		Hints: map[int]string{
			http.StatusUnauthorized: c.cfg.KeyHint("sent as x-api-key"),
			http.StatusNotFound: fmt.Sprintf("check %s (%q) and %s (the root that /v1/messages is appended to, e.g. https://api.anthropic.com or http://127.0.0.1:11434 for Ollama)",
				c.cfg.Field("model"), c.cfg.Model, c.cfg.Field("base_url")),
		},
	}
}

// statusError classifies a reply with a non-2xx status, or a 2xx whose body
// is an error of type errType.
func (c *Client) statusError(status int, errType string, h http.Header, body []byte) *model.Error {
	if s, ok := errorStatus[errType]; ok && status >= 200 && status <= 299 {
		status = s
	}
	return c.errs().StatusError(status, h, body)
}

// rateLimitReset returns the wait until the latest of Anthropic's exhausted
// anthropic-ratelimit-* buckets refills; its reset headers are RFC 3339
// times (a time in whole seconds is waited for to its end: see
// retryafter.Until). 0 if no bucket is exhausted.
func rateLimitReset(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	for _, bucket := range []string{"requests", "tokens", "input-tokens", "output-tokens"} {
		if strings.TrimSpace(h.Get("anthropic-ratelimit-"+bucket+"-remaining")) != "0" {
			continue
		}
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(h.Get("anthropic-ratelimit-"+bucket+"-reset")))
		if err != nil {
			continue
		}
		d = max(d, retryafter.Until(t, now))
	}
	return d
}

// secretsOf lists the config values that must never appear in a message.
func secretsOf(cfg model.Config) []string { return httperr.Secrets(cfg) }

// publicURL is u without user info, query or fragment: safe to show.
func publicURL(u *url.URL) string { return httperr.PublicURL(u) }
