package openai

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentwork/agentwork/agentwork/model"
)

// maxRetryAfter caps a server-requested delay.
const maxRetryAfter = 24 * time.Hour

// statusError classifies a reply with a non-2xx status (or an error object in
// a 200 body).
func (c *Client) statusError(status int, h http.Header, body []byte) *model.Error {
	class := model.ClassPermanent
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusConflict,
		status == http.StatusTooManyRequests, status >= 500 && status <= 599:
		class = model.ClassTransient
	}
	// x-should-retry is the server's explicit word (the official SDKs obey it).
	switch strings.ToLower(strings.TrimSpace(h.Get("x-should-retry"))) {
	case "true":
		class = model.ClassTransient
	case "false":
		class = model.ClassPermanent
	}
	// OpenAI says "no credit left" with a 429; waiting will not help.
	quota := status == http.StatusTooManyRequests && errorCode(body) == "insufficient_quota"
	if quota {
		class = model.ClassPermanent
	}
	e := &model.Error{Class: class, Status: status}
	msg := fmt.Sprintf("openai: %s from %s", statusText(status), c.where)
	if class == model.ClassTransient {
		e.RetryAfter = retryAfter(h, c.now())
		if e.RetryAfter > 0 {
			msg += fmt.Sprintf(": retry after %s", e.RetryAfter)
		}
	} else if quota {
		msg += ": " + c.hint(http.StatusPaymentRequired)
	} else {
		msg += ": " + c.hint(status)
	}
	if s := serverMessage(body); s != "" {
		msg += fmt.Sprintf(" (server said: %q)", s)
	}
	e.Message = redact(msg, c.secrets)
	return e
}

// hint says which config field to look at for a permanent status.
func (c *Client) hint(status int) string {
	switch status {
	case http.StatusBadRequest:
		return fmt.Sprintf("the server rejected the request; check that model.model (%q), model.max_tokens and model.temperature suit this server", c.cfg.Model)
	case http.StatusPaymentRequired:
		return "the account behind model.api_key has no credit or quota left; check its plan and billing"
	case http.StatusUnauthorized:
		return "check model.api_key (is ${OPENAI_API_KEY} set, and is the key valid for this server?)"
	case http.StatusForbidden:
		return fmt.Sprintf("check that model.api_key may use model.model (%q)", c.cfg.Model)
	case http.StatusNotFound:
		return fmt.Sprintf("check model.model (%q) and model.base_url (OpenAI-compatible servers want the API root with /v1, e.g. http://127.0.0.1:11434/v1)", c.cfg.Model)
	case http.StatusRequestEntityTooLarge:
		return "the request is too large; shorten the prompt or the tool results"
	case http.StatusUnprocessableEntity:
		return fmt.Sprintf("the server could not process the request; check model.model (%q) and the tool schemas", c.cfg.Model)
	}
	return "check model.base_url and model.model"
}

// transportError classifies a failure to get a whole reply; reading says
// whether the reply had begun.
func (c *Client) transportError(ctx context.Context, err error, reading bool) *model.Error {
	// The *url.Error around err repeats the request URL; c.where is enough.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()):
		return &model.Error{Class: model.ClassTimeout, Err: err,
			Message: fmt.Sprintf("openai: no reply from %s in time (model.timeout is %s)", c.where, c.cfg.Timeout)}
	case errors.Is(err, context.Canceled):
		return &model.Error{Class: model.ClassTransient, Err: err,
			Message: fmt.Sprintf("openai: call to %s canceled", c.where)}
	case isTLSError(err):
		return &model.Error{Class: model.ClassPermanent, Err: err,
			Message: fmt.Sprintf("openai: TLS with %s failed; check model.base_url (http or https?) and the server's certificate", c.where)}
	}
	if reading {
		return &model.Error{Class: model.ClassTransient, Err: err,
			Message: fmt.Sprintf("openai: reply from %s was cut short", c.where)}
	}
	return &model.Error{Class: model.ClassTransient, Err: err,
		Message: fmt.Sprintf("openai: cannot reach %s (is the server running? check model.base_url)", c.where)}
}

func isTLSError(err error) bool {
	var (
		cv *tls.CertificateVerificationError
		ua x509.UnknownAuthorityError
		he x509.HostnameError
		ci x509.CertificateInvalidError
		rh tls.RecordHeaderError
	)
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) || errors.As(err, &rh)
}

