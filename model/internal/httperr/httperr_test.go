package httperr_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/internal/httperr"
)

const key = "sk-test-SECRET-5e1f0c9a"

var now = time.Date(2026, 3, 14, 9, 30, 0, 250_000_000, time.UTC)

func endpoint() httperr.Endpoint {
	return httperr.Endpoint{
		Provider: "acme",
		Where:    "https://models.example/v1",
		Model:    "m-1",
		Timeout:  90 * time.Second,
		Secrets:  []string{key},
		Now:      func() time.Time { return now },
	}
}

func TestClass(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status      int
		shouldRetry string
		want        model.Class
	}{
		{400, "", model.ClassPermanent},
		{401, "", model.ClassPermanent},
		{402, "", model.ClassPermanent},
		{403, "", model.ClassPermanent},
		{404, "", model.ClassPermanent},
		{408, "", model.ClassTransient},
		{409, "", model.ClassTransient},
		{413, "", model.ClassPermanent},
		{422, "", model.ClassPermanent},
		{429, "", model.ClassTransient},
		{500, "", model.ClassTransient},
		{502, "", model.ClassTransient},
		{529, "", model.ClassTransient},
		{599, "", model.ClassTransient},
		{600, "", model.ClassPermanent},
		{400, "true", model.ClassTransient},
		{503, " FALSE ", model.ClassPermanent},
		{503, "maybe", model.ClassTransient},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.shouldRetry != "" {
			h.Set("x-should-retry", tt.shouldRetry)
		}
		if got := httperr.Class(tt.status, h); got != tt.want {
			t.Errorf("Class(%d, x-should-retry %q) = %s, want %s", tt.status, tt.shouldRetry, got, tt.want)
		}
	}
}

func TestServerMessage(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 400)
	tests := []struct {
		name, body, want string
	}{
		{"openai", `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, "invalid_api_key: Incorrect API key provided"},
		{"openai null code", `{"error":{"message":"bad","type":"invalid_request_error","code":null}}`, "invalid_request_error: bad"},
		{"numeric code", `{"error":{"message":"slow","code":429}}`, "429: slow"},
		{"anthropic", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "overloaded_error: Overloaded"},
		{"message only", `{"error":{"message":"plain"}}`, "plain"},
		{"ollama", `{"error":"model \"llama9\" not found, try pulling it first"}`, `model "llama9" not found, try pulling it first`},
		{"message", `{"message":"no route"}`, "no route"},
		{"fastapi detail", `{"detail":"Not Found"}`, "Not Found"},
		{"html", "<html>\n<title>502 Bad Gateway</title></html>", "<html> ..."},
		{"empty", "", ""},
		{"json without a message", `{"ok":false}`, `{"ok":false}`},
		{"long", long, long[:300] + " ..."},
	}
	for _, tt := range tests {
		if got := httperr.ServerMessage([]byte(tt.body)); got != tt.want {
			t.Errorf("%s: ServerMessage(%q) = %q, want %q", tt.name, tt.body, got, tt.want)
		}
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 400) // 2 bytes each: the cut must not split one
	tests := []struct{ in, want string }{
		{"  short  ", "short"},
		{"line one\r\nline two", "line one ..."},
		{"bad \xff byte", "bad ? byte"},
		{long, long[:300] + " ..."},
		{"a" + long, "a" + long[:298] + " ..."},
	}
	for _, tt := range tests {
		if got := httperr.Clip(tt.in); got != tt.want {
			t.Errorf("Clip(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestStatusError(t *testing.T) {
	t.Parallel()
	resetCalled := false
	ep := endpoint()
	ep.Hints = map[int]string{401: "check model.api_key (is ${ACME_KEY} set?)"}
	ep.Reset = func(h http.Header, n time.Time) time.Duration {
		resetCalled = true
		if h.Get("x-bucket-empty") != "" && n.Equal(now) {
			return 7 * time.Second
		}
		return 0
	}
	tests := []struct {
		name       string
		status     int
		header     http.Header
		body       string
		class      model.Class
		retryAfter time.Duration
		message    string
	}{
		{"401 own hint, key echoed", 401, nil, `{"error":{"message":"Incorrect API key provided: ` + key + `","code":"invalid_api_key"}}`,
			model.ClassPermanent, 0,
			`acme: 401 Unauthorized from https://models.example/v1: check model.api_key (is ${ACME_KEY} set?) (server said: "invalid_api_key: Incorrect API key provided: [redacted]")`},
		{"404 default hint", 404, nil, `{"detail":"Not Found"}`, model.ClassPermanent, 0,
			`acme: 404 Not Found from https://models.example/v1: check model.model ("m-1") and model.base_url (server said: "Not Found")`},
		{"429 retry-after", 429, http.Header{"Retry-After": {"2"}}, `{"error":"slow down"}`, model.ClassTransient, 2 * time.Second,
			`acme: 429 Too Many Requests from https://models.example/v1: retry after 2s (server said: "slow down")`},
		{"429 bucket reset", 429, http.Header{"X-Bucket-Empty": {"1"}}, "", model.ClassTransient, 7 * time.Second,
			`acme: 429 Too Many Requests from https://models.example/v1: retry after 7s`},
		{"529", 529, nil, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, model.ClassTransient, 0,
			`acme: 529 Overloaded from https://models.example/v1 (server said: "overloaded_error: Overloaded")`},
		{"unknown status", 499, nil, "", model.ClassPermanent, 0,
			`acme: 499 from https://models.example/v1: check model.base_url and model.model`},
		{"should-retry false", 503, http.Header{"X-Should-Retry": {"false"}, "Retry-After": {"5"}}, "", model.ClassPermanent, 0,
			`acme: 503 Service Unavailable from https://models.example/v1: check model.base_url and model.model`},
	}
	for _, tt := range tests {
		me := ep.StatusError(tt.status, tt.header, []byte(tt.body))
		if me.Class != tt.class || me.Status != tt.status || me.RetryAfter != tt.retryAfter || me.Message != tt.message {
			t.Errorf("%s: StatusError() = {%s %d %s %q},\nwant {%s %d %s %q}", tt.name,
				me.Class, me.Status, me.RetryAfter, me.Message, tt.class, tt.status, tt.retryAfter, tt.message)
		}
		if model.Classify(me) != tt.class {
			t.Errorf("%s: model.Classify() = %s, want %s", tt.name, model.Classify(me), tt.class)
		}
	}
	if !resetCalled {
		t.Error("Endpoint.Reset was never consulted")
	}

	// A class chosen by the caller (OpenAI's insufficient_quota 429) keeps
	// the status and takes the given hint instead of a retry-after.
	me := ep.Error(429, model.ClassPermanent, ep.Hint(402), http.Header{"Retry-After": {"5"}}, nil)
	if me.RetryAfter != 0 || !strings.Contains(me.Message, "429 Too Many Requests") || !strings.Contains(me.Message, "no credit left") {
		t.Errorf("Error(429, permanent, hint 402) = %+v, want no retry-after and the 402 hint", me)
	}
}

