package console_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/console"
)

// grants are the webhook token credentials of one instance's config, by
// name: what api.Deps.Callers and api.Deps.Credentials answer.
type grants map[string]grant

type grant struct {
	token  string
	allows func(kind, name string) bool
}

func consoleRead(k, n string) bool  { return k == api.KindConsole && n == api.ConsoleRead }
func consoleWrite(k, _ string) bool { return k == api.KindConsole }

func (g grants) callers(r *http.Request, _ []byte) (api.Caller, error) {
	for name, c := range g {
		if r.Header.Get("Authorization") == "Bearer "+c.token {
			return api.Caller{Name: name, Allows: c.allows}, nil
		}
	}
	return api.Caller{}, errors.New("unknown token")
}

func (g grants) lookup(name string) (api.Caller, [sha256.Size]byte, bool) {
	c, ok := g[name]
	if !ok {
		return api.Caller{}, [sha256.Size]byte{}, false
	}
	return api.Caller{Name: name, Allows: c.allows}, sha256.Sum256([]byte(c.token)), true
}

// instance is one console server on a bus: another instance, or the same
// one started again, with its own config (admin token, grants).
type instance struct {
	url    string
	routes *routes
	srv    *httptest.Server
}

func startInstance(t *testing.T, b *bus.Bus, admin string, g grants, opts ...console.Option) *instance {
	t.Helper()
	in := &instance{routes: &routes{}}
	s := api.New(api.Config{AdminToken: admin, KeepAlive: time.Hour},
		api.Deps{Bus: b, Routes: []api.Router{in.routes}, Callers: g.callers, Credentials: g.lookup, Console: console.New(opts...)})
	in.srv = httptest.NewServer(s.Handler())
	t.Cleanup(in.srv.Close)
	in.url = in.srv.URL
	return in
}

// client is a browser whose cookie is set by hand, so that it can be sent
// to any instance.
type client struct {
	t      *testing.T
	cookie string
	csrf   string
}

