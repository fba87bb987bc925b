package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
)

// jobs is a Router as cron would provide: a wildcard route and a panic.
type jobs struct{}

func (jobs) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"id":%q}`, r.PathValue("id"))
	})
	mux.HandleFunc("POST /v1/jobs/{id}/boom", func(http.ResponseWriter, *http.Request) { panic("boom") })
}

func TestAdminAuth(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(_ *api.Config, d *api.Deps) { d.Routes = []api.Router{jobs{}} })
	tests := []struct {
		method, path, token string
		status              int
	}{
		{"GET", "/v1/runs", "", 401},
		{"GET", "/v1/runs", "wrong-token-0123456789", 401},
		{"GET", "/v1/runs", taskToken, 401}, // a webhook token is not admin
		{"GET", "/v1/runs", adminToken, 200},
		{"GET", "/v1/events?since=bogus", "", 401},
		{"GET", "/v1/jobs/daily", "", 401},
		{"GET", "/v1/jobs/daily", adminToken, 200},
		{"GET", "/v1/nothing", "", 401},
		{"GET", "/v1/nothing", adminToken, 404},
		{"DELETE", "/v1/runs", adminToken, 405},
		{"GET", "/nothing", "", 404},
		{"GET", "/healthz", "", 200},
		{"GET", "/readyz", "", 200},
		{"GET", "/metrics", "", 200}, // from loopback
	}
	for _, tt := range tests {
		t.Run(tt.method+tt.path+"/"+tt.token, func(t *testing.T) {
			t.Parallel()
			r := f.do(t, tt.method, tt.path, tt.token, "")
			if r.status != tt.status {
				t.Fatalf("%s %s = %d, want %d; %s", tt.method, tt.path, r.status, tt.status, r.body)
			}
			if r.status >= 400 {
				d := r.problem(t)
				if r.status == 401 && r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("401 without WWW-Authenticate")
				}
				if r.status == 405 && r.header.Get("Allow") == "" {
					t.Errorf("405 without Allow: %+v", d)
				}
			}
		})
	}
	if r := f.do(t, "GET", "/v1/jobs/daily-report", adminToken, ""); string(r.body) != `{"id":"daily-report"}` {
		t.Errorf("mounted route body = %s, want the path value echoed", r.body)
	}
}

func TestPanicIsProblem(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(_ *api.Config, d *api.Deps) { d.Routes = []api.Router{jobs{}} })
	r := f.do(t, "POST", "/v1/jobs/x/boom", adminToken, "")
	if r.status != 500 {
		t.Fatalf("status = %d, want 500", r.status)
	}
	r.problem(t)
	if r := f.do(t, "GET", "/healthz", "", ""); r.status != 200 {
		t.Fatalf("after a panic /healthz = %d, want 200", r.status)
	}
}

// Public routes authenticate callers themselves; IsAdmin tells them
// whether the caller sent the admin token.
func TestPublicRoutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, tt := range []struct{ token, as string }{{taskToken, "ci"}, {adminToken, "admin"}} {
		r := f.do(t, "POST", "/v1/tasks", tt.token, `{"prompt":"hello"}`)
		if want := fmt.Sprintf(`{"as":%q}`, tt.as); r.status != http.StatusAccepted || string(r.body) != want {
			t.Errorf("POST /v1/tasks with %s = %d %s, want 202 %s", tt.token, r.status, r.body, want)
		}
	}
	r := f.do(t, "POST", "/v1/tasks", "wrong-token-0123456789", `{"prompt":"hello"}`)
	if r.status != 401 || r.header.Get("WWW-Authenticate") != `Bearer realm="agentwork"` {
		t.Errorf("POST /v1/tasks with a wrong token = %d (%s), want the route's own 401", r.status, r.header.Get("WWW-Authenticate"))
	}
	r.problem(t)
	// Outside a server nobody is admin.
	req := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/tasks", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if api.IsAdmin(req) {
		t.Error("IsAdmin outside a server = true, want false")
	}
	// Without the route, the path is an admin path like any other.
	g := newFixture(t, func(_ *api.Config, d *api.Deps) { d.PublicRoutes = nil })
	if r := g.do(t, "POST", "/v1/tasks", taskToken, `{"prompt":"x"}`); r.status != 401 {
		t.Errorf("without the route, POST /v1/tasks = %d, want 401", r.status)
	}
	if r := g.do(t, "POST", "/v1/tasks", adminToken, `{"prompt":"x"}`); r.status != 404 {
		t.Errorf("without the route, POST /v1/tasks as admin = %d, want 404", r.status)
	}
}

// notReady is a part that is not ready yet.
type notReady struct{}

func (notReady) Ready(context.Context) error {
	return errors.New("cron: the scheduler is still loading")
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	if r := f.do(t, "GET", "/readyz", "", ""); r.status != 200 || string(r.body) != "{\"status\":\"ready\"}\n" {
		t.Fatalf("/readyz = %d %s, want 200 ready", r.status, r.body)
	}
	d := newFixture(t, func(_ *api.Config, d *api.Deps) {
		d.Details = func() map[string]string { return map[string]string{"mcp.fs": "up", "mcp.broken": "down"} }
	})
	if r := d.do(t, "GET", "/readyz", "", ""); r.status != 200 || !strings.Contains(string(r.body), `"details":{"mcp.broken":"down","mcp.fs":"up"}`) {
		t.Errorf("/readyz with a server down = %d %s, want 200 listing the MCP servers' states", r.status, r.body)
	}
	if err := f.b.Close(); err != nil {
		t.Fatal(err)
	}
	r := f.do(t, "GET", "/readyz", "", "")
	if r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Fatalf("/readyz with the bus closed = %d (Retry-After %q), want 503 with Retry-After", r.status, r.header.Get("Retry-After"))
	}
	r.problem(t)
	if r := f.do(t, "GET", "/healthz", "", ""); r.status != 200 {
		t.Errorf("/healthz with the bus closed = %d, want 200 (the process is alive)", r.status)
	}
	if r := f.do(t, "GET", "/v1/runs", adminToken, ""); r.status != 503 {
		t.Errorf("GET /v1/runs with the bus closed = %d, want 503", r.status)
	}

	// Every part is asked; one not ready is enough, and says why.
	g := newFixture(t, func(_ *api.Config, d *api.Deps) { d.Ready = []api.Readier{d.Bus, notReady{}} })
	r = g.do(t, "GET", "/readyz", "", "")
	if d := r.problem(t); r.status != 503 || !strings.Contains(d.Detail, "scheduler is still loading") {
		t.Errorf("/readyz with a part not ready = %d %q, want 503 saying why", r.status, d.Detail)
	}
	if body := string(g.do(t, "GET", "/metrics", "", "").body); !strings.Contains(body, "agentwork_bus_ready 0\n") {
		t.Errorf("/metrics with a part not ready lacks agentwork_bus_ready 0")
	}
}

func TestMetricsHTTP(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(_ *api.Config, d *api.Deps) { d.Routes = []api.Router{jobs{}} })
	f.do(t, "GET", "/healthz", "", "")
	f.do(t, "GET", "/healthz", "", "")
	f.do(t, "GET", "/v1/jobs/a", adminToken, "")
	f.do(t, "GET", "/v1/jobs/b", "", "")
	f.do(t, "GET", "/nope", "", "")
	r := f.do(t, "GET", "/metrics", "", "")
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("/metrics = %d %s", r.status, r.header.Get("Content-Type"))
	}
	body := string(r.body)
	for _, want := range []string{
		`agentwork_http_requests_total{route="GET /healthz",code="200"} 2`,
		`agentwork_http_requests_total{route="GET /v1/jobs/{id}",code="200"} 1`,
		`agentwork_http_requests_total{route="/v1/",code="401"} 1`,
		`agentwork_http_requests_total{route="unmatched",code="404"} 1`,
		`agentwork_build_info{version="v1.2.3-test",goversion="go`,
		"agentwork_bus_ready 1\n",
		"# TYPE agentwork_http_requests_total counter\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	checkExposition(t, body)

	// From another machine /metrics needs the admin token.
	for _, tc := range []struct {
		token  string
		status int
	}{{"", 401}, {adminToken, 200}} {
		req := httptest.NewRequestWithContext(t.Context(), "GET", "/metrics", nil)
		req.RemoteAddr = "192.0.2.7:40000"
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		rec := httptest.NewRecorder()
		f.s.Handler().ServeHTTP(rec, req)
		if rec.Code != tc.status {
			t.Errorf("remote /metrics with token %q = %d, want %d", tc.token, rec.Code, tc.status)
		}
	}
}

