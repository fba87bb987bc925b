// Package httperr turns the failures of a model provider's HTTP call into
// classified *model.Error values whose messages say what to fix. It is the
// part the openai and anthropic clients share: the class of a status (and
// the server's x-should-retry), the wait a server asks for (read with
// internal/retryafter), the server's own explanation taken from an error
// body, transport failures (timeouts, refused or cut connections, TLS),
// and the redaction of the API key and header values.
// Each client adds its own hints and rate-limit headers through Endpoint.
package httperr

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentwork/agentwork/internal/retryafter"
	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/model"
)

// StatusOverloaded is Anthropic's "overloaded" status, which net/http has no
// text for.
const StatusOverloaded = 529

// Endpoint is what the messages of one client name and redact. Build it
// from the client's config; the zero value of each field is usable.
type Endpoint struct {
	// Provider starts every message, e.g. "openai".
	Provider string
	// Where is the base URL as it may be shown (see PublicURL).
	Where string
	// Model is model.model, quoted in hints.
	Model string
	// Timeout is model.timeout, named when a call timed out.
	Timeout time.Duration
	// Secrets are replaced by [redacted] in every message (see Secrets).
	Secrets []string
	// Hints replace the default hint (what to fix) of a permanent status.
	Hints map[int]string
	// Reset returns the wait until an exhausted rate-limit bucket refills,
	// read from the provider's own headers, or 0. It is consulted when the
	// reply names no retry-after-ms or Retry-After. Nil means none.
	Reset func(h http.Header, now time.Time) time.Duration
	// Now is the clock for Retry-After dates. Nil means time.Now.
	Now func() time.Time
}

// Class returns the class of a reply with an error status: transient for
// 408, 409, 429 and 5xx (including 529 overloaded), permanent for every
// other status. A server header x-should-retry: true|false, which the
// official SDKs obey, overrides it.
func Class(status int, h http.Header) model.Class {
	class := model.ClassPermanent
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusConflict,
		status == http.StatusTooManyRequests, status >= 500 && status <= 599:
		class = model.ClassTransient
	}
	switch strings.ToLower(strings.TrimSpace(h.Get("x-should-retry"))) {
	case "true":
		class = model.ClassTransient
	case "false":
		class = model.ClassPermanent
	}
	return class
}

// StatusError classifies a reply with status (a non-2xx status, or the
// status an error object in a 2xx body stands for) by Class, and builds its
// message with Error.
func (e Endpoint) StatusError(status int, h http.Header, body []byte) *model.Error {
	class := Class(status, h)
	hint := ""
	if class == model.ClassPermanent {
		hint = e.Hint(status)
	}
	return e.Error(status, class, hint, h, body)
}

// Error builds the error of a reply with status and the given class:
// "<provider>: <status> from <where>", then for a transient class the wait
// the server asked for (also set as RetryAfter), else ": " and hint, then
// the server's own message from body. Secrets are redacted from the whole.
func (e Endpoint) Error(status int, class model.Class, hint string, h http.Header, body []byte) *model.Error {
	me := &model.Error{Class: class, Status: status}
	msg := fmt.Sprintf("%s: %s from %s", e.Provider, StatusText(status), e.Where)
	switch {
	case class == model.ClassTransient || class == model.ClassTimeout:
		me.RetryAfter = e.retryAfter(h)
		if me.RetryAfter > 0 {
			msg += fmt.Sprintf(": retry after %s", me.RetryAfter)
		}
	case hint != "":
		msg += ": " + hint
	}
	// Redact before anything is cut or quoted: a key cut in two, or quoted
	// into another form, would no longer match.
	if s := Clip(secret.Redact(serverText(secret.Redact(string(body), e.Secrets)), e.Secrets)); s != "" {
		msg += fmt.Sprintf(" (server said: %q)", s)
	}
	me.Message = secret.Redact(msg, e.Secrets)
	return me
}

func (e Endpoint) retryAfter(h http.Header) time.Duration {
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	t := now()
	if d, ok := retryafter.Header(h, t); ok {
		return d
	}
	if e.Reset != nil {
		return retryafter.Seconds(e.Reset(h, t).Seconds())
	}
	return 0
}

// Hint says which config field to look at for a permanent status: the
// endpoint's own hint if it has one, else a default.
func (e Endpoint) Hint(status int) string {
	if h, ok := e.Hints[status]; ok {
		return h
	}
	switch status {
	case http.StatusBadRequest:
		return fmt.Sprintf("the server rejected the request; check that model.model (%q), model.max_tokens and model.temperature suit this server", e.Model)
	case http.StatusUnauthorized:
		return "check model.api_key (is it set, and is the key valid for this server?)"
	case http.StatusPaymentRequired:
		return "the account behind model.api_key has no credit left; check its billing"
	case http.StatusForbidden:
		return fmt.Sprintf("check that model.api_key may use model.model (%q)", e.Model)
	case http.StatusNotFound:
		return fmt.Sprintf("check model.model (%q) and model.base_url", e.Model)
	case http.StatusRequestEntityTooLarge:
		return "the request is too large; shorten the prompt or the tool results"
	case http.StatusUnprocessableEntity:
		return fmt.Sprintf("the server could not process the request; check model.model (%q) and the tool schemas", e.Model)
	}
	return "check model.base_url and model.model"
}