// TestEndpointZero: the zero Endpoint works (no clock, hints or secrets).
func TestEndpointZero(t *testing.T) {
	t.Parallel()
	var ep httperr.Endpoint
	me := ep.StatusError(503, http.Header{"Retry-After": {"1"}}, nil)
	if me.Class != model.ClassTransient || me.RetryAfter != time.Second {
		t.Errorf("zero Endpoint.StatusError(503) = %+v, want transient, retry after 1s", me)
	}
	if h := ep.Hint(400); !strings.Contains(h, "model.max_tokens") {
		t.Errorf("zero Endpoint.Hint(400) = %q, want the default hint", h)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

func TestTransportError(t *testing.T) {
	t.Parallel()
	ep := endpoint()
	expired, cancel := context.WithDeadline(t.Context(), time.Unix(0, 0))
	defer cancel()
	wrap := func(err error) error {
		return &url.Error{Op: "Post", URL: "https://user:" + key + "@models.example/v1/chat?key=" + key, Err: err}
	}
	tests := []struct {
		name    string
		ctx     context.Context
		err     error
		reading bool
		class   model.Class
		message string
	}{
		{"refused", t.Context(), wrap(&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), false, model.ClassTransient,
			"acme: cannot reach https://models.example/v1 (is the server running? check model.base_url)"},
		{"cut short", t.Context(), io.ErrUnexpectedEOF, true, model.ClassTransient,
			"acme: reply from https://models.example/v1 was cut short"},
		{"deadline in err", t.Context(), wrap(context.DeadlineExceeded), false, model.ClassTimeout,
			"acme: no reply from https://models.example/v1 in time (model.timeout is 1m30s)"},
		{"deadline in ctx", expired, wrap(errors.New("read: connection reset by peer")), true, model.ClassTimeout,
			"acme: no reply from https://models.example/v1 in time (model.timeout is 1m30s)"},
		{"net timeout", t.Context(), wrap(timeoutErr{}), false, model.ClassTimeout,
			"acme: no reply from https://models.example/v1 in time (model.timeout is 1m30s)"},
		{"canceled", t.Context(), wrap(context.Canceled), false, model.ClassTransient,
			"acme: call to https://models.example/v1 canceled"},
		{"tls", t.Context(), wrap(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), false, model.ClassPermanent,
			"acme: TLS with https://models.example/v1 failed; check model.base_url (http or https?) and the server's certificate"},
		{"tls record header", t.Context(), wrap(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), false, model.ClassPermanent,
			"acme: TLS with https://models.example/v1 failed; check model.base_url (http or https?) and the server's certificate"},
	}
	for _, tt := range tests {
		me := ep.TransportError(tt.ctx, tt.err, tt.reading)
		if me.Class != tt.class || me.Message != tt.message {
			t.Errorf("%s: TransportError() = {%s %q}, want {%s %q}", tt.name, me.Class, me.Message, tt.class, tt.message)
		}
		if s := fmt.Sprintf("%v %+v", me, *me); strings.Contains(s, key) {
			t.Errorf("%s: TransportError() shows the key (from the request URL): %s", tt.name, s)
		}
	}
	if me := ep.TransportError(t.Context(), wrap(context.Canceled), false); !errors.Is(me, context.Canceled) {
		t.Errorf("TransportError(canceled) = %v, want it to wrap context.Canceled", me)
	}
}

func TestSecretsAndRedact(t *testing.T) {
	t.Parallel()
	cfg := model.Config{APIKey: key, Headers: map[string]string{
		"Authorization-Extra": "Bearer tok-0123456789",
		"X-Short":             "abc",
		"X-Gitlab":            "token glpat-0123",
	}}
	secrets := httperr.Secrets(cfg)
	in := "key " + key + ", token tok-0123456789, short abc, gitlab glpat-0123"
	got := secret.Redact(in, secrets)
	if want := "key [redacted], token [redacted], short abc, gitlab [redacted]"; got != want {
		t.Errorf("Redact(%q, Secrets()) = %q, want %q", in, got, want)
	}
	if got := secret.Redact("nothing", []string{""}); got != "nothing" {
		t.Errorf("Redact with an empty secret = %q, want it unchanged", got)
	}
	if s := httperr.Secrets(model.Config{}); len(s) != 0 {
		t.Errorf("Secrets(no key) = %q, want none", s)
	}
}

func TestPublicURL(t *testing.T) {
	t.Parallel()
	u, err := url.Parse("https://user:" + key + "@models.example:8443/v1?api-key=" + key + "#frag")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := httperr.PublicURL(u), "https://models.example:8443/v1"; got != want {
		t.Errorf("PublicURL() = %q, want %q", got, want)
	}
	if u.User == nil {
		t.Error("PublicURL changed its argument")
	}
}

func TestStatusText(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]string{401: "401 Unauthorized", 529: "529 Overloaded", 599: "599", 503: "503 Service Unavailable"} {
		if got := httperr.StatusText(status); got != want {
			t.Errorf("StatusText(%d) = %q, want %q", status, got, want)
		}
	}
}

// TestErrorNeverShowsTheKey: a server that echoes the key, late in a long
// message or in an escaped form, must not get any of it into the error
// (the error reaches the log, events, the runs API and chat alerts).
func TestErrorNeverShowsTheKey(t *testing.T) {
	t.Parallel()
	const secret = `sk-live/AbC+dEf"GhI\jKlMnOpQrStUvWxYz0123456789`
	ep := httperr.Endpoint{Provider: "openai", Where: "http://127.0.0.1:1/v1", Secrets: []string{secret}}
	jsonForm, _ := json.Marshal(secret)
	escaped := strings.Trim(string(jsonForm), `"`)
	filler := strings.Repeat("x", 270)
	bodies := map[string]string{
		"plain at the cut":      `{"error":{"message":"` + filler + ` key ` + escaped + `"}}`,
		"json escaped":          `{"error":{"message":"bad key: ` + strings.ReplaceAll(escaped, "/", `\/`) + `"}}`,
		"unicode escaped":       `{"error":{"message":"bad key: ` + unicodeEscape(secret) + `"}}`,
		"not json, at the cut":  filler + " key " + secret + " more",
		"not json, url encoded": "bad key " + url.QueryEscape(secret),
		"not json, path form":   "bad key " + url.PathEscape(secret),
		"not json, go quoted":   "bad key " + strconv.Quote(secret),
		"base64":                "bad key " + base64.StdEncoding.EncodeToString([]byte(secret)),
	}
	for name, body := range bodies {
		me := ep.Error(http.StatusUnauthorized, model.ClassPermanent, "check model.api_key", nil, []byte(body))
		shown := fmt.Sprintf("%v|%q|%+v", me, me.Error(), *me)
		for n := 8; n <= len(secret); n++ {
			for _, form := range []string{secret[:n], strings.Trim(strconv.Quote(secret[:n]), `"`), strings.Trim(mustJSON(secret[:n]), `"`)} {
				if strings.Contains(shown, form) {
					t.Errorf("%s: the error shows the first %d bytes of the key: %s", name, n, shown)
					break
				}
			}
		}
	}
}

func unicodeEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		fmt.Fprintf(&b, `\u%04x`, r)
	}
	return b.String()
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
