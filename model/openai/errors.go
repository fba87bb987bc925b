package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentwork/agentwork/internal/retryafter"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/internal/httperr"
)

// errs describes c for the shared error classification: OpenAI's hints
// and its x-ratelimit-* headers.
func (c *Client) errs() httperr.Endpoint {
	return httperr.Endpoint{
		Provider: "openai",
		Where:    c.where,
		Model:    c.cfg.Model,
		Timeout:  c.cfg.Timeout,
		Secrets:  c.secrets,
		Now:      c.now,
		Reset:    rateLimitReset,
		Hints: map[int]string{
			http.StatusPaymentRequired: "the account behind " + c.cfg.Field("api_key") + " has no credit or quota left; check its plan and billing",
			http.StatusUnauthorized:    c.cfg.KeyHint(""),
			http.StatusNotFound: fmt.Sprintf("check %s (%q) and %s (OpenAI-compatible servers want the API root with /v1, e.g. http://127.0.0.1:11434/v1)",
				c.cfg.Field("model"), c.cfg.Model, c.cfg.Field("base_url")),
		},
	}
}

// statusError classifies a reply with a non-2xx status (or an error object in
// a 200 body).
func (c *Client) statusError(status int, h http.Header, body []byte) *model.Error {
	ep := c.errs()
	// OpenAI says "no credit left" with a 429; waiting will not help.
	if status == http.StatusTooManyRequests && errorCode(body) == "insufficient_quota" {
		return ep.Error(status, model.ClassPermanent, ep.Hint(http.StatusPaymentRequired), h, body)
	}
	return ep.StatusError(status, h, body)
}

// rateLimitReset returns the wait until the later of OpenAI's exhausted
// x-ratelimit buckets (requests, tokens) refills; its reset headers are
// durations such as "1s" or "6m0s". 0 if none is exhausted.
func rateLimitReset(h http.Header, _ time.Time) time.Duration {
	var d time.Duration
	for _, bucket := range []string{"requests", "tokens"} {
		if strings.TrimSpace(h.Get("x-ratelimit-remaining-"+bucket)) != "0" {
			continue
		}
		if r, err := time.ParseDuration(strings.TrimSpace(h.Get("x-ratelimit-reset-" + bucket))); err == nil {
			d = max(d, retryafter.Seconds(r.Seconds()))
		}
	}
	return d
}

// errorCode returns error.code of an OpenAI error body, or "".
func errorCode(body []byte) string {
	var v struct {
		Error struct {
			Code any `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	s, _ := v.Error.Code.(string)
	return s
}

// clip returns the first line of s, at most 300 bytes of valid UTF-8.
func clip(s string) string { return httperr.Clip(s) }

// secretsOf lists the config values that must never appear in a message.
func secretsOf(cfg model.Config) []string { return httperr.Secrets(cfg) }

// publicURL is u without user info, query or fragment: safe to show.
func publicURL(u *url.URL) string { return httperr.PublicURL(u) }