func statusText(status int) string {
	t := http.StatusText(status)
	if status == 529 {
		t = "Overloaded"
	}
	if t == "" {
		return strconv.Itoa(status)
	}
	return strconv.Itoa(status) + " " + t
}

// retryAfter returns the delay a server asked for: retry-after-ms, then
// Retry-After (seconds or an HTTP date), then the reset time of an exhausted
// x-ratelimit bucket. 0 if none.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return clampDelay(f / 1000)
		}
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return clampDelay(f)
		}
		if t, err := http.ParseTime(v); err == nil {
			return clampDelay(t.Sub(now).Seconds())
		}
	}
	var d time.Duration
	for _, bucket := range []string{"requests", "tokens"} {
		if strings.TrimSpace(h.Get("x-ratelimit-remaining-"+bucket)) != "0" {
			continue
		}
		if r, err := time.ParseDuration(strings.TrimSpace(h.Get("x-ratelimit-reset-" + bucket))); err == nil {
			d = max(d, clampDelay(r.Seconds()))
		}
	}
	return d
}

func clampDelay(seconds float64) time.Duration {
	switch {
	case math.IsNaN(seconds) || seconds <= 0:
		return 0
	case seconds >= maxRetryAfter.Seconds():
		return maxRetryAfter
	}
	return time.Duration(seconds * float64(time.Second)).Round(time.Millisecond)
}

// serverMessage extracts the server's explanation from an error body:
// OpenAI's {"error":{"message","type","code"}}, and the shapes other
// compatible servers use ({"error":"..."}, {"message":"..."},
// {"detail":"..."}), or the start of a body that is not JSON.
func serverMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if err := json.Unmarshal(body, &v); err == nil {
		var e struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		}
		var s string
		switch {
		case json.Unmarshal(v.Error, &e) == nil && e.Message != "":
			code := strings.Trim(string(e.Code), `"`)
			if code == "" || code == "null" {
				code = e.Type
			}
			if code != "" {
				return clip(code + ": " + e.Message)
			}
			return clip(e.Message)
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return clip(s)
		case json.Unmarshal(v.Message, &s) == nil && s != "":
			return clip(s)
		case json.Unmarshal(v.Detail, &s) == nil && s != "":
			return clip(s)
		}
	}
	return clip(string(body))
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
func clip(s string) string {
	s = strings.TrimSpace(strings.ToValidUTF8(s, "?"))
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i] + " ..."
	}
	if len(s) > 300 {
		n := 300
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n] + " ..."
	}
	return s
}

// secretsOf lists the config values that must never appear in a message:
// the API key and the values of extra headers (which may carry tokens).
func secretsOf(cfg model.Config) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 6 {
			out = append(out, s)
		}
	}
	add(cfg.APIKey)
	for _, v := range cfg.Headers {
		add(strings.TrimSpace(strings.TrimPrefix(v, "Bearer ")))
	}
	return out
}

func redact(s string, secrets []string) string {
	for _, k := range secrets {
		s = strings.ReplaceAll(s, k, "[redacted]")
	}
	return s
}

// publicURL is u without user info, query or fragment: safe to show.
func publicURL(u *url.URL) string {
	p := *u
	p.User = nil
	p.RawQuery = ""
	p.ForceQuery = false
	p.Fragment = ""
	p.RawFragment = ""
	return p.String()
}

// checkSecretsAndHeaders rejects values that cannot go into an HTTP header,
// without quoting them.
func checkSecretsAndHeaders(cfg model.Config) error {
	if !validHeaderValue(cfg.APIKey) {
		return errors.New("model.api_key: contains a control character (check the ${...} reference or the file it reads)")
	}
	for k, v := range cfg.Headers {
		if k == "" || strings.ContainsAny(k, " \t\r\n:()<>@,;\\\"/[]?={}") {
			return fmt.Errorf("model.headers: %q is not a header name", k)
		}
		if !validHeaderValue(v) {
			return fmt.Errorf("model.headers: the value of %q contains a control character", k)
		}
	}
	return nil
}

func validHeaderValue(v string) bool {
	for _, r := range v {
		if (r < ' ' && r != '\t') || r == 0x7f {
			return false
		}
	}
	return true
}
