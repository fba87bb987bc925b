package builtin_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentwork/agentwork/internal/netguard/netguardtest"
	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/builtin"
)

// server is an httptest server that counts its requests.
type server struct {
	*httptest.Server
	hits atomic.Int32
}

func newServer(t *testing.T, h http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// port is the server's port.
func (s *server) port() string {
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	return p
}

// fetchTool returns a registry holding the http_fetch tool of c, whose
// names resolve to resolveTo (nil: the system's resolver).
func fetchTool(t *testing.T, c builtin.FetchConfig, resolveTo *[4]byte) *tools.Registry {
	t.Helper()
	var spec tools.Spec
	var err error
	if resolveTo != nil {
		res, _ := netguardtest.Resolver(*resolveTo)
		spec, err = builtin.FetchWithResolver(c, res)
	} else {
		spec, err = builtin.Fetch(c)
	}
	if err != nil {
		t.Fatalf("Fetch(%+v) = %v", c, err)
	}
	reg, err := tools.NewRegistry(spec)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func fetch(t *testing.T, reg *tools.Registry, args string) tools.Call {
	t.Helper()
	return reg.Call(t.Context(), "1", builtin.FetchName, args)
}

func getArgs(url string) string { return fmt.Sprintf(`{"url":%q}`, url) }

var (
	loopback = [4]byte{127, 0, 0, 1}
	metadata = [4]byte{169, 254, 169, 254}
	private  = [4]byte{10, 0, 0, 7}
)

// An allow-listed server on loopback is fetched when its entry allows
// loopback: status, content type and body reach the model.
func TestFetchAllowListedServer(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "disk /srv: 91% full")
	})
	reg := fetchTool(t, builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: srv.URL + "/status", AllowLoopback: true}}}, nil)
	c := fetch(t, reg, getArgs(srv.URL+"/status/disk?unit=%25"))
	if c.Outcome != tools.OutcomeOK || c.Result != "HTTP 200 OK\nContent-Type: text/plain\nContent-Length: 19\n\ndisk /srv: 91% full" {
		t.Errorf("http_fetch(an allowed URL) = %+v, want ok with the status, headers and body", c)
	}
	head := fetch(t, reg, `{"url":"`+srv.URL+`/status","method":"HEAD"}`)
	if head.Outcome != tools.OutcomeOK || strings.Contains(head.Result, "disk") || !strings.HasPrefix(head.Result, "HTTP 200 OK") {
		t.Errorf("http_fetch(HEAD) = %+v, want ok without a body", head)
	}
	// The same server through a name that resolves to it.
	byName := fetchTool(t, builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: "http://status.example.test:" + srv.port() + "/", AllowLoopback: true}}}, &loopback)
	if c := fetch(t, byName, getArgs("http://status.example.test:"+srv.port()+"/status")); c.Outcome != tools.OutcomeOK {
		t.Errorf("http_fetch(a name resolving to loopback, allowed) = %+v, want ok", c)
	}
}

// Loopback, metadata and private addresses are refused: as a prefix in
// the config, and when a name resolves to one (DNS rebinding), checked on
// the resolved address when connecting. Nothing reaches the server.
func TestFetchRefusesAddresses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prefix, want string
	}{
		{"http://127.0.0.1:8080/", "tools.http_fetch.allow[0].prefix: 127.0.0.1 is a loopback address; set allow_loopback: true"},
		{"http://169.254.169.254/latest/", "tools.http_fetch.allow[0].prefix: 169.254.169.254 is the cloud metadata service's address; set allow_private: true"},
		{"http://metadata.google.internal/", "metadata.google.internal is the name of a cloud metadata service; set allow_private: true"},
		{"http://[::ffff:10.1.2.3]/", "10.1.2.3 is a private address; set allow_private: true"},
		{"http://localhost:9100/", "localhost is the name of this host (loopback); set allow_loopback: true"},
		{"http://0.0.0.0/", "0.0.0.0 is the unspecified address; it is never allowed"},
	} {
		if _, err := builtin.Fetch(builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: tc.prefix}}}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Fetch(prefix %s) = %v, want %q", tc.prefix, err, tc.want)
		}
	}

	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "secret internals") })
	for _, tc := range []struct {
		name string
		addr [4]byte
		want string
	}{
		{"loopback", loopback, "127.0.0.1 is a loopback address (set allow_loopback: true on its tools.http_fetch.allow entry); nothing was sent"},
		{"metadata", metadata, "169.254.169.254 is the cloud metadata service's address (set allow_private: true"},
		{"private", private, "10.0.0.7 is a private address (set allow_private: true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := "http://rebind.example.test:" + srv.port() + "/x"
			reg := fetchTool(t, builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: u}}, Timeout: 5 * time.Second}, &tc.addr)
			c := fetch(t, reg, getArgs(u))
			if c.Outcome != tools.OutcomeRefused || !strings.Contains(c.Error, tc.want) {
				t.Errorf("http_fetch(a name resolving to %v) = %+v, want refused: %q", tc.addr, c, tc.want)
			}
		})
	}
	if n := srv.hits.Load(); n != 0 {
		t.Errorf("the server was reached %d times, want 0", n)
	}
}

