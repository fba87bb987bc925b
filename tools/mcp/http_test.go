package mcp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentwork/agentwork/tools/mcp"
)

// headerLog records the credentials a test server was sent.
type headerLog struct {
	mu  sync.Mutex
	got []string
}

func (l *headerLog) note(r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range []string{"Authorization", "X-Api-Key"} {
		if v := r.Header.Get(h); v != "" {
			l.got = append(l.got, r.Method+" "+r.URL.Path+" "+h+": "+v)
		}
	}
}

func (l *headerLog) seen() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

// A server that redirects to another origin (scheme, host, port) does not
// get the headers sent there: the redirect is not followed, and the status
// says where it pointed and what to do.
func TestHTTPRedirectToAnotherOrigin(t *testing.T) {
	t.Parallel()
	var other headerLog
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		other.note(r)
		http.Error(w, "not an MCP server", http.StatusNotFound)
	}))
	t.Cleanup(b.Close)
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, b.URL+"/mcp?key=s3cret-query-0815", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(a.Close)
	m := start(t, mcp.Config{Servers: map[string]mcp.ServerConfig{
		"x": {URL: a.URL + "/mcp", Headers: map[string]string{"Authorization": testToken, "X-Api-Key": "api-key-123456"}},
	}})
	if got := other.seen(); len(got) > 0 {
		t.Errorf("the other origin was sent %q", got)
	}
	st := status(t, m, "x")
	want := "redirected to " + b.URL + "/mcp, another origin, where agentwork does not send mcp.servers.x.headers: set mcp.servers.x.url to the address the server answers at"
	if st.State != mcp.StateDown || !strings.Contains(st.LastError, want) {
		t.Errorf("Status(x) = %+v, want down with an error containing %q", st, want)
	}
	if strings.Contains(st.LastError, "s3cret-query") {
		t.Errorf("Status(x).LastError = %q quotes the redirect's query", st.LastError)
	}
}

// A redirect within the server's origin (/old to /mcp) is followed, with
// the headers: the server comes up and its tools work.
func TestHTTPRedirectWithinTheOrigin(t *testing.T) {
	t.Parallel()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return testServer() }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/old":
			http.Redirect(w, r, "/mcp", http.StatusPermanentRedirect)
		case r.Header.Get("Authorization") != testToken:
			http.Error(w, "invalid credentials", http.StatusUnauthorized)
		default:
			h.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	m := start(t, mcp.Config{Servers: map[string]mcp.ServerConfig{
		"x": {URL: srv.URL + "/old", Headers: map[string]string{"Authorization": testToken}},
	}})
	if got := mustCall(t, m, "x__echo", map[string]string{"text": "moved"}); got != "moved" {
		t.Errorf("echo = %q, want moved (status %+v)", got, status(t, m, "x"))
	}
}

// The headers go only to requests for the configured origin, whoever
// makes the request: a different port, host or scheme gets none.
func TestHeaderTransportOrigin(t *testing.T) {
	t.Parallel()
	var log headerLog
	base := roundTripper(func(r *http.Request) (*http.Response, error) {
		log.note(r)
		return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: r}, nil
	})
	rt := mcp.HeaderTransport("https://mcp.example.com/mcp", map[string]string{"Authorization": testToken}, base)
	for _, u := range []string{
		"https://mcp.example.com:8443/mcp",
		"http://mcp.example.com/mcp",
		"https://evil.example/mcp",
		"https://mcp.example.com.evil.example/mcp",
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, u, http.NoBody)
		if _, err := rt.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	}
	if got := log.seen(); len(got) > 0 {
		t.Errorf("requests to other origins were sent %q", got)
	}
	for _, u := range []string{"https://mcp.example.com/mcp", "https://MCP.example.com:443/other"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, u, http.NoBody)
		if _, err := rt.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	}
	if got := log.seen(); len(got) != 2 {
		t.Errorf("requests to the origin were sent %q, want the header twice", got)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