var (
	sampleRE  = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?[0-9.e+]+$`)
	commentRE = regexp.MustCompile(`^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$`)
)

// checkExposition checks every line of the Prometheus text format.
func checkExposition(t *testing.T, body string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if !sampleRE.MatchString(line) && !commentRE.MatchString(line) {
			t.Errorf("not a valid exposition line: %q", line)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  api.Config
		want string
	}{
		{api.Config{}, ""},
		{api.Config{Listen: "127.0.0.1:8080"}, ""},
		{api.Config{Listen: "[::1]:8080"}, ""},
		{api.Config{Listen: "localhost:9000"}, ""},
		{api.Config{Listen: "off"}, ""},
		{api.Config{Listen: "0.0.0.0:8080"}, "http.listen: \"0.0.0.0:8080\" is reachable from other machines"},
		{api.Config{Listen: ":8080"}, "allow_remote"},
		{api.Config{Listen: "example.com:80"}, "allow_remote"},
		{api.Config{Listen: "0.0.0.0:8080", AllowRemote: true}, ""},
		{api.Config{Listen: "8080"}, "want host:port"},
		{api.Config{AdminToken: "short"}, "http.admin_token"},
		{api.Config{ReadTimeout: -1}, "http.read_timeout"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v.Validate() = %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

func TestAdminTokenFile(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	if _, err := api.ReadAdminToken(dir); err == nil || !strings.Contains(err.Error(), "agentwork serve") {
		t.Fatalf("ReadAdminToken(no file) = %v, want an error saying to start the server", err)
	}
	tok, err := api.EnsureAdminToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 64 {
		t.Errorf("token %q: want 64 hex characters", tok)
	}
	st, err := os.Stat(api.AdminTokenPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("admin-token mode = %v, want 0600", st.Mode().Perm())
	}
	again, err := api.EnsureAdminToken(dir)
	if err != nil || again != tok {
		t.Errorf("second EnsureAdminToken = %q, %v; want the same token", again, err)
	}
	read, err := api.ReadAdminToken(dir)
	if err != nil || read != tok {
		t.Errorf("ReadAdminToken = %q, %v; want %q", read, err, tok)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("data dir has %d entries, want only admin-token (no temporary files left)", len(entries))
	}
}

// Run generates the admin token into the data dir, serves, counts run
// events for /metrics, and shuts down with an event stream open.
func TestRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *api.Config, _ *api.Deps) { c.AdminToken = ""; c.Listen = "127.0.0.1:0" })
	// Before Run: no admin token yet, admin routes refuse everything.
	if r := f.do(t, "GET", "/v1/runs", adminToken, ""); r.status != 401 {
		t.Fatalf("before Run /v1/runs = %d, want 401", r.status)
	}
	stop := runServer(t, f.s)
	tok, err := api.ReadAdminToken(f.b.Config().DataDir)
	if err != nil {
		t.Fatalf("Run did not store the admin token: %v", err)
	}
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	live := &fixture{b: f.b, s: f.s, url: "http://" + f.s.Addr().String(), c: client}
	if r := live.do(t, "GET", "/v1/runs", tok, ""); r.status != 200 {
		t.Fatalf("/v1/runs with the generated token = %d, want 200; %s", r.status, r.body)
	}

	emit(t, f.b, "task", bus.OutcomeDone, "a")
	emit(t, f.b, "task", bus.OutcomeDone, "b")
	emit(t, f.b, "heartbeat", bus.OutcomeSkip, "default")
	emit(t, f.b, bus.SourceDelivery, "delivered", "telegram")
	want := []string{
		`agentwork_runs_total{source="heartbeat",outcome="skip"} 1`,
		`agentwork_runs_total{source="task",outcome="done"} 2`,
		`agentwork_deliveries_total{outcome="delivered"} 1`,
	}
	deadline := time.Now().Add(waitFor)
	for {
		body := string(live.do(t, "GET", "/metrics", "", "").body)
		missing := ""
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing = w
			}
		}
		if missing == "" {
			checkExposition(t, body)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %q after %s:\n%s", missing, waitFor, body)
		}
		select { // the subscription counts asynchronously: poll
		case <-time.After(20 * time.Millisecond):
		case <-t.Context().Done():
			return
		}
	}

	// Shutdown with a stream open returns promptly, ending the stream.
	stream := live.openSSEWith(t, tok)
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown with an open stream took %s", d)
	}
	// Run returned, so Shutdown saw every handler end: the stream is closed.
	if rest, err := io.ReadAll(stream.r); err != nil || len(rest) != 0 {
		t.Errorf("event stream after shutdown: %q, %v; want a clean end", rest, err)
	}
}

func TestRunRefusesRemote(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *api.Config, _ *api.Deps) { c.Listen = "0.0.0.0:0" })
	if err := f.s.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "allow_remote") {
		t.Fatalf("Run on 0.0.0.0 = %v, want an error naming allow_remote", err)
	}
}

func TestNotFoundIsProblem(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	r := f.do(t, "GET", "/v1/runs?limit=0&sorce=x", adminToken, "")
	if r.status != 400 {
		t.Fatalf("status = %d, want 400", r.status)
	}
	d := r.problem(t)
	fields := map[string]bool{}
	for _, e := range d.Errors {
		fields[e.Field] = true
	}
	if !fields["limit"] || !fields["sorce"] || d.Type != problem.TypeValidation {
		t.Errorf("problem = %+v, want validation errors for limit and sorce", d)
	}
	var body map[string]any
	_ = json.Unmarshal(r.body, &body)
	if body["type"] == nil || body["title"] == nil || body["status"] == nil {
		t.Errorf("problem JSON %s lacks type/title/status", r.body)
	}
}

// TestRunPortInUse: a taken http.listen says so and names the setting.
func TestRunPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f := newFixture(t, func(c *api.Config, _ *api.Deps) { c.Listen = ln.Addr().String() })
	if err := f.s.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "http.listen: "+ln.Addr().String()+" is already in use") {
		t.Fatalf("Run on a taken port = %v, want an error naming http.listen", err)
	}
}
