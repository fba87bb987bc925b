package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentwork/agentwork/approval"
)

// The "done when", on the quick start's own config at 375 px: a
// person who has never seen agentwork logs in, finds why the last
// heartbeat was skipped, runs the digest job now and approves the
// release workflow's waiting question, by following what the pages show.
func TestConsoleQuickStartOnAPhone(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "quickstart", "agentwork.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	checklist, err := filepath.Abs(filepath.Join("..", "..", "examples", "quickstart", "HEARTBEAT.md"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(raw), "checklist: HEARTBEAT.md", "checklist: "+checklist, 1)
	if cfg == string(raw) {
		t.Fatal("the quick start's config no longer names HEARTBEAT.md: update this test")
	}
	b := startBrowser(t, cfg+"\nbus:\n  listen: 127.0.0.1:0\n")

	// The heartbeat's finding twice: the second is skipped as a duplicate.
	for range 2 {
		var out, errOut strings.Builder
		if err := run(t.Context(), []string{"heartbeat", "wake", "--wait", "--data-dir", b.srv.dataDir}, &out, &errOut); err != nil {
			t.Fatalf("heartbeat wake: %v\n%s%s", err, out.String(), errOut.String())
		}
	}
	// The release workflow waits for a decision.
	wfRun := apiJSON[struct{ ID string }](t, http.MethodPost, b.base+"/v1/workflows/release/runs", b.admin).ID
	var pending string
	waitFor(t, 20*time.Second, "the release workflow's question", func() bool {
		list := apiJSON[struct{ Approvals []approval.Approval }](t, http.MethodGet, b.base+"/v1/approvals?state=pending", b.admin)
		for _, a := range list.Approvals {
			if a.Run == wfRun {
				pending = a.ID
			}
		}
		return pending != ""
	}, b.srv.child)

	b.do("a phone", chromedp.EmulateViewport(375, 812, chromedp.EmulateMobile))
	b.login()
	b.do("the overview", b.shot("quickstart-overview"))
	if hb := b.text("#h-hb + dl"); !strings.Contains(hb, "skip") || !strings.Contains(hb, "duplicate") {
		t.Errorf("the overview's heartbeat reads %q, want its last run skipped as a duplicate", hb)
	}
	// Every count and outcome is on the screen (a "skip" once shared the
	// class of the off-screen skip link).
	const onScreen = `[...document.querySelectorAll(".num, .outcome")].every(e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= window.innerWidth })`
	if !b.eval(onScreen) {
		t.Error("a count or an outcome on the overview is off the screen")
	}
	b.do("the heartbeat's page", chromedp.Click(css(`a[href="/heartbeat"]`)), chromedp.WaitVisible(css("#hb-status")), b.shot("quickstart-heartbeat"))
	if last := b.text("main"); !strings.Contains(last, "duplicate") {
		t.Errorf("the heartbeat's page reads %q, want why its last run was skipped", last)
	}

	b.do("jobs", chromedp.Click(css(`nav a[href="/jobs"]`)), chromedp.WaitVisible(css("#job-digest")),
		chromedp.Click(css(`form[action="/jobs/digest/run"] button`)), chromedp.WaitVisible(css(".flash")), b.shot("quickstart-run-now"))
	if flash := b.text(".flash"); flash != "Job digest started." {
		t.Errorf("after Run now the page says %q", flash)
	}

	b.do("the overview again", chromedp.Click(css("a.brand")), chromedp.WaitVisible(css("#approvals-waiting")))
	b.do("the approvals waiting", chromedp.Click(css("#approvals-waiting")), chromedp.WaitVisible(css("#approval-"+pending)))
	if card := b.text("#approval-" + pending); !strings.Contains(card, "Ship v1.2.0 to production?") {
		t.Errorf("the waiting approval reads %q, want the release's question", card)
	}
	b.do("approve", chromedp.Click(css("#approval-"+pending+` button[value="approve"]`)), chromedp.WaitVisible(css(".flash")), b.shot("quickstart-approved"))
	if !b.eval(`document.documentElement.scrollWidth <= window.innerWidth`) {
		t.Error("/approvals at 375 px scrolls sideways")
	}
	waitFor(t, 20*time.Second, "the release run to end done", func() bool {
		return apiJSON[struct{ Status string }](t, http.MethodGet, b.base+"/v1/workflow-runs/"+wfRun, b.admin).Status == "done"
	}, b.srv.child)
	a := apiJSON[approval.Approval](t, http.MethodGet, b.base+"/v1/approvals/"+pending, b.admin)
	if a.State != approval.Approved || a.Decision == nil || a.Decision.By != "admin" {
		t.Errorf("the approval is %s %+v, want approved by admin", a.State, a.Decision)
	}
	waitFor(t, 20*time.Second, "the digest's run", func() bool {
		runs := apiJSON[struct{ Runs []struct{ Name string } }](t, http.MethodGet, b.base+"/v1/runs?source=cron&name=digest", b.admin)
		return len(runs.Runs) > 0
	}, b.srv.child)
}
