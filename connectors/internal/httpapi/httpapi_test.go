package httpapi_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/internal/httpapi"
)

const token = "tok-SECRET-0123456789"

func TestPost(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte(r.Header.Get("X-Key") + " " + r.Method + " " + r.URL.Path))
	}))
	defer srv.Close()
	c := httpapi.New(nil, token)
	defer c.CloseIdleConnections()
	h := http.Header{"X-Key": {"v"}}
	r, err := c.Post(t.Context(), srv.URL+"/bot"+token, h, []byte("{}"))
	if err != nil || r.StatusCode != http.StatusTeapot || r.Status != "418 I'm a teapot" || r.Header.Get("Content-Type") != "text/plain" {
		t.Fatalf("Post = %+v, %v; want the 418 reply", r, err)
	}
	if got, want := string(r.Body), "v POST /bot"+token; got != want {
		t.Errorf("Post body = %q, want %q", got, want)
	}
	if r.OK() {
		t.Error("Reply{418}.OK() = true")
	}
	if len(h) != 1 {
		t.Errorf("Post changed the caller's header: %v", h)
	}
}

// A redirect is answered, not followed, whatever client the connector was
// given.
func TestPostNoRedirects(t *testing.T) {
	t.Parallel()
	followed := make(chan struct{}, 1)
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed <- struct{}{} }))
	defer other.Close()
	redirect := httptest.NewServer(http.RedirectHandler(other.URL, http.StatusTemporaryRedirect))
	defer redirect.Close()
	given := &http.Client{Timeout: time.Minute}
	c := httpapi.New(given)
	defer c.CloseIdleConnections()
	r, err := c.Post(t.Context(), redirect.URL, nil, nil)
	if err != nil || r.StatusCode != http.StatusTemporaryRedirect || r.Header.Get("Location") != other.URL {
		t.Fatalf("Post to a redirect = %+v, %v; want the 307 itself", r, err)
	}
	select {
	case <-followed:
		t.Error("the redirect was followed")
	default:
	}
	if given.CheckRedirect != nil || given.Transport != nil {
		t.Error("New changed the client it was given")
	}
}

// A failure to get a reply never quotes the URL or a secret, and unwraps
// to its cause.
func TestPostUnreachable(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	c := httpapi.New(nil, token)
	_, err := c.Post(t.Context(), closed.URL+"/bot"+token+"/send", nil, nil)
	switch {
	case err == nil:
		t.Fatal("Post to a closed server = nil, want an error")
	case strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "/send"):
		t.Errorf("Post = %q, quotes the URL", err)
	case !errors.Is(err, syscall.ECONNREFUSED):
		t.Errorf("Post = %v, want it to unwrap to ECONNREFUSED", err)
	case connectors.IsPermanent(err):
		t.Errorf("Post = %v, permanent; want a retryable failure", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) {
		t.Errorf("Post = %v, want a net.Error inside", err)
	}
}

func TestPostContextDone(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	c := httpapi.New(nil, token)
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Post(ctx, srv.URL+"/"+token, nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), token) {
		t.Fatalf("Post past its deadline = %v, want an error wrapping context.DeadlineExceeded without the URL", err)
	}
}

// A reply cut short is an error, and the reply is returned with it.
func TestPostCutShort(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("partial " + token))
	}))
	defer srv.Close()
	c := httpapi.New(nil, token)
	defer c.CloseIdleConnections()
	r, err := c.Post(t.Context(), srv.URL, nil, nil)
	if err == nil || !r.OK() || !strings.Contains(err.Error(), "reading the reply") {
		t.Fatalf("Post of a cut reply = %+v, %v; want the 200 and an error reading it", r, err)
	}
}

func TestPostBadURL(t *testing.T) {
	t.Parallel()
	_, err := httpapi.New(nil, token).Post(t.Context(), "http://a b/"+token, nil, nil)
	if !connectors.IsPermanent(err) || strings.Contains(err.Error(), token) {
		t.Fatalf("Post(bad URL) = %v, want a permanent error without the URL", err)
	}
}

func TestSnippet(t *testing.T) {
	t.Parallel()
	c := httpapi.New(nil, token)
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"  plain  ", "plain"},
		{"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n</html>\r\n", "<html> <head><title>502 Bad Gateway</title></head> </html>"},
		{"bad token " + token, "bad token [redacted]"},
		{"a\x00b\x1b[31mc\xff", "a b [31mc"},
		{strings.Repeat("x", 300), strings.Repeat("x", 200) + "…"},
		{strings.Repeat("x", 199) + "é", strings.Repeat("x", 199) + "…"},
	} {
		if got := c.Snippet(tc.in); got != tc.want {
			t.Errorf("Snippet(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	cause := errors.New("answered")
	for status, retry := range map[int]bool{301: false, 400: false, 401: false, 404: false, 408: true, 410: false, 429: true, 500: true, 503: true} {
		err := httpapi.Classify(cause, status, time.Second)
		if !errors.Is(err, cause) {
			t.Errorf("Classify(%d) = %v, want it to wrap the cause", status, err)
		}
		var re *connectors.RetryableError
		switch {
		case retry && (!errors.As(err, &re) || re.After != time.Second):
			t.Errorf("Classify(%d) = %v, want a retry after 1s", status, err)
		case !retry && !connectors.IsPermanent(err):
			t.Errorf("Classify(%d) = %v, want a permanent error", status, err)
		}
	}
}

func TestCheckBaseURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"https://api.example", ""},
		{"http://127.0.0.1:8081/prefix/", ""},
		{"api.example", `"api.example": want an http(s) URL such as https://default.example`},
		{"ftp://api.example", "want an http(s) URL"},
		{"https://user:s3cret@api.example", `"https://***@api.example": put credentials in token, not in the URL`},
		{"https://api.example/?key=s3cret", `"https://api.example/": want no query or fragment`},
		{"https://api.example/#x", "want no query or fragment"},
	} {
		err := httpapi.CheckBaseURL(tc.in, "https://default.example", "token")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckBaseURL(%q) = %v, want nil", tc.in, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckBaseURL(%q) = %v, want %q in it", tc.in, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "s3cret"):
			t.Errorf("CheckBaseURL(%q) = %v, quotes the secret", tc.in, err)
		}
	}
}
