package cron

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus/bustest"
)

func TestServiceClient(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	results := make(chan TickResult, 100)
	yearly := Job{ID: "from-config", Schedule: "0 0 1 1 *", Prompt: "happy new year"}
	startScheduler(t, b, Config{Jobs: []Job{yearly}}, results)
	c := NewClient(bustest.Client(t, b))
	ctx := t.Context()

	st, err := c.Add(ctx, Job{ID: "weekly", Schedule: "0 9 * * mon", Timezone: "Europe/Berlin", Prompt: "analyse"})
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	sched, _ := ParseSchedule("0 9 * * mon", berlin)
	if want := sched.Next(time.Now()); st.Status != StatusActive || st.Next == nil || !st.Next.Equal(want) || st.Job.Origin != OriginAPI {
		t.Fatalf("Add = %+v, want active, next %v", st, want)
	}
	if due := pendingDue(t, b, timerKey("weekly")); !due.IsZero() && !due.Add(fireLead).Equal(*st.Next) {
		t.Fatalf("timer due %v, want %v", due, st.Next)
	}
	if _, err := c.Add(ctx, Job{ID: "weekly", Schedule: "@daily", Prompt: "x"}); !isErr(err, ErrExists) {
		t.Fatalf("Add(duplicate) = %v, want ErrExists", err)
	}
	if _, err := c.Add(ctx, Job{ID: "bad", Schedule: "61 * * * *", Prompt: "x"}); !isErr(err, ErrInvalid) || !strings.Contains(err.Error(), "schedule:") {
		t.Fatalf("Add(invalid) = %v, want ErrInvalid naming schedule", err)
	}
	past := time.Now().Add(-time.Hour)
	if _, err := c.Add(ctx, Job{ID: "late", At: &past, Prompt: "x"}); !isErr(err, ErrInvalid) {
		t.Fatalf("Add(at in the past) = %v, want ErrInvalid", err)
	}
	if _, err := c.Get(ctx, "nope"); !isErr(err, ErrNotFound) {
		t.Fatalf("Get(missing) = %v, want ErrNotFound", err)
	}
	st, err = c.Update(ctx, "weekly", json.RawMessage(`{"prompt":"analyse sales","catchup":{"policy":"run_all","max":3},"timezone":null}`))
	if err != nil || st.Job.Prompt != "analyse sales" || st.Job.Catchup != (Catchup{CatchupRunAll, 3}) || st.Job.Timezone != "" {
		t.Fatalf("Update = %+v, %v", st.Job, err)
	}
	if _, err := c.Update(ctx, "weekly", json.RawMessage(`{"id":"other"}`)); !isErr(err, ErrInvalid) {
		t.Fatalf("Update(id) = %v, want ErrInvalid", err)
	}
	if _, err := c.Update(ctx, "weekly", json.RawMessage(`{"schedul":"@daily"}`)); !isErr(err, ErrInvalid) {
		t.Fatalf("Update(unknown field) = %v, want ErrInvalid", err)
	}
	if _, err := c.Update(ctx, "from-config", json.RawMessage(`{"prompt":"x"}`)); !isErr(err, ErrConfigJob) {
		t.Fatalf("Update(config job) = %v, want ErrConfigJob", err)
	}
	if err := c.Delete(ctx, "from-config"); !isErr(err, ErrConfigJob) {
		t.Fatalf("Delete(config job) = %v, want ErrConfigJob", err)
	}
	if st, err := c.Pause(ctx, "from-config", "quiet week"); err != nil || st.Status != StatusPaused {
		t.Fatalf("Pause(config job) = %+v, %v", st, err)
	}
	if st, err := c.Resume(ctx, "from-config"); err != nil || st.Status != StatusActive {
		t.Fatalf("Resume = %+v, %v", st, err)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 2 || list[0].Job.ID != "from-config" || list[1].Job.ID != "weekly" {
		t.Fatalf("List = %+v, %v", list, err)
	}

	rr, err := c.Run(ctx, "weekly")
	if err != nil || rr.RequestID == "" {
		t.Fatalf("Run = %+v, %v", rr, err)
	}
	reqs := requests(t, b)
	if len(reqs) != 1 || reqs[0].Req.ID != rr.RequestID || !reqs[0].Req.Manual || reqs[0].Req.Name != "weekly" {
		t.Fatalf("requests after Run = %+v", reqs)
	}
	// Run now does not move the schedule.
	if st, _ := c.Get(ctx, "weekly"); st.Next == nil || st.State.Fires != 0 {
		t.Fatalf("after Run: %+v", st)
	}
	if h, err := c.History(ctx, "weekly", 0); err != nil || len(h) != 0 {
		t.Fatalf("History = %+v, %v", h, err)
	}
	if err := c.Delete(ctx, "weekly"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := c.Get(ctx, "weekly"); !isErr(err, ErrNotFound) {
		t.Fatalf("Get after Delete = %v", err)
	}
}

func TestClientWithoutServer(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	_, err := NewClient(b).List(t.Context())
	if err == nil || !strings.Contains(err.Error(), "agentwork serve") {
		t.Fatalf("List without a server = %v, want a hint to start it", err)
	}
}

func TestHTTPRoutes(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	results := make(chan TickResult, 100)
	s, _ := startScheduler(t, b, Config{}, results)
	mux := http.NewServeMux()
	s.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	do := func(method, path, ctype, body string) (int, string, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(out)
	}
	const js = "application/json"
	tests := []struct {
		method, path, ctype, body string
		status                    int
		contains                  string
	}{
		{"GET", "/v1/jobs", "", "", 200, "[]"},
		{"POST", "/v1/jobs", js, `{"id":"daily","schedule":"@daily","prompt":"sum up"}`, 201, `"status": "active"`},
		{"POST", "/v1/jobs", js, `{"id":"daily","schedule":"@daily","prompt":"sum up"}`, 409, `"code":"exists"`},
		{"POST", "/v1/jobs", js, `{"id":"bad","schedule":"61 * * * *","prompt":"x"}`, 400, `schedule: \"61 * * * *\"`},
		{"POST", "/v1/jobs", js, `{"id":"x","schedule":"@daily","prompt":"x","colour":"red"}`, 400, `unknown field`},
		{"POST", "/v1/jobs", "text/plain", `id: x`, 415, `application/json`},
		{"GET", "/v1/jobs/daily", "", "", 200, `"id": "daily"`},
		{"GET", "/v1/jobs/nope", "", "", 404, `"status":404`},
		{"PATCH", "/v1/jobs/daily", "application/merge-patch+json", `{"prompt":"sum up the day"}`, 200, `"prompt": "sum up the day"`},
		{"POST", "/v1/jobs/daily/pause", js, `{"reason":"travel"}`, 200, `"paused_reason": "travel"`},
		{"POST", "/v1/jobs/daily/resume", "", "", 200, `"status": "active"`},
		{"POST", "/v1/jobs/daily/run", "", "", 202, `"request_id"`},
		{"GET", "/v1/jobs/daily/history?limit=5", "", "", 200, `[]`},
		{"GET", "/v1/jobs/daily/history?limit=0", "", "", 400, `limit`},
		{"DELETE", "/v1/jobs/daily", "", "", 204, ``},
		{"DELETE", "/v1/jobs/daily", "", "", 404, `not found`},
	}
	for _, tt := range tests {
		status, ctype, body := do(tt.method, tt.path, tt.ctype, tt.body)
		if status != tt.status || !strings.Contains(body, tt.contains) {
			t.Errorf("%s %s = %d %s, want %d containing %s", tt.method, tt.path, status, body, tt.status, tt.contains)
		}
		if status >= 400 && ctype != "application/problem+json" {
			t.Errorf("%s %s: Content-Type %q, want application/problem+json", tt.method, tt.path, ctype)
		}
	}
}

// Ready answers not ready until the scheduler has loaded its jobs.
func TestReady(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, err := New(b, Config{Jobs: []Job{secondJob("a")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(t.Context()); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Ready before Run = %v, want ErrNotReady", err)
	}
	t.Cleanup(runUntil(t, s.Run))
	select {
	case <-s.Started():
	case <-time.After(waitFor):
		t.Fatal("scheduler not started")
	}
	if err := s.Ready(t.Context()); err != nil {
		t.Fatalf("Ready once started = %v, want nil", err)
	}
}

// TestListPages: GET /v1/jobs answers a page at a time with a Link to the
// next one (100,000 jobs were 50 MB in one answer), and the client (the
// CLI's) walks every page.
func TestListPages(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	var jobs []Job
	for i := range 5 {
		jobs = append(jobs, Job{ID: fmt.Sprintf("job-%d", i), Schedule: "0 0 1 1 *", Prompt: "x"})
	}
	s, _ := startScheduler(t, b, Config{Jobs: jobs}, make(chan TickResult, 100))
	mux := http.NewServeMux()
	s.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	var ids []string
	next := "/v1/jobs?limit=2"
	for pages := 0; next != ""; pages++ {
		if pages == 5 {
			t.Fatalf("more pages than jobs; got %v", ids)
		}
		resp, err := http.Get(srv.URL + next)
		if err != nil {
			t.Fatal(err)
		}
		var page []Status
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || len(page) > 2 {
			t.Fatalf("GET %s = %d, %d jobs, %v; want a page of at most 2", next, resp.StatusCode, len(page), err)
		}
		for _, st := range page {
			ids = append(ids, st.Job.ID)
		}
		next = ""
		if link := resp.Header.Get("Link"); link != "" {
			next = strings.TrimSuffix(strings.TrimPrefix(link, "<"), `>; rel="next"`)
		}
	}
	if want := []string{"job-0", "job-1", "job-2", "job-3", "job-4"}; !slices.Equal(ids, want) {
		t.Errorf("pages gave %v, want %v", ids, want)
	}
	if resp, err := http.Get(srv.URL + "/v1/jobs?limit=5000"); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("GET /v1/jobs?limit=5000 = %v %v, want 400", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	all, err := NewClient(bustest.Client(t, b)).List(t.Context())
	if err != nil || len(all) != 5 {
		t.Errorf("Client.List = %d jobs, %v; want all 5", len(all), err)
	}
}

// A job's runs use the job's tools as the job is now: set in config or
// through the API, changed through the API; none: runner.tools.
func TestPolicyToolsOfTheJob(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, _ := startScheduler(t, b, Config{Jobs: []Job{{ID: "sales", Schedule: "0 9 * * *", Prompt: "analyse", Tools: []string{"sales__*"}}}}, make(chan TickResult, 100))
	settingsFor := s.Policy().SettingsFor
	toolsFor := func(ctx context.Context, source, name string) ([]string, error) {
		set, err := settingsFor(ctx, source, name)
		return set.Tools, err
	}
	ctx := t.Context()
	if got, err := toolsFor(ctx, "cron", "sales"); err != nil || !slices.Equal(got, []string{"sales__*"}) {
		t.Fatalf("the tools of (sales) = %v, %v; want [sales__*]", got, err)
	}
	if _, err := s.Add(ctx, Job{ID: "adhoc", Schedule: "0 9 * * *", Prompt: "look"}); err != nil {
		t.Fatal(err)
	}
	if got, err := toolsFor(ctx, "cron", "adhoc"); err != nil || got != nil {
		t.Errorf("the tools of (adhoc) = %v, %v; want none (runner.tools)", got, err)
	}
	if _, err := s.Update(ctx, "adhoc", json.RawMessage(`{"tools":["sales__read_*","notify_user"]}`)); err != nil {
		t.Fatal(err)
	}
	if got, _ := toolsFor(ctx, "cron", "adhoc"); !slices.Equal(got, []string{"sales__read_*", "notify_user"}) {
		t.Errorf("the tools of (adhoc) after the update = %v, want the new tools", got)
	}
	if _, err := s.Update(ctx, "adhoc", json.RawMessage(`{"tools":["bad glob"]}`)); !isErr(err, ErrInvalid) || !strings.Contains(err.Error(), "tools[0]") {
		t.Errorf("Update(bad glob) = %v, want ErrInvalid naming tools[0]", err)
	}
	if got, err := toolsFor(ctx, "cron", "gone"); !isErr(err, ErrNotFound) || got != nil {
		t.Errorf("the tools of (no such job) = %v, %v; want not found, never runner.tools (the run is tried again, and the job gate skips it)", got, err)
	}
}

// A job's model, fallback, max_steps and timeout are its runs' settings;
// the API refuses a model the runtime does not have, naming the field and
// the models there are.
func TestPolicyModelOfTheJob(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	job := Job{ID: "report", Schedule: "0 9 * * *", Prompt: "sum up", Model: "strong", Fallback: []string{"default"}, MaxSteps: 3, Timeout: Duration(time.Minute)}
	s, _ := startScheduler(t, b, Config{Jobs: []Job{job}}, make(chan TickResult, 100), WithModels("cheap", "default", "strong"))
	ctx := t.Context()
	set, err := s.Policy().SettingsFor(ctx, "cron", "report")
	if err != nil || set.Model != "strong" || !slices.Equal(set.Fallback, []string{"default"}) || set.MaxSteps != 3 || set.Timeout != time.Minute {
		t.Fatalf("the settings of (report) = %+v, %v; want its model, fallback, max_steps and timeout", set, err)
	}
	c := NewClient(bustest.Client(t, b))
	_, err = c.Add(ctx, Job{ID: "adhoc", Schedule: "@daily", Prompt: "x", Model: "strnog"})
	if !isErr(err, ErrInvalid) || !strings.Contains(err.Error(), `model: "strnog": no such model (models: cheap, default, strong)`) {
		t.Fatalf("Add(unknown model) = %v, want ErrInvalid naming the field and the models", err)
	}
	if _, err := c.Add(ctx, Job{ID: "adhoc", Schedule: "@daily", Prompt: "x", Model: "cheap"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Update(ctx, "adhoc", json.RawMessage(`{"fallback":["strong","gone"],"max_steps":-1}`))
	if !isErr(err, ErrInvalid) || !strings.Contains(err.Error(), `fallback[1]: "gone": no such model`) || !strings.Contains(err.Error(), "max_steps: -1") {
		t.Fatalf("Update(unknown fallback, negative max_steps) = %v, want ErrInvalid naming both", err)
	}
	if st, err := c.Update(ctx, "adhoc", json.RawMessage(`{"fallback":["strong"]}`)); err != nil || !slices.Equal(st.Job.Fallback, []string{"strong"}) {
		t.Fatalf("Update(fallback) = %+v, %v", st.Job, err)
	}
}
