package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentwork/agentwork/approval"
)

// The console in a real browser (Debian's chromium, driven by chromedp)
// against the real binary with the script model: a wrong token is
// refused; the admin token logs in; a task sent with the CLI appears in
// the runs list without a reload; its page shows the notify_user text and
// its delivery; a job runs now, pauses and resumes; a POST without the
// CSRF token is refused; the overview fits a 375 px wide screen.
func TestConsoleInBrowser(t *testing.T) {
	b := startBrowser(t, `
bus:
  listen: 127.0.0.1:0
model:
  script:
    rules:
      - match: {source: task, prompt: "(?i)disk"}
        text: "Checked the disks."
        notify: "Disk /var is 93% full: clean up the old logs."
      - match: {source: cron}
        text: "Digest: all green."
cron:
  jobs:
    - id: digest
      name: Team digest
      schedule: "0 0 1 1 *"
      timezone: Europe/Berlin
      prompt: "Summarise the day."
workflows:
  ship:
    targets: [console]
    steps:
      - id: ask
        approval: {message: "Ship the release?"}
`)
	srv, base, admin, bctx := b.srv, b.base, b.admin, b.ctx
	do, text, eval, shot := b.do, b.text, b.eval, b.shot
	ctx := t.Context()

	// A wrong token is refused; the admin token logs in.
	do("a wrong token", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css("#token")), shot("login"),
		chromedp.SendKeys(css("#token"), "not-the-token-0123456789"), chromedp.Submit(css("#token")),
		chromedp.WaitVisible(css("p.error")))
	if msg := text("p.error"); !strings.Contains(msg, "not accepted") {
		t.Errorf("after a wrong token the login page says %q, want that it is not accepted", msg)
	}
	do("log in", chromedp.SendKeys(css("#token"), admin), chromedp.Submit(css("#token")),
		chromedp.WaitVisible(css(".counts")), shot("overview"))
	if h1 := text("h1"); h1 != "Overview" {
		t.Fatalf("after login the page is %q, want the overview", h1)
	}

	// A task sent with the CLI appears in the runs list without a reload.
	do("the runs list, live", chromedp.Navigate(base+"/runs"), chromedp.WaitVisible(css("#live")))
	var out, errOut strings.Builder
	if err := run(ctx, []string{"task", "send", "check the disk", "--name", "diskcheck", "--data-dir", srv.dataDir}, &out, &errOut); err != nil {
		t.Fatalf("task send: %v\n%s", err, errOut.String())
	}
	do("the new run's row", chromedp.WaitVisible(css("#runs tbody tr.new")), shot("runs"))
	if row := text("#runs tbody tr.new"); !strings.Contains(row, "diskcheck") || !strings.Contains(row, "Disk /var is 93% full") {
		t.Errorf("the new row reads %q, want the task diskcheck and its text", row)
	}

	// Its page: the notify_user text and where it was delivered.
	attr, err := chromedp.Run(bctx, chromedp.AttributeValue(css("#runs tbody tr.new a"), "href"))
	if err != nil {
		t.Fatal(err)
	}
	href := attr.Value
	// The delivery event follows the run's: the page is opened once the
	// API has it.
	runID := strings.TrimPrefix(href, "/runs/")
	waitFor(t, 20*time.Second, "the run's delivery", func() bool {
		return len(apiJSON[struct{ Deliveries []json.RawMessage }](t, http.MethodGet, base+"/v1/runs/"+runID, admin).Deliveries) > 0
	}, srv.child)
	do("the run's page", chromedp.Navigate(base+href), chromedp.WaitVisible(css("#deliveries")), shot("run"))
	if got := text("#notify-text"); got != "Disk /var is 93% full: clean up the old logs." {
		t.Errorf("notify_user text on the run's page = %q", got)
	}
	if got := text("#deliveries tbody"); !strings.Contains(got, "console") || !strings.Contains(got, "delivered") {
		t.Errorf("deliveries on the run's page = %q, want delivered to console", got)
	}

	// Run a job now, pause it, resume it.
	do("run the job now", chromedp.Navigate(base+"/jobs"), chromedp.WaitVisible(css("#job-digest")), shot("jobs"),
		chromedp.Click(css(`form[action="/jobs/digest/run"] button`)), chromedp.WaitVisible(css(".flash")))
	if flash := text(".flash"); flash != "Job digest started." {
		t.Errorf("after Run now the page says %q", flash)
	}
	do("the job's runs", chromedp.Navigate(base+"/runs?source=cron&name=digest"), chromedp.WaitVisible(css("#runs")))
	b.waitUntil(20*time.Second, "live row of the job's run", `document.querySelectorAll("#runs tbody tr").length > 0`)
	do("pause the job", chromedp.Navigate(base+"/jobs"), chromedp.Click(css(`form[action="/jobs/digest/pause"] button`)),
		chromedp.WaitVisible(css(`form[action="/jobs/digest/resume"] button`)), shot("jobs-paused"))
	if st := text("#job-digest .status"); st != "paused" || jobStatus(t, base, admin) != "paused" {
		t.Errorf("after Pause the job is %q (API: %s), want paused", st, jobStatus(t, base, admin))
	}
	do("resume the job", chromedp.Click(css(`form[action="/jobs/digest/resume"] button`)),
		chromedp.WaitVisible(css(`form[action="/jobs/digest/pause"] button`)))
	if st := text("#job-digest .status"); st != "active" || jobStatus(t, base, admin) != "active" {
		t.Errorf("after Resume the job is %q (API: %s), want active", st, jobStatus(t, base, admin))
	}

	// Create a job in the form: a bad schedule is refused next to its
	// field, what was typed kept; the fire times show in the job's zone;
	// fixed, the job is added.
	do("a new job with a bad schedule", chromedp.Navigate(base+"/jobs"), chromedp.Click(css(`a[href="/jobs/new"]`)), chromedp.WaitVisible(css("#f-id")),
		chromedp.SendKeys(css("#f-id"), "weekly"), chromedp.SendKeys(css("#f-schedule"), "0 25 * * *"), chromedp.SendKeys(css("#f-timezone"), "Asia/Tokyo"),
		chromedp.SendKeys(css("#f-prompt"), "Say hello."), chromedp.Click(css(`.job-form button:not([name])`)), chromedp.WaitVisible(css("#e-schedule")), shot("job-form-error"))
	if got := text("#e-schedule"); !strings.HasPrefix(got, "schedule: ") {
		t.Errorf("the schedule's error = %q", got)
	}
	do("fix the schedule", chromedp.Clear(css("#f-schedule")), chromedp.SendKeys(css("#f-schedule"), "0 9 * * mon"),
		chromedp.Click(css(`button[name="preview"]`)), chromedp.WaitVisible(css(".fires ol")), shot("job-form"))
	if got := text(".fires ol"); strings.Count(got, "09:00 JST") != 5 {
		t.Errorf("the fire times = %q, want five at 09:00 JST", got)
	}
	do("add the job", chromedp.Click(css(`.job-form button:not([name])`)), chromedp.WaitVisible(css("#job-weekly")))
	if flash := text(".flash"); flash != "Job weekly added." {
		t.Errorf("after adding a job the page says %q", flash)
	}

	// A POST with the session's cookie but without its CSRF token is
	// refused, and changes nothing.
	cookies := b.cookies()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/jobs/digest/pause", strings.NewReader(url.Values{"back": {"/jobs"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range cookies {
		req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(cookies) == 0 || resp.StatusCode != http.StatusForbidden || jobStatus(t, base, admin) != "active" {
		t.Errorf("POST with the session cookie (%d cookies) without the CSRF token = %d, job %s; want 403 and the job still active",
			len(cookies), resp.StatusCode, jobStatus(t, base, admin))
	}

	// 375 px wide: the pages scroll only down.
	for _, p := range []string{"/", "/runs", "/jobs", "/jobs/new", "/usage", "/tools", href} {
		name := "phone" + strings.ReplaceAll(strings.TrimSuffix(p, "/"), "/", "-")
		if p == href {
			name = "phone-run"
		}
		do("375 px "+p, chromedp.EmulateViewport(375, 812, chromedp.EmulateMobile), chromedp.Navigate(base+p), chromedp.WaitVisible(css("h1")), shot(name))
		if !eval(`document.documentElement.scrollWidth <= window.innerWidth`) {
			t.Errorf("%s at 375 px scrolls sideways: the page is wider than the window", p)
		}
	}

	// A workflow's approval step waits; on a 375 px viewport, with the
	// keyboard alone, it is approved with a comment, and the run goes on.
	wfRun := apiJSON[struct{ ID string }](t, http.MethodPost, base+"/v1/workflows/ship/runs", admin).ID
	var pending string
	waitFor(t, 20*time.Second, "the workflow's approval", func() bool {
		list := apiJSON[struct{ Approvals []approval.Approval }](t, http.MethodGet, base+"/v1/approvals?state=pending", admin)
		for _, a := range list.Approvals {
			if a.Run == wfRun {
				pending = a.ID
			}
		}
		return pending != ""
	}, srv.child)
	do("the approvals inbox at 375 px", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`nav a[href="/approvals"]`)),
		chromedp.Click(css(`nav a[href="/approvals"]`)), chromedp.WaitVisible(css("#approval-"+pending)), shot("phone-approvals"))
	if card := text("#approval-" + pending); !strings.Contains(card, "Ship the release?") || !strings.Contains(card, "ship") || !strings.Contains(card, "Deadline") {
		t.Errorf("the pending approval's card reads %q, want the question, the workflow and the deadline", card)
	}
	if !eval(`document.documentElement.scrollWidth <= window.innerWidth`) {
		t.Error("/approvals at 375 px scrolls sideways: the page is wider than the window")
	}
	do("approve with the keyboard", chromedp.Focus(css("#comment-"+pending)), chromedp.SendKeys(css("#comment-"+pending), "go ahead"),
		chromedp.KeyEvent("\t"), chromedp.KeyEvent("\r"), chromedp.WaitVisible(css(".flash")), shot("phone-approved"))
	if flash := text(".flash"); flash != "Approved: "+pending+"." {
		t.Errorf("after Approve the page says %q", flash)
	}
	a := apiJSON[approval.Approval](t, http.MethodGet, base+"/v1/approvals/"+pending, admin)
	if a.State != approval.Approved || a.Decision == nil || a.Decision.By != "admin" || a.Decision.Comment != "go ahead" {
		t.Errorf("after the console's Approve the approval is %s %+v, want approved by admin with the comment", a.State, a.Decision)
	}
	waitFor(t, 20*time.Second, "the workflow run to go on and end", func() bool {
		return apiJSON[struct{ Status string }](t, http.MethodGet, base+"/v1/workflow-runs/"+wfRun, admin).Status == "done"
	}, srv.child)

	// The workflow run's page: its step timeline says the approval step
	// is done and links to the approval.
	do("the workflow run", chromedp.Navigate(base+"/workflows"), chromedp.WaitVisible(css("#workflow-runs")), shot("phone-workflows"),
		chromedp.Click(css(`#workflow-runs a[href="/workflow-runs/`+wfRun+`"]`)), chromedp.WaitVisible(css("#step-ask")), shot("phone-workflow-run"))
	if step := text("#step-ask"); !strings.Contains(step, "done") || !strings.Contains(step, "Its approval") {
		t.Errorf("the step ask reads %q, want done with a link to its approval", step)
	}
	if st := text("#run-status"); st != "done" {
		t.Errorf("the workflow run's page says %q, want done", st)
	}
	if !eval(`document.documentElement.scrollWidth <= window.innerWidth`) {
		t.Error("a workflow run's page at 375 px scrolls sideways")
	}

	// Memory: edit while someone else saved; the conflict is shown, both
	// texts are there, and nothing is lost.
	putMemory := func(text string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, base+"/v1/memory/long", strings.NewReader(text))
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT /v1/memory/long = %d", resp.StatusCode)
		}
	}
	putMemory("# Notes\n- the first line\n")
	do("edit memory", chromedp.EmulateViewport(1280, 900), chromedp.Navigate(base+"/memory"), chromedp.WaitVisible(css(`#memory-docs a[href="/memory/long"]`)), shot("memory"),
		chromedp.Click(css(`#memory-docs a[href="/memory/long"]`)), chromedp.WaitVisible(css("#edit")),
		chromedp.Click(css("#edit")), chromedp.WaitVisible(css("#text")), chromedp.SendKeys(css("#text"), "- mine, typed in the console\n"))
	putMemory("# Notes\n- theirs, saved meanwhile\n")
	do("save over theirs", chromedp.Click(css(".editor button[type=submit]")), chromedp.WaitVisible(css("#theirs")), shot("memory-conflict"))
	if theirs := text("#theirs"); !strings.Contains(theirs, "theirs, saved meanwhile") {
		t.Errorf("the conflict shows theirs as %q", theirs)
	}
	mine, err := chromedp.Run(bctx, chromedp.Value(css("#text")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(mine, "mine, typed in the console") || !strings.Contains(mine, "the first line") {
		t.Errorf("after the conflict the editor holds %q, want the text typed kept", mine)
	}
	if msg := text("p.error"); !strings.Contains(msg, "someone else saved") {
		t.Errorf("the conflict says %q", msg)
	}
}

// apiJSON calls the HTTP API with the admin token and decodes its 2xx
// answer.
func apiJSON[T any](t *testing.T, method, u, admin string) T {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, u, nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out T
	if resp.StatusCode/100 != 2 {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s = %d %s", method, u, resp.StatusCode, raw)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	return out
}

// jobStatus is the job digest's status, as the API answers it.
func jobStatus(t *testing.T, base, admin string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/jobs/digest", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Status string `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(fmt.Errorf("GET /v1/jobs/digest: %w", err))
	}
	return st.Status
}