// A redirect is checked as the first URL is: a target outside the
// allow-list, or one whose name resolves to a refused address, is not
// followed, and the target is never reached.
func TestFetchRedirects(t *testing.T) {
	t.Parallel()
	inner := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "inner: "+r.Header.Get("Authorization"))
	})
	innerByName := "http://inner.example.test:" + inner.port()
	var to atomic.Value
	outer := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, to.Load().(string), http.StatusFound)
	})
	const token = "outer-token-0123456789"
	cfg := builtin.FetchConfig{Allow: []builtin.FetchRule{
		{Prefix: outer.URL + "/", AllowLoopback: true, Headers: map[string]string{"Authorization": "Bearer " + token}},
		{Prefix: innerByName + "/"},                                // on loopback, which this entry does not allow
		{Prefix: inner.URL + "/open/", AllowLoopback: true},        // allowed
		{Prefix: "http://cloud.example.test/", AllowPrivate: true}, // resolves to 127.0.0.1: loopback is not private
	}}
	reg := fetchTool(t, cfg, &loopback)
	for _, tc := range []struct {
		to, want string
	}{
		{"http://169.254.169.254/latest/meta-data/", "redirected, but not followed: http://169.254.169.254/latest/meta-data/ is not under a prefix http_fetch may fetch (tools.http_fetch.allow: " + outer.URL + "/, "},
		{innerByName + "/x", "redirected, but not followed: GET " + innerByName + "/x: 127.0.0.1 is a loopback address (set allow_loopback: true"},
		{"http://cloud.example.test:" + inner.port() + "/", "is not under a prefix"}, // another port
		{"https://example.com/", "is not under a prefix"},
	} {
		to.Store(tc.to)
		c := fetch(t, reg, getArgs(outer.URL+"/start"))
		if c.Outcome != tools.OutcomeError || !strings.Contains(c.Error, tc.want) {
			t.Errorf("http_fetch(redirected to %s) = %+v, want an error: %q", tc.to, c, tc.want)
		}
	}
	if n := inner.hits.Load(); n != 0 {
		t.Fatalf("the redirect targets were reached %d times, want 0", n)
	}
	// An allowed target is fetched, without the first entry's header.
	to.Store(inner.URL + "/open/page")
	c := fetch(t, reg, getArgs(outer.URL+"/start"))
	if c.Outcome != tools.OutcomeOK || !strings.Contains(c.Result, "URL: "+inner.URL+"/open/page (after 1 redirect)") || !strings.HasSuffix(c.Result, "inner: ") {
		t.Errorf("http_fetch(redirected to an allowed URL) = %+v, want its body, and no Authorization sent there", c)
	}
}

// Every call is bounded: the body it reads, its time, its redirects.
func TestFetchLimits(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("é", 3000) // 6000 bytes
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Length", fmt.Sprint(len(big)))
			_, _ = io.WriteString(w, big)
		case "/stream": // no Content-Length
			for range 10 {
				_, _ = io.WriteString(w, big)
				w.(http.Flusher).Flush()
			}
		case "/slow":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusTemporaryRedirect)
		case "/binary":
			_, _ = w.Write([]byte{0x89, 'P', 'N', 'G', 0, 0, 0xff})
		case "/missing":
			http.Error(w, "no such report", http.StatusNotFound)
		}
	})
	two := 2
	reg := fetchTool(t, builtin.FetchConfig{
		Allow:   []builtin.FetchRule{{Prefix: srv.URL + "/", AllowLoopback: true}},
		Timeout: 300 * time.Millisecond, MaxBytes: 1025, MaxRedirects: &two,
	}, nil)

	c := fetch(t, reg, getArgs(srv.URL+"/big"))
	if c.Outcome != tools.OutcomeOK || !strings.HasSuffix(c.Result, strings.Repeat("é", 512)+"\n[body cut: the first 1024 bytes shown, of 6000 bytes (tools.http_fetch.max_bytes)]") {
		t.Errorf("http_fetch(6000 bytes, max_bytes 1025) = %+v, want 1024 bytes (a whole character) and a note", c)
	}
	if c := fetch(t, reg, getArgs(srv.URL+"/stream")); !strings.HasSuffix(c.Result, "of more (tools.http_fetch.max_bytes)]") {
		t.Errorf("http_fetch(a long stream) = %+v, want it cut", c)
	}
	start := time.Now()
	c = fetch(t, reg, getArgs(srv.URL+"/slow"))
	if c.Outcome != tools.OutcomeTimeout || !strings.Contains(c.Error, "no complete answer within 300ms (tools.http_fetch.timeout)") {
		t.Errorf("http_fetch(a body that never ends) = %+v, want a timeout", c)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("http_fetch(slow) took %s, want about 300ms", d)
	}
	before := srv.hits.Load()
	c = fetch(t, reg, getArgs(srv.URL+"/loop"))
	if c.Outcome != tools.OutcomeError || !strings.Contains(c.Error, "more than 2 redirects (tools.http_fetch.max_redirects)") {
		t.Errorf("http_fetch(a redirect loop) = %+v, want an error after 2 redirects", c)
	}
	if n := srv.hits.Load() - before; n != 3 {
		t.Errorf("a redirect loop made %d requests, want 3 (the first and 2 redirects)", n)
	}
	if c := fetch(t, reg, getArgs(srv.URL+"/binary")); c.Outcome != tools.OutcomeOK || !strings.HasSuffix(c.Result, "[a body of 7 bytes that is not text, not shown]") {
		t.Errorf("http_fetch(binary) = %+v, want it summarised", c)
	}
	if c := fetch(t, reg, getArgs(srv.URL+"/missing")); c.Outcome != tools.OutcomeError || !strings.HasPrefix(c.Error, "HTTP 404 Not Found") || !strings.Contains(c.Error, "no such report") {
		t.Errorf("http_fetch(404) = %+v, want a tool error with the status and body", c)
	}
}

