package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/triggers/cron"
)

// withScheduler is a fixture whose jobs API is a running scheduler's.
func withScheduler(t *testing.T) (*fixture, *cron.Scheduler) {
	t.Helper()
	var s *cron.Scheduler
	f := newFixture(t, func(d *api.Deps) {
		var err error
		if s, err = cron.New(d.Bus, cron.Config{}); err != nil {
			t.Fatal(err)
		}
		d.Routes = []api.Router{s}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-s.Started():
	case err := <-done:
		t.Fatalf("the scheduler stopped: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the scheduler did not load in 10s")
	}
	return f, s
}

// checked is the answer of POST /jobs/check.
type checked struct {
	Errors map[string]string `json:"errors"`
	Other  string            `json:"other"`
	Title  string            `json:"title"`
	Next   []string          `json:"next"`
	Note   string            `json:"note"`
}

func (b *browser) check(path string, form url.Values) (page, checked) {
	b.t.Helper()
	form.Set("csrf", b.csrf)
	p := b.do("POST", path, form)
	var c checked
	if p.status == 200 {
		if ct := p.header.Get("Content-Type"); ct != "application/json" {
			b.t.Fatalf("POST %s: Content-Type %q, want application/json", path, ct)
		}
		if err := json.Unmarshal([]byte(p.body), &c); err != nil {
			b.t.Fatalf("POST %s: %v: %s", path, err, p.body)
		}
	}
	return p, c
}

// The job form's check as you type (POST /jobs/check): the API's own
// validation (a dry run of POST or PATCH /v1/jobs) with each error by its
// field, and the next five fire times in the job's zone; it saves
// nothing. It needs a session and the CSRF token; a read-only session may
// check (it changes nothing) but not save. Errors are data: JSON, escaped.
func TestJobCheck(t *testing.T) {
	t.Parallel()
	f, s := withScheduler(t)
	good := url.Values{"id": {"digest"}, "schedule": {"30 9 * * *"}, "timezone": {"Asia/Kolkata"}, "prompt": {"Sum up."}}

	anon := f.browser(t)
	if got := anon.do("POST", "/jobs/check", good); got.status != http.StatusSeeOther || !strings.HasPrefix(got.header.Get("Location"), "/login") {
		t.Errorf("a check without a session = %d to %q, want 303 to the login page", got.status, got.header.Get("Location"))
	}
	viewer := f.browser(t).login(viewerToken)
	if got := viewer.do("POST", "/jobs/check", good); got.status != http.StatusForbidden {
		t.Errorf("a check without the CSRF token = %d, want 403", got.status)
	}

	// Read-only: it may check.
	p, c := viewer.check("/jobs/check", good)
	if p.status != 200 || len(c.Errors) != 0 || c.Other != "" || c.Title != "Next five fire times in Asia/Kolkata" || len(c.Next) != 5 {
		t.Fatalf("a good job's check = %d %+v", p.status, c)
	}
	for _, n := range c.Next {
		if !regexp.MustCompile(`^[A-Z][a-z]{2} \d{4}-\d\d-\d\d 09:30 IST$`).MatchString(n) {
			t.Errorf("fire time %q, want 09:30 IST", n)
		}
	}

	// A bad schedule: its error by its field, the API's own words; a
	// missing prompt by its.
	op := f.browser(t).login(adminToken)
	const evil = `<script>alert(1)</script>`
	p, c = op.check("/jobs/check", url.Values{"id": {"digest"}, "schedule": {"0 9 * * " + evil}, "timezone": {"Mars/Olympus"}})
	if p.status != 200 || !strings.HasPrefix(c.Errors["schedule"], "schedule: ") || !strings.Contains(c.Errors["schedule"], evil) ||
		!strings.HasPrefix(c.Errors["timezone"], "timezone: ") || !strings.HasPrefix(c.Errors["prompt"], "prompt: ") || len(c.Next) != 0 {
		t.Errorf("a bad job's check = %d %+v", p.status, c)
	}
	if strings.Contains(p.body, "<script>") {
		t.Errorf("the check's answer holds %s unescaped: %s", evil, p.body)
	}
	if list, _, _ := s.List(t.Context(), cron.ListQuery{}); len(list) != 0 {
		t.Fatalf("a check added a job: %+v", list)
	}

	// A taken id is the id's error; an edit's check is a dry run of its
	// PATCH: nothing changes.
	if _, err := s.Add(t.Context(), cron.Job{ID: "digest", Schedule: "@daily", Prompt: "theirs"}); err != nil {
		t.Fatal(err)
	}
	if _, c = op.check("/jobs/check", good); !strings.Contains(c.Errors["id"], `"digest" exists`) {
		t.Errorf("a taken id's check = %+v", c)
	}
	if _, c = op.check("/jobs/check?edit=digest", url.Values{"schedule": {"nope"}, "prompt": {"mine"}}); !strings.HasPrefix(c.Errors["schedule"], "schedule: ") {
		t.Errorf("an edit's bad schedule's check = %+v", c)
	}
	if _, c = op.check("/jobs/check?edit=digest", url.Values{"schedule": {"0 12 * * *"}, "prompt": {"mine"}}); len(c.Errors) != 0 || len(c.Next) != 5 || c.Title != "Next five fire times (UTC)" {
		t.Errorf("an edit's good check = %+v", c)
	}
	if st, _ := s.Get(t.Context(), "digest"); st.Job.Prompt != "theirs" || st.Job.Schedule != "@daily" {
		t.Errorf("a check changed the job: %+v", st.Job)
	}
	// A read-only session still cannot save.
	if got := viewer.do("POST", "/jobs/digest/edit", url.Values{"csrf": {viewer.csrf}, "schedule": {"@daily"}, "prompt": {"x"}}); got.status != http.StatusForbidden {
		t.Errorf("a read-only save = %d, want 403", got.status)
	}
}

var jobRevisionField = regexp.MustCompile(`name="revision" value="(\d+)"`)

// An edit is saved at the revision its form was opened at: when the job
// changed meanwhile (the CLI, the API, another tab), nothing is
// overwritten; the form comes back with what was typed kept, the job as
// it is now shown beside it, at its new revision, so saving again
// replaces it.
func TestJobEditConflict(t *testing.T) {
	t.Parallel()
	f, s := withScheduler(t)
	if _, err := s.Add(t.Context(), cron.Job{ID: "digest", Schedule: "0 9 * * *", Prompt: "first"}); err != nil {
		t.Fatal(err)
	}
	op := f.browser(t).login(adminToken)
	m := jobRevisionField.FindStringSubmatch(op.do("GET", "/jobs/digest/edit", nil).body)
	if m == nil {
		t.Fatal("the edit form carries no revision")
	}
	opened := m[1]
	if _, err := s.Update(t.Context(), "digest", json.RawMessage(`{"prompt":"theirs <b>bold</b>","schedule":"0 7 * * *"}`)); err != nil {
		t.Fatal(err)
	}
	mine := url.Values{"csrf": {op.csrf}, "revision": {opened}, "schedule": {"0 8 * * *"}, "prompt": {"mine <script>alert(1)</script>"}}
	p := op.do("POST", "/jobs/digest/edit", mine)
	if p.status != http.StatusConflict || !strings.Contains(p.body, "someone else changed this job since you opened it") {
		t.Fatalf("a save at a stale revision = %d:\n%s", p.status, p.body)
	}
	if !strings.Contains(p.body, `value="0 8 * * *"`) || !strings.Contains(p.body, ">mine &lt;script&gt;alert(1)&lt;/script&gt;</textarea>") {
		t.Errorf("what was typed is not kept in the form:\n%s", p.body)
	}
	if !regexp.MustCompile(`id="theirs"[\s\S]*0 7 \* \* \*[\s\S]*theirs &lt;b&gt;bold&lt;/b&gt;`).MatchString(p.body) {
		t.Errorf("the job as it is now is not shown:\n%s", p.body)
	}
	if st, _ := s.Get(t.Context(), "digest"); st.Job.Prompt != "theirs <b>bold</b>" || st.Job.Schedule != "0 7 * * *" {
		t.Fatalf("the stale save overwrote the job: %+v", st.Job)
	}
	m = jobRevisionField.FindStringSubmatch(p.body)
	if m == nil || m[1] == opened {
		t.Fatalf("the conflict's form is not at the new revision (%v, opened at %s)", m, opened)
	}
	if n, _ := strconv.Atoi(m[1]); n <= 0 {
		t.Fatalf("revision %q", m[1])
	}
	// Saved again at the new revision: mine replaces theirs.
	mine.Set("revision", m[1])
	if p := op.do("POST", "/jobs/digest/edit", mine); p.status != http.StatusSeeOther {
		t.Fatalf("the save after the conflict = %d:\n%s", p.status, p.body)
	}
	if st, _ := s.Get(t.Context(), "digest"); st.Job.Prompt != "mine <script>alert(1)</script>" || st.Job.Schedule != "0 8 * * *" {
		t.Errorf("after saving again the job is %+v", st.Job)
	}
}
