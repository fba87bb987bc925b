package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/triggers/cron"
)

// A cron job is created and edited through POST and PATCH /v1/jobs of
// the real scheduler: the API's validation errors show next to their
// fields with what was typed kept, the form shows the next five fire
// times in the job's zone, and what is typed is escaped.
func TestJobForm(t *testing.T) {
	t.Parallel()
	f, s := withScheduler(t)
	// The admin's session: a credential's console session cannot set a
	// job's tools, nor edit jobs it did not create (checked at the end).
	op := f.browser(t).login(adminToken)
	if got := op.do("GET", "/jobs", nil); !strings.Contains(got.body, `<a href="/jobs/new">add one here</a>`) {
		t.Errorf("the empty jobs page does not offer to add one:\n%s", got.body)
	}
	if got := op.do("GET", "/jobs/new", nil); got.status != 200 || !strings.Contains(got.body, `name="schedule"`) {
		t.Fatalf("GET /jobs/new = %d:\n%s", got.status, got.body)
	}

	// Bad input: each error next to its field, what was typed kept.
	const evil = `<script>alert(1)</script>`
	bad := op.do("POST", "/jobs/new", url.Values{"csrf": {op.csrf}, "id": {"Bad Id"}, "schedule": {"61 * * * *"},
		"timezone": {"Mars/Olympus"}, "prompt": {""}, "targets": {"no good" + evil}})
	if bad.status != http.StatusBadRequest {
		t.Fatalf("POST /jobs/new with bad input = %d, want 400:\n%s", bad.status, bad.body)
	}
	for _, field := range []string{"id", "schedule", "timezone", "prompt", "targets"} {
		if !regexp.MustCompile(`<span class="error-text" id="e-` + field + `">` + field + `[^<]*</span>`).MatchString(bad.body) {
			t.Errorf("no error next to %s:\n%s", field, bad.body)
		}
	}
	if strings.Contains(bad.body, evil) || !strings.Contains(bad.body, `value="Mars/Olympus"`) || !strings.Contains(bad.body, "&lt;script&gt;") {
		t.Errorf("what was typed is not kept, or not escaped:\n%s", bad.body)
	}
	if list, _, _ := s.List(t.Context(), cron.ListQuery{}); len(list) != 0 {
		t.Errorf("a refused form added a job: %v", list)
	}

	// Show fire times: the next five in the job's zone, nothing saved.
	prev := op.do("POST", "/jobs/new", url.Values{"csrf": {op.csrf}, "preview": {"1"}, "id": {"digest"}, "schedule": {"30 9 * * *"}, "timezone": {"Asia/Kolkata"}})
	if n := len(regexp.MustCompile(`<li>[A-Z][a-z]{2} \d{4}-\d\d-\d\d 09:30 IST</li>`).FindAllString(prev.body, -1)); n != 5 {
		t.Errorf("the preview shows %d fire times at 09:30 IST, want 5:\n%s", n, prev.body)
	}

	// A good job is added, recorded as the console's.
	ok := op.do("POST", "/jobs/new", url.Values{"csrf": {op.csrf}, "id": {"digest"}, "schedule": {"30 9 * * *"}, "timezone": {"Asia/Kolkata"},
		"prompt": {"Summarise " + evil}, "targets": {"ops, ops:42"}, "tools": {"memory_*"}})
	if ok.status != http.StatusSeeOther || ok.header.Get("Location") != "/jobs#job-digest" {
		t.Fatalf("POST /jobs/new = %d %s:\n%s", ok.status, ok.header.Get("Location"), ok.body)
	}
	st, err := s.Get(t.Context(), "digest")
	if err != nil || st.Job.Prompt != "Summarise "+evil || st.Job.Timezone != "Asia/Kolkata" || strings.Join(st.Job.Targets, ",") != "ops,ops:42" || strings.Join(st.Job.Tools, ",") != "memory_*" {
		t.Fatalf("the job added = %+v, %v", st.Job, err)
	}
	jobs := op.do("GET", "/jobs", nil)
	if !strings.Contains(jobs.body, "Job digest added.") || !strings.Contains(jobs.body, `href="/jobs/digest/edit"`) {
		t.Errorf("the jobs page after adding:\n%s", jobs.body)
	}

	// Edit: the form holds the job; a bad schedule is refused next to its
	// field; a good change is a merge patch (an emptied field is removed).
	edit := op.do("GET", "/jobs/digest/edit", nil)
	if !strings.Contains(edit.body, `value="30 9 * * *"`) || !strings.Contains(edit.body, "Summarise &lt;script&gt;") || !strings.Contains(edit.body, `value="ops, ops:42"`) {
		t.Errorf("the edit form does not hold the job:\n%s", edit.body)
	}
	badEdit := op.do("POST", "/jobs/digest/edit", url.Values{"csrf": {op.csrf}, "schedule": {"nope"}, "prompt": {"p"}})
	if badEdit.status != http.StatusBadRequest || !strings.Contains(badEdit.body, `id="e-schedule">schedule: `) {
		t.Errorf("a bad edit = %d:\n%s", badEdit.status, badEdit.body)
	}
	good := op.do("POST", "/jobs/digest/edit", url.Values{"csrf": {op.csrf}, "schedule": {"0 8 * * mon"}, "timezone": {"Europe/Berlin"}, "prompt": {"Weekly."}, "targets": {""}, "tools": {"clock"}})
	if good.status != http.StatusSeeOther {
		t.Fatalf("a good edit = %d:\n%s", good.status, good.body)
	}
	if st, _ = s.Get(t.Context(), "digest"); st.Job.Schedule != "0 8 * * mon" || st.Job.Timezone != "Europe/Berlin" || st.Job.Prompt != "Weekly." || st.Job.Targets != nil || strings.Join(st.Job.Tools, ",") != "clock" {
		t.Errorf("the job after the edit = %+v", st.Job)
	}

	// A read-only session sees the form and cannot save.
	viewer := f.browser(t).login(viewerToken)
	if got := viewer.do("GET", "/jobs/digest/edit", nil); got.status != 200 || strings.Contains(got.body, ">Save</button>") {
		t.Errorf("a read-only session's edit form = %d, offers Save", got.status)
	}
	if got := viewer.do("POST", "/jobs/digest/edit", url.Values{"csrf": {viewer.csrf}, "schedule": {"* * * * *"}, "prompt": {"x"}}); got.status != http.StatusForbidden {
		t.Errorf("a read-only session's edit = %d, want 403", got.status)
	}
	if got := viewer.do("POST", "/jobs/new", url.Values{"csrf": {viewer.csrf}, "id": {"x"}, "schedule": {"* * * * *"}, "prompt": {"x"}}); got.status != http.StatusForbidden {
		t.Errorf("a read-only session's new job = %d, want 403", got.status)
	}
	// A credential's write session: its job acts for it (origin console),
	// with the runner's tools only; it edits only its own jobs.
	oncall := f.browser(t).login(opToken)
	if got := oncall.do("POST", "/jobs/new", url.Values{"csrf": {oncall.csrf}, "id": {"own"}, "schedule": {"@daily"}, "prompt": {"x"}, "tools": {"clock"}}); got.status != http.StatusForbidden {
		t.Errorf("a credential's new job with tools = %d, want 403", got.status)
	}
	if got := oncall.do("POST", "/jobs/new", url.Values{"csrf": {oncall.csrf}, "id": {"own"}, "schedule": {"@daily"}, "prompt": {"x"}}); got.status != http.StatusSeeOther {
		t.Errorf("a credential's new job = %d:\n%s", got.status, got.body)
	}
	if st, err := s.Get(t.Context(), "own"); err != nil || st.Job.Origin != cron.OriginConsole || st.Job.Creator == nil || st.Job.Creator.Credential == "" {
		t.Errorf("a credential's job = %+v, %v; want origin console and its creator", st.Job, err)
	}
	if got := oncall.do("POST", "/jobs/digest/edit", url.Values{"csrf": {oncall.csrf}, "schedule": {"@daily"}, "prompt": {"mine now"}}); got.status != http.StatusForbidden {
		t.Errorf("a credential's edit of the admin's job = %d, want 403", got.status)
	}
	// It may see the fire times: that saves nothing.
	if got := viewer.do("POST", "/jobs/new", url.Values{"csrf": {viewer.csrf}, "preview": {"1"}, "schedule": {"0 12 * * *"}}); got.status != 200 || strings.Count(got.body, "12:00 UTC") != 5 {
		t.Errorf("a read-only session's preview = %d:\n%s", got.status, got.body)
	}
	if got := viewer.do("POST", "/jobs/new", url.Values{"preview": {"1"}, "schedule": {"0 12 * * *"}}); got.status != http.StatusForbidden {
		t.Errorf("a preview without the CSRF token = %d, want 403", got.status)
	}
}
