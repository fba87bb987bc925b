// Package httpapi is the HTTP plumbing of the connectors that post to an
// HTTP API (telegram, slack, discord, ntfy, webhook): a client that follows
// no redirects, a POST sent within ctx and its reply read, failures to get
// a reply that never quote the URL, the connector's secrets kept out of
// whatever goes into an error, a one-line snippet of a body, the class of
// a status, and the check of a base_url. The wait a server asks for is
// read with internal/retryafter, as the model clients read it.
//
// What differs between platforms stays with each connector: the wire
// format, the error body and its codes, the platform's own retry-after
// (Telegram's parameters.retry_after, Discord's retry_after), the hints.
package httpapi

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
	"unicode"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/internal/secret"
)

const (
	// maxBody is how much of a reply's body is read.
	maxBody = 1 << 20
	// maxSnippet is how many bytes of a server's text Snippet keeps.
	maxSnippet = 200
)

// Client sends a connector's requests and keeps the connector's secrets
// out of their errors. Safe for concurrent use.
type Client struct {
	hc      *http.Client
	secrets []string
}

// New returns a Client that sends with a copy of hc and redacts secrets
// (see Redact). The copy follows no redirects: a 3xx is answered, not
// followed, so a POST does not become a GET and no credential goes
// elsewhere; the connector reports it. A nil hc, or one without a
// Transport, gets a transport of its own (a clone of
// http.DefaultTransport, so CloseIdleConnections touches no other
// connector's).
func New(hc *http.Client, secrets ...string) *Client {
	c := &http.Client{}
	if hc != nil {
		*c = *hc
	}
	if c.Transport == nil {
		c.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{hc: c, secrets: secrets}
}

// CloseIdleConnections closes the connections kept open for later
// requests.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// Reply is an HTTP reply with its body read.
type Reply struct {
	// StatusCode is the status, 0 when no reply came; Status the status
	// line as the server wrote it ("429 Too Many Requests").
	StatusCode int
	Status     string
	Header     http.Header
	// Body is the body, at most its first MiB.
	Body []byte
}

// OK reports whether the status is 2xx.
func (r Reply) OK() bool { return r.StatusCode/100 == 2 }

// Post posts body to endpoint with header and returns the reply, whatever
// its status. The error is for a reply that did not come whole, and never
// quotes endpoint (which may hold a token): when ctx is done it wraps
// ctx's error; a URL that makes no request is a *connectors.PermanentError;
// anything else (a refused connection, a reply cut short) is the cause,
// redacted, which the dispatcher retries and errors.Is and errors.As still
// find. When the reply's body could not be read, Post returns the reply
// too: a caller to which the status is enough may use it.
func (c *Client) Post(ctx context.Context, endpoint string, header http.Header, body []byte) (Reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return Reply{}, connectors.Permanent(errors.New("the configured URL makes no valid request"))
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return Reply{}, c.failed(ctx, "", err)
	}
	defer resp.Body.Close()
	r := Reply{StatusCode: resp.StatusCode, Status: resp.Status, Header: resp.Header}
	r.Body, err = io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return r, c.failed(ctx, "reading the reply: ", err)
	}
	return r, nil
}

// failed is the error of a request that got no whole reply while doing.
func (c *Client) failed(ctx context.Context, doing string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s%w", doing, ctxErr)
	}
	// The *url.Error net/http wraps the cause in quotes the URL.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return &redactedError{msg: doing + c.Redact(err.Error()), err: err}
}

// redactedError shows msg, a message with the secrets taken out, and
// unwraps to the error it describes.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Redact returns s with every secret of the Client replaced by [redacted],
// in every form a server may echo it (see secret.Redact).
func (c *Client) Redact(s string) string { return secret.Redact(s, c.secrets) }

// Snippet returns s, a server's text (a body, a description, an error
// code), fit for an error message: redacted, then one line (control
// characters and runs of white space become one space, invalid UTF-8 is
// dropped) of at most 200 bytes, "…" marking a cut.
func (c *Client) Snippet(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(c.Redact(s), ""))
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxSnippet {
		s = strings.ToValidUTF8(s[:maxSnippet], "") + "…"
	}
	return s
}

// Retryable reports whether another attempt may get another answer than
// status: 408, 429 and 5xx. Other statuses (3xx, 4xx) answer the same
// request the same way.
func Retryable(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status/100 == 5
}

// Classify wraps err, the error of a reply with status, as what it means
// for another attempt (see Retryable): a *connectors.RetryableError after
// after (0: the dispatcher's backoff), a rate limit (connectors.RateLimit)
// for a 429 that names a wait, else a *connectors.PermanentError.
func Classify(err error, status int, after time.Duration) error {
	if status == http.StatusTooManyRequests {
		return connectors.RateLimit(err, after)
	}
	if Retryable(status) {
		return connectors.Retry(err, after)
	}
	return connectors.Permanent(err)
}

// CheckBaseURL checks a base_url: "" (the default, def), or an http or
// https URL with a host, without user information (credentials have
// settings of their own, named by credentials) and without query or
// fragment (the connector adds its paths). Its errors show s through
// secret.URL, and def as an example.
func CheckBaseURL(s, def, credentials string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("%q: want an http(s) URL such as %s", secret.URL(s), def)
	case u.User != nil:
		return fmt.Errorf("%q: put credentials in %s, not in the URL", secret.URL(s), credentials)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return fmt.Errorf("%q: want no query or fragment: the server's root alone, without user info, query or fragment", secret.URL(s))
	}
	return nil
}