// A URL, a method or a path outside the allow-list is refused without a
// request; the error names the allow-list.
func TestFetchAllowList(t *testing.T) {
	t.Parallel()
	var posted atomic.Value
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		posted.Store(r.Method + " " + r.Header.Get("Content-Type") + " " + string(b))
		_, _ = io.WriteString(w, "ok")
	})
	reg := fetchTool(t, builtin.FetchConfig{Allow: []builtin.FetchRule{
		{Prefix: srv.URL + "/status", AllowLoopback: true},
		{Prefix: srv.URL + "/api/", Methods: []string{"post"}, AllowLoopback: true},
	}}, nil)
	for _, tc := range []struct {
		args, want string
	}{
		{getArgs(srv.URL + "/statusx"), srv.URL + "/statusx is not under a prefix http_fetch may fetch (tools.http_fetch.allow: " + srv.URL + "/status, " + srv.URL + "/api/); nothing was fetched"},
		{getArgs(srv.URL + "/status/../admin"), "write the path without . or .. segments"},
		{getArgs(srv.URL + "/status/%2e%2e/admin"), "write the path without . or .. segments"},
		{getArgs("https://" + strings.TrimPrefix(srv.URL, "http://") + "/status"), "is not under a prefix"},
		{getArgs("file:///etc/passwd"), `"file:///etc/passwd" is not an http(s) URL`},
		{getArgs("http://user:pw@" + strings.TrimPrefix(srv.URL, "http://") + "/status"), "may not hold credentials"},
		{`{"url":"` + srv.URL + `/status","method":"POST","body":"x"}`, "POST is not allowed under " + srv.URL + "/status, which allows GET, HEAD"},
		{getArgs(srv.URL + "/api/jobs"), "GET is not allowed under " + srv.URL + "/api/, which allows POST"},
	} {
		c := fetch(t, reg, tc.args)
		if c.Outcome != tools.OutcomeRefused || !strings.Contains(c.Error, tc.want) {
			t.Errorf("http_fetch(%s) = %+v, want refused: %q", tc.args, c, tc.want)
		}
	}
	if n := srv.hits.Load(); n != 0 {
		t.Fatalf("refused calls reached the server %d times, want 0", n)
	}
	c := fetch(t, reg, `{"url":"`+srv.URL+`/api/jobs","method":"POST","body":"{\"id\":1}"}`)
	if got, _ := posted.Load().(string); c.Outcome != tools.OutcomeOK || got != `POST application/json {"id":1}` {
		t.Errorf("http_fetch(POST) = %+v, the server got %q; want the body posted as JSON", c, got)
	}
	if c := fetch(t, reg, `{"url":"`+srv.URL+`/status","body":"x"}`); c.Outcome != tools.OutcomeError || !strings.Contains(c.Error, "a body is sent with POST only") {
		t.Errorf("http_fetch(GET with a body) = %+v, want an error", c)
	}
}

