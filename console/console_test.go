package console_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/console"
	"github.com/agentwork/agentwork/triggers/cron"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	adminToken  = "admin-token-0123456789abcdef"
	viewerToken = "viewer-token-0123456789abcdef" // console, read-only
	opToken     = "operator-token-0123456789abc"  // console: write
	taskToken   = "task-token-0123456789abcdef"   // no console grant
)

// callers stands in for the webhook's credentials (api.Deps.Callers).
func callers(r *http.Request, _ []byte) (api.Caller, error) {
	grant := map[string]func(kind, name string) bool{
		"Bearer " + viewerToken: func(k, n string) bool { return k == api.KindConsole && n == api.ConsoleRead },
		"Bearer " + opToken:     func(k, _ string) bool { return k == api.KindConsole },
		"Bearer " + taskToken:   func(k, _ string) bool { return k == "task" },
	}
	allows, ok := grant[r.Header.Get("Authorization")]
	if !ok {
		return api.Caller{}, errors.New("unknown token")
	}
	return api.Caller{Name: strings.Fields(r.Header.Get("Authorization"))[1][:4], Allows: allows}, nil
}

// credentials finds the credentials of callers by name (api.Deps.Credentials).
func credentials(name string) (api.Caller, [sha256.Size]byte, bool) {
	for _, tok := range []string{viewerToken, opToken, taskToken} {
		if tok[:4] == name {
			r, _ := http.NewRequest(http.MethodPost, "/", http.NoBody)
			r.Header.Set("Authorization", "Bearer "+tok)
			c, err := callers(r, nil)
			return c, sha256.Sum256([]byte(tok)), err == nil
		}
	}
	return api.Caller{}, [sha256.Size]byte{}, false
}

// routes answers the cron and heartbeat routes as their triggers do, and
// records the state changes that reach it.
type routes struct {
	mu     sync.Mutex
	calls  []string
	actors []api.Actor // who made each call (api.ActorFrom), if anyone
}

func (f *routes) Routes(mux *http.ServeMux) {
	json := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, body)
		}
	}
	record := func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.calls = append(f.calls, r.Method+" "+r.URL.Path)
		a, _ := api.ActorFrom(r.Context())
		f.actors = append(f.actors, a)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
	}
	mux.HandleFunc("GET /v1/jobs", json(`[{"job":{"id":"digest","schedule":"0 9 * * *","timezone":"Europe/Berlin","prompt":"p","origin":"config"},
		"state":{"last_outcome":"error","last_error":"<b>boom</b>","paused":false},"status":"active","next":"2030-01-01T08:00:00Z"},
		{"job":{"id":"nightly","schedule":"0 2 * * *","timezone":"Europe/Berlin","prompt":"p","origin":"api","budget":{"daily_tokens":1000}},
		"state":{"paused":true,"paused_by":"budget","paused_reason":"used 900 of its daily budget","paused_until":"2030-01-01T23:00:00Z","spent":{"day":"2029-12-31","tokens":900}},"status":"paused"}]`))
	mux.HandleFunc("POST /v1/jobs/{id}/{verb}", record)
	mux.HandleFunc("POST /v1/jobs", record)
	mux.HandleFunc("PATCH /v1/jobs/{id}", record)
	mux.HandleFunc("DELETE /v1/jobs/{id}", record)
	mux.HandleFunc("GET /v1/heartbeat", json(`{"name":"default","enabled":true,"every":"30m0s","active_hours":"always","active_now":true,
		"checklist":"- <img src=x onerror=alert(1)>","next_fire":"2030-01-01T08:00:00Z","budget":{"daily_tokens":5000},"budget_zone":"UTC","spent":{"day":"2029-12-31","tokens":1234},"last_run":{"run_id":"r","ended":"2026-01-01T08:00:00Z","outcome":"skip","reason":"empty_checklist"}}`))
	mux.HandleFunc("GET /v1/heartbeat/history", json(`{"runs":[]}`))
	mux.HandleFunc("POST /v1/heartbeat/{verb}", record)
}

func (f *routes) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

