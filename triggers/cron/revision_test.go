package cron

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/bus/bustest"
)

// answer is one HTTP answer of the jobs API.
type answer struct {
	status int
	header http.Header
	body   string
}

// jobsAPI serves the jobs API of a running scheduler on b and returns a
// function making one request of it (headers in pairs).
func jobsAPI(t *testing.T) (*Scheduler, func(method, path, body string, header ...string) answer) {
	t.Helper()
	b := bustest.New(t)
	s, _ := startScheduler(t, b, Config{}, make(chan TickResult, 100))
	mux := http.NewServeMux()
	s.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return s, func(method, path, body string, header ...string) answer {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header, string(raw)}
	}
}

// GET /v1/jobs/{id} answers the revision of the job's record as its ETag;
// PATCH and DELETE with If-Match change the job only while it is at that
// revision: a stale one is refused with 412 problem details naming the
// revision it is at now, and nothing changes. Without If-Match (the CLI,
// older clients) they change it as before.
func TestJobRevisions(t *testing.T) {
	t.Parallel()
	s, do := jobsAPI(t)
	created := do("POST", "/v1/jobs", `{"id":"daily","schedule":"@daily","prompt":"v1"}`)
	if created.status != 201 || created.header.Get("ETag") == "" {
		t.Fatalf("POST /v1/jobs = %d, ETag %q: %s", created.status, created.header.Get("ETag"), created.body)
	}
	got := do("GET", "/v1/jobs/daily", "")
	opened := got.header.Get("ETag")
	if got.status != 200 || opened != created.header.Get("ETag") {
		t.Fatalf("GET /v1/jobs/daily = %d, ETag %q, want %q", got.status, opened, created.header.Get("ETag"))
	}
	if _, err := strconv.ParseUint(strings.Trim(opened, `"`), 10, 64); err != nil || !strings.HasPrefix(opened, `"`) {
		t.Fatalf("ETag %q is not a quoted revision", opened)
	}

	// At the revision opened: saved, with the new revision.
	saved := do("PATCH", "/v1/jobs/daily", `{"prompt":"v2"}`, "If-Match", opened)
	if saved.status != 200 || !strings.Contains(saved.body, `"prompt": "v2"`) || saved.header.Get("ETag") == "" || saved.header.Get("ETag") == opened {
		t.Fatalf("PATCH at the current revision = %d, ETag %q (was %q): %s", saved.status, saved.header.Get("ETag"), opened, saved.body)
	}
	now := saved.header.Get("ETag")
	if got := do("GET", "/v1/jobs/daily", "").header.Get("ETag"); got != now {
		t.Errorf("GET after the PATCH: ETag %q, want the PATCH's %q", got, now)
	}

	// At a stale revision: 412, naming the revision it is at, nothing changed.
	stale := do("PATCH", "/v1/jobs/daily", `{"prompt":"overwritten"}`, "If-Match", opened)
	if stale.status != http.StatusPreconditionFailed || stale.header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(stale.body, `"code":"conflict"`) || !strings.Contains(stale.body, "revision "+strings.Trim(now, `"`)+" now") || !strings.Contains(stale.body, "reload") {
		t.Errorf("PATCH at a stale revision = %d %s: %s", stale.status, stale.header.Get("Content-Type"), stale.body)
	}
	if st, err := s.Get(t.Context(), "daily"); err != nil || st.Job.Prompt != "v2" {
		t.Errorf("after the stale PATCH the prompt is %q (%v), want v2", st.Job.Prompt, err)
	}
	if got := do("DELETE", "/v1/jobs/daily", "", "If-Match", opened); got.status != http.StatusPreconditionFailed {
		t.Errorf("DELETE at a stale revision = %d: %s", got.status, got.body)
	}
	if _, err := s.Get(t.Context(), "daily"); err != nil {
		t.Errorf("the stale DELETE removed the job: %v", err)
	}

	// Weak and bare forms, *, and none: as for memory documents.
	if got := do("PATCH", "/v1/jobs/daily", `{"prompt":"v3"}`, "If-Match", "W/"+now); got.status != 200 {
		t.Errorf("PATCH with If-Match W/%s = %d: %s", now, got.status, got.body)
	} else {
		now = got.header.Get("ETag")
	}
	if got := do("PATCH", "/v1/jobs/daily", `{"prompt":"v4"}`, "If-Match", strings.Trim(now, `"`)); got.status != 200 {
		t.Errorf("PATCH with a bare If-Match %s = %d: %s", now, got.status, got.body)
	}
	if got := do("PATCH", "/v1/jobs/daily", `{"prompt":"v5"}`, "If-Match", "*"); got.status != 200 {
		t.Errorf("PATCH with If-Match * = %d: %s", got.status, got.body)
	}
	if got := do("PATCH", "/v1/jobs/daily", `{"prompt":"v6"}`); got.status != 200 {
		t.Errorf("PATCH without If-Match = %d: %s", got.status, got.body)
	}
	if got := do("PATCH", "/v1/jobs/daily", `{"prompt":"v7"}`, "If-Match", `"seven"`); got.status != 400 || !strings.Contains(got.body, "If-Match") {
		t.Errorf("PATCH with If-Match \"seven\" = %d: %s", got.status, got.body)
	}
	cur := do("GET", "/v1/jobs/daily", "").header.Get("ETag")
	if got := do("DELETE", "/v1/jobs/daily", "", "If-Match", cur); got.status != 204 {
		t.Errorf("DELETE at the current revision = %d: %s", got.status, got.body)
	}
}

