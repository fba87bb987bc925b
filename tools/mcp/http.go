package mcp

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/tools"
)

// newHTTPClient returns the client of an HTTP server at rawURL and the
// transport that adds its headers. The headers are the server's
// credentials, so they go to its origin (scheme, host and port) and
// nowhere else: a redirect within the origin is followed (the SDK sends
// every request with a body it can send again, so a 307 or 308 keeps the
// call), one to another origin is not, and the transport adds the headers
// only to requests for the origin, whoever made them.
func newHTTPClient(rawURL string, headers map[string]string) (*http.Client, *headerTransport) {
	h := newHeaderTransport(rawURL, headers, http.DefaultTransport.(*http.Transport).Clone())
	return &http.Client{Transport: h, CheckRedirect: h.checkRedirect}, h
}

// maxRedirects is how many redirects within the origin one request
// follows, as net/http's default.
const maxRedirects = 10

// headerTransport adds a server's headers to every request for its
// origin, and notes a refusal of them (401, 403) or a redirect to another
// origin, so that the error can say what to change.
type headerTransport struct {
	base    http.RoundTripper
	origin  string
	headers map[string]string
	refused atomic.Int32 // status of the last 401 or 403 answer
	// elsewhere is the last redirect to another origin, not followed:
	// without user information or query (secret.URL).
	elsewhere atomic.Pointer[string]
}

func newHeaderTransport(rawURL string, headers map[string]string, base http.RoundTripper) *headerTransport {
	h := &headerTransport{base: base, headers: headers}
	if u, err := url.Parse(rawURL); err == nil {
		h.origin = origin(u)
	}
	return h
}

// reset forgets what the last session's requests noted.
func (h *headerTransport) reset() {
	h.refused.Store(0)
	h.elsewhere.Store(nil)
}

func (h *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.headers) > 0 && h.origin != "" && origin(r.URL) == h.origin {
		r = r.Clone(r.Context())
		for k, v := range h.headers {
			r.Header.Set(k, v)
		}
	}
	r = r.Clone(r.Context())
	r.Header.Set(tools.CallHeader, "mcp")
	resp, err := h.base.RoundTrip(r)
	if err == nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
		h.refused.Store(int32(resp.StatusCode))
	}
	return resp, err
}

// checkRedirect is the client's CheckRedirect: a redirect to another
// origin is not followed; its answer goes back to the SDK, which fails the
// request.
func (h *headerTransport) checkRedirect(req *http.Request, via []*http.Request) error {
	if origin(req.URL) != h.origin {
		where := secret.URL(req.URL.String())
		h.elsewhere.Store(&where)
		return http.ErrUseLastResponse
	}
	if len(via) >= maxRedirects {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// origin is u's scheme, host and port, the port spelled out.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}