type fixture struct {
	b         *bus.Bus
	approvals *approval.Service
	url       string
	routes    *routes
	now       *clock
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newFixture(t *testing.T, opts ...func(*api.Deps)) *fixture {
	t.Helper()
	b := bustest.New(t)
	f := &fixture{b: b, routes: &routes{}, now: &clock{t: time.Now()}, approvals: approval.New(b, approval.Config{})}
	deps := api.Deps{Bus: b, Routes: []api.Router{f.routes}, Callers: callers, Credentials: credentials,
		Approvals: f.approvals, Console: console.New(console.WithClock(f.now.Now), console.WithSchedules(func(expr string, loc *time.Location) (interface{ Next(time.Time) time.Time }, error) {
			return cron.ParseSchedule(expr, loc)
		}))}
	for _, o := range opts {
		o(&deps)
	}
	s := api.New(api.Config{AdminToken: adminToken, KeepAlive: time.Hour}, deps)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

// browser is a client with a cookie jar that does not follow redirects.
type browser struct {
	t    *testing.T
	f    *fixture
	c    *http.Client
	csrf string
}

func (f *fixture) browser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, f: f, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type page struct {
	status int
	header http.Header
	body   string
}

func (b *browser) do(method, path string, form url.Values) page {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(b.t.Context(), method, b.f.url+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return page{resp.StatusCode, resp.Header, string(raw)}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// login logs in with tok and keeps the CSRF token of the overview's forms.
func (b *browser) login(tok string) *browser {
	b.t.Helper()
	if p := b.do("POST", "/login", url.Values{"token": {tok}, "next": {"/"}}); p.status != http.StatusSeeOther {
		b.t.Fatalf("login with %s = %d %s", tok, p.status, p.body)
	}
	p := b.do("GET", "/", nil)
	m := csrfField.FindStringSubmatch(p.body)
	if p.status != 200 || m == nil {
		b.t.Fatalf("overview after login = %d, no CSRF field: %s", p.status, p.body)
	}
	b.csrf = m[1]
	return b
}

var (
	pages = []string{"/", "/runs", "/runs/0196a7c3-1f2e-7c4d-9a8b-5e6f7a8b9c0d", "/jobs", "/heartbeat", "/deliveries", "/approvals", "/approvals?decided=1", "/workflows", "/memory", "/usage", "/tools", "/jobs/new", "/approvals/0123456789abcdef0123456789abcdef", "/no-such-page"}
	// changes are the forms that change state, and the API calls they make.
	changes = []struct{ path, call string }{
		{"/jobs/digest/run", "POST /v1/jobs/digest/run"},
		{"/jobs/digest/pause", "POST /v1/jobs/digest/pause"},
		{"/jobs/digest/resume", "POST /v1/jobs/digest/resume"},
		{"/jobs/digest/delete", "DELETE /v1/jobs/digest"},
		{"/jobs/new", "POST /v1/jobs"},
		{"/jobs/digest/edit", "PATCH /v1/jobs/digest"},
		{"/heartbeat/wake", "POST /v1/heartbeat/wake"},
		{"/heartbeat/pause", "POST /v1/heartbeat/pause"},
		{"/heartbeat/resume", "POST /v1/heartbeat/resume"},
		{"/deliveries/n-1/retry", ""},
		{"/deliveries-retry-all", ""},
		{"/approvals/0123456789abcdef0123456789abcdef", ""},
		{"/workflow-runs/r1/cancel", ""},
		{"/workflow-runs/r1/retry", ""},
		{"/memory/long", ""},
	}
)

// Every page and form needs a session: without one, it redirects to the
// login page; a read-only session sees every page and may change nothing
// (403, and the API is not called); a form without the session's CSRF
// token is refused (403); with it, the change reaches the API's handler.
func TestAuth(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	anon := f.browser(t)
	for _, p := range pages {
		got := anon.do("GET", p, nil)
		if got.status != http.StatusSeeOther || got.header.Get("Location") != "/login?next="+url.QueryEscape(p) {
			t.Errorf("GET %s without a session = %d to %q, want 303 to the login page", p, got.status, got.header.Get("Location"))
		}
	}
	for _, c := range append(changes, struct{ path, call string }{"/logout", ""}) {
		if got := anon.do("POST", c.path, url.Values{"csrf": {"x"}}); got.status != http.StatusSeeOther || !strings.HasPrefix(got.header.Get("Location"), "/login") {
			t.Errorf("POST %s without a session = %d to %q, want 303 to the login page", c.path, got.status, got.header.Get("Location"))
		}
	}
	if got := anon.do("GET", "/events", nil); got.status != http.StatusUnauthorized {
		t.Errorf("GET /events without a session = %d, want 401", got.status)
	}

	viewer := f.browser(t).login(viewerToken)
	for _, p := range pages {
		want := http.StatusOK
		if p == "/no-such-page" || strings.HasPrefix(p, "/runs/") || strings.HasPrefix(p, "/approvals/") {
			want = http.StatusNotFound
		}
		if got := viewer.do("GET", p, nil); got.status != want {
			t.Errorf("GET %s, read-only = %d, want %d", p, got.status, want)
		}
	}
	for _, c := range changes {
		got := viewer.do("POST", c.path, url.Values{"csrf": {viewer.csrf}})
		if got.status != http.StatusForbidden || !strings.Contains(got.body, "Read-only") {
			t.Errorf("POST %s, read-only = %d, want 403 saying read-only", c.path, got.status)
		}
	}
	if calls := f.routes.got(); len(calls) != 0 {
		t.Errorf("a read-only session reached the API: %v", calls)
	}
	if strings.Contains(viewer.do("GET", "/jobs", nil).body, "Run now") {
		t.Error("the jobs page offers a read-only session to run a job")
	}

	op := f.browser(t).login(opToken)
	for _, c := range changes {
		for _, form := range []url.Values{{}, {"csrf": {"forged"}}, {"csrf": {viewer.csrf}}} {
			if got := op.do("POST", c.path, form); got.status != http.StatusForbidden {
				t.Errorf("POST %s with csrf %q = %d, want 403", c.path, form.Get("csrf"), got.status)
			}
		}
	}
	if calls := f.routes.got(); len(calls) != 0 {
		t.Errorf("a form without the session's CSRF token reached the API: %v", calls)
	}
	var want []string
	for _, c := range changes {
		got := op.do("POST", c.path, url.Values{"csrf": {op.csrf}})
		if got.status != http.StatusSeeOther {
			t.Errorf("POST %s with the CSRF token = %d %s, want 303", c.path, got.status, got.body)
		}
		if c.call != "" {
			want = append(want, c.call)
		}
	}
	if calls := f.routes.got(); strings.Join(calls, ",") != strings.Join(want, ",") {
		t.Errorf("API calls = %v, want %v", calls, want)
	}
	// The outcome is shown once on the next page.
	op.do("POST", "/jobs/digest/pause", url.Values{"csrf": {op.csrf}, "back": {"/jobs"}})
	if p := op.do("GET", "/jobs", nil); !strings.Contains(p.body, "Job digest paused.") {
		t.Errorf("the jobs page after a pause does not say so: %s", p.body)
	}
	if p := op.do("GET", "/jobs", nil); strings.Contains(p.body, "Job digest paused.") {
		t.Error("the flash is shown twice")
	}
	// Another site's form is refused even with the token.
	req, _ := http.NewRequestWithContext(t.Context(), "POST", f.url+"/heartbeat/wake", strings.NewReader("csrf="+url.QueryEscape(op.csrf)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	if resp, err := op.c.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST from another origin = %v %v, want 403", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}

	// Logout ends the session.
	if got := op.do("POST", "/logout", url.Values{"csrf": {op.csrf}}); got.status != http.StatusSeeOther {
		t.Errorf("logout = %d", got.status)
	}
	if got := op.do("GET", "/", nil); got.status != http.StatusSeeOther {
		t.Errorf("GET / after logout = %d, want 303 to the login page", got.status)
	}
}

// Login takes the admin token or a credential granted the console; the
// cookie is HttpOnly, SameSite=Strict, and Secure behind TLS; a session
// ends after 12 h without a request; next never leaves the console.
func TestLogin(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.browser(t)
	if p := b.do("GET", "/login", nil); p.status != 200 || !strings.Contains(p.body, `type="password"`) {
		t.Fatalf("GET /login = %d %s", p.status, p.body)
	}
	for _, tok := range []string{"", "wrong-token-0123456789", taskToken} {
		p := b.do("POST", "/login", url.Values{"token": {tok}})
		if p.status != http.StatusUnauthorized || !strings.Contains(p.body, "not accepted") || p.header.Get("Set-Cookie") != "" {
			t.Errorf("login with %q = %d (cookie %q), want 401 and no cookie", tok, p.status, p.header.Get("Set-Cookie"))
		}
	}
	p := b.do("POST", "/login", url.Values{"token": {adminToken}, "next": {"//evil.example/x"}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/" {
		t.Errorf("login, next=//evil.example = %d to %q, want 303 to /", p.status, p.header.Get("Location"))
	}
	ck := p.header.Get("Set-Cookie")
	for _, want := range []string{console.CookieName + "=", "HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(ck, want) {
			t.Errorf("cookie %q lacks %s", ck, want)
		}
	}
	if strings.Contains(ck, "Secure") {
		t.Errorf("cookie %q is Secure over plain HTTP", ck)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "POST", f.url+"/login", strings.NewReader("token="+adminToken+"&next=%2Fjobs"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-Proto", "https")
	resp, err := f.browser(t).c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ck := resp.Header.Get("Set-Cookie"); !strings.Contains(ck, "Secure") || resp.Header.Get("Location") != "/jobs" {
		t.Errorf("login behind TLS: cookie %q to %q, want Secure, to /jobs", ck, resp.Header.Get("Location"))
	}

	// Idle expiry.
	if p := b.do("GET", "/", nil); p.status != 200 {
		t.Fatalf("GET / after login = %d", p.status)
	}
	f.now.add(console.DefaultIdle - time.Minute)
	if p := b.do("GET", "/", nil); p.status != 200 {
		t.Errorf("GET / after %s idle = %d, want 200", console.DefaultIdle-time.Minute, p.status)
	}
	f.now.add(console.DefaultIdle + time.Second)
	if p := b.do("GET", "/", nil); p.status != http.StatusSeeOther {
		t.Errorf("GET / after %s idle = %d, want 303 to the login page", console.DefaultIdle+time.Second, p.status)
	}
}

// Every response carries the security headers.
func TestHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.browser(t)
	for _, p := range []string{"/login", "/", "/static/console.css"} {
		got := b.do("GET", p, nil)
		for k, want := range map[string]string{"Content-Security-Policy": console.ContentSecurityPolicy, "X-Content-Type-Options": "nosniff",
			"Referrer-Policy": "no-referrer"} {
			if got.header.Get(k) != want {
				t.Errorf("GET %s: %s = %q, want %q", p, k, got.header.Get(k), want)
			}
		}
	}
	for _, want := range []string{"frame-ancestors 'none'", "default-src 'self'"} {
		if !strings.Contains(console.ContentSecurityPolicy, want) {
			t.Errorf("the CSP lacks %s", want)
		}
	}
	if strings.Contains(console.ContentSecurityPolicy, "unsafe-inline") {
		t.Error("the CSP allows inline script or style")
	}
}

func emit(t *testing.T, b *bus.Bus, res agentwork.Result) bus.Event {
	t.Helper()
	ev, err := bus.NewEvent("agentwork/runner", bus.TypeOf(res.Source, res.Outcome), res.Name, time.Now(), res)
	if err != nil {
		t.Fatal(err)
	}
	ev.RunID = bus.NewID()
	if _, err := b.Publish(t.Context(), b.Subjects.Event(res.Source, res.Outcome), ev, ""); err != nil {
		t.Fatal(err)
	}
	return ev
}

// What a model wrote is shown as text: a run whose text is a script tag
// renders escaped on the runs list and the run's page, and so do the
// heartbeat's checklist and a job's error.
func TestEscaping(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const evil = `<script>alert(1)</script>`
	ev := emit(t, f.b, agentwork.Result{Source: "task", Name: "x", Outcome: bus.OutcomeDone, Text: evil, Reply: evil + " reply", Model: "m"})
	b := f.browser(t).login(viewerToken)
	for _, p := range []string{"/runs", "/runs/" + ev.ID} {
		got := b.do("GET", p, nil)
		if got.status != 200 || strings.Contains(got.body, evil) || !strings.Contains(got.body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("GET %s = %d: the run's text is not escaped:\n%s", p, got.status, got.body)
		}
	}
	if got := b.do("GET", "/heartbeat", nil); strings.Contains(got.body, "<img src=x") || !strings.Contains(got.body, "&lt;img src=x onerror=alert(1)&gt;") {
		t.Errorf("the checklist is not escaped:\n%s", got.body)
	}
	if got := b.do("GET", "/jobs", nil); strings.Contains(got.body, "<b>boom</b>") {
		t.Errorf("a job's error is not escaped:\n%s", got.body)
	}
	// No inline script or style anywhere.
	for _, p := range append([]string{"/runs/" + ev.ID}, pages[:13]...) {
		body := b.do("GET", p, nil).body
		if regexp.MustCompile(`<script>|<style|\sstyle="|\son[a-z]+="`).MatchString(body) {
			t.Errorf("GET %s has inline script or style:\n%s", p, body)
		}
	}
}

// The live stream: the API's event stream for a session, each event
// unnamed (so the page's one listener gets every source's runs).
func TestEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.browser(t).login(viewerToken)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.url+"/events?source=task", nil)
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /events = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != ": agentwork events\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	emit(t, f.b, agentwork.Result{Source: "cron", Name: "other", Outcome: bus.OutcomeDone})
	ev := emit(t, f.b, agentwork.Result{Source: "task", Name: "x", Outcome: bus.OutcomeDone, Text: "hi"})
	var got []string
	for len(got) < 2 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v (so far %q)", err, got)
		}
		if line == "\n" {
			continue
		}
		got = append(got, line)
	}
	if got[0] != "id: "+ev.ID+"\n" || !strings.HasPrefix(got[1], "data: {") || !strings.Contains(got[1], `"text":"hi"`) {
		t.Errorf("stream = %q, want the task's event without an event: line", got)
	}
}