// ?dry_run=true checks a new job or a change as the write would, and
// writes nothing: the console's form checks what is typed with it.
func TestJobDryRun(t *testing.T) {
	t.Parallel()
	s, do := jobsAPI(t)
	if got := do("POST", "/v1/jobs?dry_run=true", `{"id":"daily","schedule":"0 9 * * *","timezone":"Asia/Tokyo","prompt":"v1"}`); got.status != 200 || !strings.Contains(got.body, `"status": "active"`) {
		t.Errorf("a good dry run = %d: %s", got.status, got.body)
	}
	if _, err := s.Get(t.Context(), "daily"); !isErr(err, ErrNotFound) {
		t.Fatalf("a dry run added the job: %v", err)
	}
	bad := do("POST", "/v1/jobs?dry_run=true", `{"id":"daily","schedule":"61 * * * *","prompt":"x"}`)
	real := do("POST", "/v1/jobs", `{"id":"daily","schedule":"61 * * * *","prompt":"x"}`)
	if bad.status != 400 || bad.body != real.body {
		t.Errorf("a bad dry run = %d %s; the write says %d %s", bad.status, bad.body, real.status, real.body)
	}
	if got := do("POST", "/v1/jobs?dry_run=maybe", `{"id":"daily","schedule":"@daily","prompt":"x"}`); got.status != 400 || !strings.Contains(got.body, "dry_run") {
		t.Errorf("dry_run=maybe = %d: %s", got.status, got.body)
	}
	opened := do("POST", "/v1/jobs", `{"id":"daily","schedule":"@daily","prompt":"v1"}`).header.Get("ETag")
	if got := do("POST", "/v1/jobs?dry_run=1", `{"id":"daily","schedule":"@daily","prompt":"again"}`); got.status != 409 {
		t.Errorf("a dry run of a taken id = %d: %s", got.status, got.body)
	}
	if got := do("PATCH", "/v1/jobs/daily?dry_run=true", `{"prompt":"v2"}`, "If-Match", opened); got.status != 200 || !strings.Contains(got.body, `"prompt": "v2"`) {
		t.Errorf("a PATCH dry run = %d: %s", got.status, got.body)
	}
	if got := do("PATCH", "/v1/jobs/daily?dry_run=true", `{"schedule":"nope"}`); got.status != 400 || !strings.Contains(got.body, "schedule") {
		t.Errorf("a bad PATCH dry run = %d: %s", got.status, got.body)
	}
	if got := do("GET", "/v1/jobs/daily", ""); got.header.Get("ETag") != opened || !strings.Contains(got.body, `"prompt": "v1"`) {
		t.Errorf("after the dry runs the job is at %s: %s", got.header.Get("ETag"), got.body)
	}
}