// The headers of an entry are sent, and never shown: a server that echoes
// them is redacted.
func TestFetchSecretHeaders(t *testing.T) {
	t.Parallel()
	const token = "gh-token-0123456789abcdef"
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized: got "+r.Header.Get("Authorization"), http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, `{"you":"Bearer `+token+`"}`)
	})
	reg := fetchTool(t, builtin.FetchConfig{Allow: []builtin.FetchRule{{
		Prefix: srv.URL + "/", AllowLoopback: true, Headers: map[string]string{"Authorization": "Bearer " + token},
	}}}, nil)
	c := fetch(t, reg, getArgs(srv.URL+"/user"))
	if c.Outcome != tools.OutcomeOK || strings.Contains(c.Result, token) || !strings.HasSuffix(c.Result, `{"you":"[redacted]"}`) {
		t.Errorf("http_fetch(an echo of the header) = %+v, want ok with the token cut out", c)
	}
}

func TestFetchConfig(t *testing.T) {
	t.Parallel()
	neg, many := -1, 21
	for _, tc := range []struct {
		name string
		c    builtin.FetchConfig
		want string
	}{
		{"no allow", builtin.FetchConfig{}, "allow: required"},
		{"no prefix", builtin.FetchConfig{Allow: []builtin.FetchRule{{}}}, "allow[0].prefix: required"},
		{"ftp", builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: "ftp://example.com/"}}}, `allow[0].prefix: "ftp://example.com/": want an http(s) URL`},
		{"query", builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: "https://example.com/a?key=x"}}}, "want no query or fragment"},
		{"user", builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: "https://u:hunter2@example.com/"}}}, "put credentials in headers"},
		{"dots", builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: "https://example.com/a/../b"}}}, "without . or .. segments"},
		{"twice", builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: "https://example.com/a"}, {Prefix: "https://EXAMPLE.com:443/a"}}}, "allow[1].prefix: https://EXAMPLE.com:443/a is allow[0].prefix too"},
		{"method", builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: "https://example.com/", Methods: []string{"DELETE"}}}}, `allow[0].methods[0]: "DELETE": want GET, HEAD or POST`},
		{"header", builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: "https://example.com/", Headers: map[string]string{"Host": "x"}}}}, "allow[0].headers: Host is set by http_fetch itself"},
		{"header value", builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: "https://example.com/", Headers: map[string]string{"X-Key": "secret-0123\nX-Evil: 1"}}}}, "allow[0].headers.X-Key: the value contains a control character"},
		{"timeout", builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: "https://example.com/"}}, Timeout: time.Hour}, "timeout: 1h0m0s is longer than 10m0s"},
		{"max_bytes", builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: "https://example.com/"}}, MaxBytes: 10}, "max_bytes: 10: want 1024 to 1048576"},
		{"redirects", builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: "https://example.com/"}}, MaxRedirects: &many}, "max_redirects: 21: want 0 (follow none) to 20"},
		{"negative redirects", builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: "https://example.com/"}}, MaxRedirects: &neg}, "max_redirects: -1"},
	} {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") || err != nil && strings.Contains(err.Error(), "secret-0123") {
			t.Errorf("%s: Validate() = %v quotes a secret", tc.name, err)
		}
	}
	if err := (builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: "https://api.example.com/v1/", Methods: []string{"GET", "post"}}}}).Validate(); err != nil {
		t.Errorf("Validate(good) = %v", err)
	}
}

// A secret across max_bytes, the entry's own (a header) or the config's
// (the ones the tool loop hands its tools), at every offset: no part of it
// of secret.Min bytes is left at the cut.
func TestFetchCutLeavesNoPartOfASecret(t *testing.T) {
	t.Parallel()
	const own, config = "own-key-0123456789abcdef", "cfg-key-fedcba9876543210"
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		var off int
		key, _ := strings.CutPrefix(r.URL.Path, "/")
		key, offs, _ := strings.Cut(key, "/")
		_, _ = fmt.Sscan(offs, &off)
		_, _ = io.WriteString(w, strings.Repeat("x", off)+key+strings.Repeat("y", 100))
	})
	reg := fetchTool(t, builtin.FetchConfig{MaxBytes: 1024, Allow: []builtin.FetchRule{{
		Prefix: srv.URL + "/", AllowLoopback: true, Headers: map[string]string{"X-Api-Key": own},
	}}}, nil)
	ctx := secret.NewContext(t.Context(), config)
	for _, key := range []string{own, config} {
		for off := 1024 - len(key); off <= 1024; off++ {
			c := reg.Call(ctx, "1", builtin.FetchName, getArgs(fmt.Sprintf("%s/%s/%d", srv.URL, key, off)))
			if c.Outcome != tools.OutcomeOK || !strings.Contains(c.Result, "[body cut: ") {
				t.Fatalf("http_fetch(%s at %d) = %+v, want ok and cut", key[:3], off, c)
			}
			body, _, _ := strings.Cut(c.Result, "\n[body cut: ")
			if w := partOf(body, key); w != "" {
				t.Errorf("http_fetch(%s at %d) = %q, keeps %q of it", key[:3], off, c.Result[len(c.Result)-150:], w)
			}
		}
	}
}