func (c *client) do(in *instance, method, path string, form url.Values) page {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, in.url+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if c.cookie != "" {
		req.AddCookie(&http.Cookie{Name: console.CookieName, Value: c.cookie})
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return page{resp.StatusCode, resp.Header, string(raw)}
}

// loginAt logs in at in with tok and keeps the cookie and the CSRF token.
func loginAt(t *testing.T, in *instance, tok string) *client {
	t.Helper()
	c := &client{t: t}
	p := c.do(in, "POST", "/login", url.Values{"token": {tok}, "next": {"/"}})
	for _, ck := range (&http.Response{Header: p.header}).Cookies() {
		if ck.Name == console.CookieName {
			c.cookie = ck.Value
		}
	}
	if p.status != http.StatusSeeOther || c.cookie == "" {
		t.Fatalf("login with %s = %d, cookie %q: %s", tok, p.status, c.cookie, p.body)
	}
	c.csrf = c.mustCSRF(in)
	return c
}

func (c *client) mustCSRF(in *instance) string {
	c.t.Helper()
	p := c.do(in, "GET", "/", nil)
	m := csrfField.FindStringSubmatch(p.body)
	if p.status != 200 || m == nil {
		c.t.Fatalf("overview = %d, no CSRF field: %s", p.status, p.body)
	}
	return m[1]
}

// sessionKey is where the bus keeps the session of cookie.
func sessionKey(cookie string) string {
	sum := sha256.Sum256([]byte(cookie))
	return hex.EncodeToString(sum[:])
}

func bucketKeys(t *testing.T, b *bus.Bus) []string {
	t.Helper()
	keys, err := b.Keys(t.Context(), b.ConsoleSessions, ">")
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

var ops = grants{"oper": {opToken, consoleWrite}, "view": {viewerToken, consoleRead}}

// A session lives on the bus: the console started again on the same bus
// knows it (with the same CSRF token), and so does another instance.
func TestSessionSurvivesRestartAndIsShared(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	first := startInstance(t, b, adminToken, ops)
	admin := loginAt(t, first, adminToken)
	op := loginAt(t, first, opToken)
	first.srv.Close()

	again := startInstance(t, b, adminToken, ops)
	other := startInstance(t, bustest.Client(t, b), adminToken, ops)
	for _, in := range []*instance{again, other} {
		for _, c := range []*client{admin, op} {
			if got := c.mustCSRF(in); got != c.csrf {
				t.Errorf("the CSRF token changed with the instance: %q, was %q", got, c.csrf)
			}
		}
	}
	// A change made on the other instance goes through as the session's
	// user.
	if p := op.do(other, "POST", "/heartbeat/wake", url.Values{"csrf": {op.csrf}}); p.status != http.StatusSeeOther {
		t.Fatalf("wake on the other instance = %d %s", p.status, p.body)
	}
	if got := other.routes.got(); len(got) != 1 || got[0] != "POST /v1/heartbeat/wake" {
		t.Errorf("the other instance's API got %v, want the wake", got)
	}
	if a := other.routes.actors[0]; a.Name != "oper" || a.Credential != "oper" {
		t.Errorf("the wake was made as %+v, want the credential oper", a)
	}
	// The flash of that change shows on the next page, wherever it is.
	if p := op.do(again, "GET", "/heartbeat", nil); !strings.Contains(p.body, "Heartbeat woken") {
		t.Errorf("the heartbeat page after the wake on another instance = %d, without its flash", p.status)
	}

	// Logout on one instance ends the session on every one, and removes
	// it from the bus.
	if p := op.do(other, "POST", "/logout", url.Values{"csrf": {op.csrf}}); p.status != http.StatusSeeOther {
		t.Fatalf("logout = %d", p.status)
	}
	if p := op.do(again, "GET", "/", nil); p.status != http.StatusSeeOther || !strings.HasPrefix(p.header.Get("Location"), "/login") {
		t.Errorf("GET / after logout elsewhere = %d to %q, want 303 to the login page", p.status, p.header.Get("Location"))
	}
	if _, err := b.ConsoleSessions.Get(t.Context(), sessionKey(op.cookie)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the session after logout: %v, want not found", err)
	}
	if keys := bucketKeys(t, b); len(keys) != 1 || keys[0] != sessionKey(admin.cookie) {
		t.Errorf("keys after one of two logged out = %v, want the admin's only", keys)
	}
}

// The bucket holds no secret: not the cookie, not the CSRF token, not the
// token logged in with, in any key or value.
func TestSessionBucketHoldsNoSecret(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	in := startInstance(t, b, adminToken, ops)
	clients := []*client{loginAt(t, in, adminToken), loginAt(t, in, opToken), loginAt(t, in, viewerToken)}
	var secrets []string
	for _, c := range clients {
		secrets = append(secrets, c.cookie, c.csrf)
	}
	secrets = append(secrets, adminToken, opToken, viewerToken)
	keys := bucketKeys(t, b)
	if len(keys) != len(clients) {
		t.Fatalf("%d keys for %d sessions: %v", len(keys), len(clients), keys)
	}
	for _, k := range keys {
		e, err := b.ConsoleSessions.Get(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			if strings.Contains(k, s) || strings.Contains(string(e.Value()), s) {
				t.Errorf("key %s or its value %s holds the secret %q", k, e.Value(), s)
			}
		}
	}
}

// A session ends after its idle time: a read finds it expired (and
// removes it), and the bus drops a key not refreshed within it by itself.
// Page views within a minute write nothing.
func TestSessionIdleExpiry(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	now := &clock{t: time.Now()}
	in := startInstance(t, b, adminToken, ops, console.WithClock(now.Now), console.WithConfig(console.Config{SessionIdle: time.Hour, SessionMax: 24 * time.Hour}))
	c := loginAt(t, in, adminToken)
	rev := func() uint64 {
		e, err := b.ConsoleSessions.Get(t.Context(), sessionKey(c.cookie))
		if err != nil {
			t.Fatalf("the session on the bus: %v", err)
		}
		return e.Revision()
	}
	written := rev()
	for range 10 {
		now.add(5 * time.Second)
		if p := c.do(in, "GET", "/jobs", nil); p.status != 200 {
			t.Fatalf("GET /jobs = %d", p.status)
		}
	}
	if r := rev(); r != written {
		t.Errorf("10 page views within a minute wrote the session (revision %d, was %d), want no write", r, written)
	}
	now.add(time.Minute)
	c.do(in, "GET", "/jobs", nil)
	if r := rev(); r == written {
		t.Error("a page view a minute later did not refresh the session")
	}
	now.add(time.Hour + time.Second)
	p := c.do(in, "GET", "/jobs", nil)
	if p.status != http.StatusSeeOther || !strings.HasPrefix(p.header.Get("Location"), "/login") {
		t.Fatalf("GET /jobs after an hour idle = %d to %q, want 303 to the login page", p.status, p.header.Get("Location"))
	}
	if lp := c.do(in, "GET", p.header.Get("Location"), nil); !strings.Contains(lp.body, "expired") {
		t.Errorf("the login page after expiry does not say the session expired: %s", lp.body)
	}
	if _, err := b.ConsoleSessions.Get(t.Context(), sessionKey(c.cookie)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the expired session is still on the bus: %v", err)
	}

	// The session at most lasts SessionMax, however busy.
	c = loginAt(t, in, adminToken)
	for range 25 {
		now.add(59 * time.Minute)
		c.do(in, "GET", "/", nil)
	}
	if p := c.do(in, "GET", "/", nil); p.status != http.StatusSeeOther {
		t.Errorf("GET / after a day of use = %d, want 303 to the login page (session_max 24h)", p.status)
	}

	// The bus drops a session not refreshed within its idle time.
	short := startInstance(t, b, adminToken, ops, console.WithConfig(console.Config{SessionIdle: time.Second, SessionMax: time.Hour}))
	c = loginAt(t, short, adminToken)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := b.ConsoleSessions.Get(t.Context(), sessionKey(c.cookie))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a session idle for 1s is still on the bus after 20s: %v", err)
		}
		select {
		case <-t.Context().Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// The grant is that of the config as it is now: a token narrowed to
// read-only refuses the next change; a token removed, or changed, ends
// its sessions; an admin session ends with its admin token.
func TestSessionGrantIsReadAtEveryRequest(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	before := startInstance(t, b, adminToken, ops)
	op := loginAt(t, before, opToken)
	view := loginAt(t, before, viewerToken)
	admin := loginAt(t, before, adminToken)

	narrowed := startInstance(t, b, adminToken, grants{"oper": {opToken, consoleRead}, "view": {viewerToken, consoleRead}})
	if p := op.do(narrowed, "POST", "/heartbeat/wake", url.Values{"csrf": {op.csrf}}); p.status != http.StatusForbidden || !strings.Contains(p.body, "Read-only") {
		t.Errorf("a change of a session whose grant was narrowed = %d, want 403 read-only: %s", p.status, p.body)
	}
	if calls := narrowed.routes.got(); len(calls) != 0 {
		t.Errorf("the narrowed session reached the API: %v", calls)
	}
	if p := op.do(narrowed, "GET", "/jobs", nil); p.status != 200 || strings.Contains(p.body, "Run now") {
		t.Errorf("the jobs page of the narrowed session = %d, offers to run a job: %v", p.status, strings.Contains(p.body, "Run now"))
	}

	removed := startInstance(t, b, "another-admin-token-0123456789", grants{"view": {"a-new-viewer-token-0123456789", consoleRead}})
	for who, c := range map[string]*client{"removed token": op, "changed token": view, "rotated admin token": admin} {
		p := c.do(removed, "GET", "/jobs", nil)
		if p.status != http.StatusSeeOther || !strings.HasPrefix(p.header.Get("Location"), "/login") {
			t.Errorf("%s: GET /jobs = %d to %q, want 303 to the login page", who, p.status, p.header.Get("Location"))
			continue
		}
		if lp := c.do(removed, "GET", p.header.Get("Location"), nil); !strings.Contains(lp.body, "no longer accepted") {
			t.Errorf("%s: the login page does not say why the session ended: %s", who, lp.body)
		}
		if p := c.do(removed, "POST", "/heartbeat/wake", url.Values{"csrf": {c.csrf}}); p.status != http.StatusSeeOther || len(removed.routes.got()) != 0 {
			t.Errorf("%s: POST = %d, API calls %v, want 303 to the login page and none", who, p.status, removed.routes.got())
		}
	}
	if keys := bucketKeys(t, b); len(keys) != 0 {
		t.Errorf("sessions of tokens no longer accepted are still on the bus: %v", keys)
	}
}

// With the bus out of reach, a page says so (503) instead of sending the
// browser to the login page.
func TestSessionBusDown(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	c := bustest.Client(t, b)
	in := startInstance(t, c, adminToken, ops)
	admin := loginAt(t, in, adminToken)
	_ = c.Close()
	for _, tc := range []struct{ method, path string }{{"GET", "/jobs"}, {"POST", "/heartbeat/wake"}, {"GET", "/login"}} {
		var form url.Values
		if tc.method == "POST" {
			form = url.Values{"csrf": {admin.csrf}}
		}
		p := admin.do(in, tc.method, tc.path, form)
		if p.status != http.StatusServiceUnavailable || !strings.Contains(p.body, "bus") {
			t.Errorf("%s %s with the bus down = %d to %q, want 503 naming the bus: %s", tc.method, tc.path, p.status, p.header.Get("Location"), p.body)
		}
	}
}

// A refused form's message echoes the user's input cut short: a
// session's record stays small.
func TestFlashCut(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	op := f.browser(t).login(opToken)
	long := strings.Repeat("9x", 70<<10) // near maxForm
	got := op.do("POST", "/jobs/new", url.Values{"csrf": {op.csrf}, "revision": {long}})
	if got.status != http.StatusSeeOther {
		t.Fatalf("a form with a bad revision = %d:\n%s", got.status, got.body)
	}
	p := op.do("GET", got.header.Get("Location"), nil)
	if !strings.Contains(p.body, "is not a number") || strings.Contains(p.body, strings.Repeat("9x", 1000)) {
		t.Errorf("the message is missing or not cut:\n%s", p.body[:min(len(p.body), 3000)])
	}
}

// A session's record is bound to its own key: someone who can write the
// sessions bucket (but knows no token and no fingerprint key) cannot copy
// the admin's record under the key of a cookie they choose.
func TestSessionRecordCopiedElsewhereIsRefused(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	in := startInstance(t, b, adminToken, ops)
	admin := loginAt(t, in, adminToken)
	e, err := b.ConsoleSessions.Get(t.Context(), sessionKey(admin.cookie))
	if err != nil {
		t.Fatal(err)
	}
	forged := &client{t: t, cookie: "a-cookie-of-the-attackers-choosing-0123456789"}
	if _, err := b.ConsoleSessions.Put(t.Context(), sessionKey(forged.cookie), e.Value()); err != nil {
		t.Fatal(err)
	}
	if p := forged.do(in, "GET", "/", nil); p.status == http.StatusOK {
		t.Errorf("a copy of the admin's session record under another cookie's key opens the overview (%d)", p.status)
	}
	if p := admin.do(in, "GET", "/", nil); p.status != http.StatusOK {
		t.Errorf("the admin's own session = %d, want 200", p.status)
	}
}