// TransportError classifies a failure to get a whole reply from the
// server: a timeout (err or ctx past its deadline, a network timeout) is
// ClassTimeout; a cancelled call, a refused or reset connection and a reply
// cut short are ClassTransient; a TLS failure is ClassPermanent. reading
// says whether the reply had begun. The *url.Error around err, which
// repeats the request URL, is dropped: Where is what messages show.
func (e Endpoint) TransportError(ctx context.Context, err error, reading bool) *model.Error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	me := &model.Error{Class: model.ClassTransient, Err: err}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()):
		me.Class = model.ClassTimeout
		me.Message = fmt.Sprintf("%s: no reply from %s in time (model.timeout is %s)", e.Provider, e.Where, e.Timeout)
	case errors.Is(err, context.Canceled):
		me.Message = fmt.Sprintf("%s: call to %s canceled", e.Provider, e.Where)
	case IsTLS(err):
		me.Class = model.ClassPermanent
		me.Message = fmt.Sprintf("%s: TLS with %s failed; check model.base_url (http or https?) and the server's certificate", e.Provider, e.Where)
	case reading:
		me.Message = fmt.Sprintf("%s: reply from %s was cut short", e.Provider, e.Where)
	default:
		me.Message = fmt.Sprintf("%s: cannot reach %s (is the server running? check model.base_url)", e.Provider, e.Where)
	}
	me.Message = secret.Redact(me.Message, e.Secrets)
	return me
}

// IsTLS reports whether err is a failed TLS handshake or certificate check.
func IsTLS(err error) bool {
	var (
		cv *tls.CertificateVerificationError
		ua x509.UnknownAuthorityError
		he x509.HostnameError
		ci x509.CertificateInvalidError
		rh tls.RecordHeaderError
	)
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) || errors.As(err, &rh)
}

// StatusText is "<code> <text>", e.g. "401 Unauthorized", "529 Overloaded";
// just the code when the status has no text.
func StatusText(status int) string {
	t := http.StatusText(status)
	if status == StatusOverloaded {
		t = "Overloaded"
	}
	if t == "" {
		return strconv.Itoa(status)
	}
	return strconv.Itoa(status) + " " + t
}

// ServerMessage extracts the server's explanation from an error body:
// {"error":{"message","type","code"}} (OpenAI, and Anthropic inside its
// {"type":"error",...}) as "<code or type>: <message>", the shapes other
// servers use ({"error":"..."}, {"message":"..."}, {"detail":"..."}), or the
// start of a body that is none of these. The result is clipped (see Clip).
func ServerMessage(body []byte) string { return Clip(serverText(string(body))) }

// serverText is ServerMessage before clipping.
func serverText(body string) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if err := json.Unmarshal([]byte(body), &v); err == nil {
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
				return code + ": " + e.Message
			}
			return e.Message
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		case json.Unmarshal(v.Message, &s) == nil && s != "":
			return s
		case json.Unmarshal(v.Detail, &s) == nil && s != "":
			return s
		}
	}
	return body
}

// maxClip is how many bytes of a server's message Clip keeps.
const maxClip = 300

// Clip returns the first line of s, trimmed, as valid UTF-8 (invalid bytes
// become "?"), at most 300 bytes; " ..." marks what was cut.
func Clip(s string) string {
	s = strings.TrimSpace(strings.ToValidUTF8(s, "?"))
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i] + " ..."
	}
	if len(s) > maxClip {
		n := maxClip
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n] + " ..."
	}
	return s
}

// Secrets lists the config values that must never appear in a message: the
// API key and the values of extra headers (which may carry tokens), split
// by secret.Words (so of secret.Min bytes or more, and the token of
// "Bearer <token>" alone too).
func Secrets(cfg model.Config) []string {
	out := secret.Words(cfg.APIKey)
	for _, v := range cfg.Headers {
		out = append(out, secret.Words(v)...)
	}
	return out
}

// PublicURL is u without user info, query or fragment: safe to show.
func PublicURL(u *url.URL) string {
	p := *u
	p.User = nil
	p.RawQuery = ""
	p.ForceQuery = false
	p.Fragment = ""
	p.RawFragment = ""
	return p.String()
}
