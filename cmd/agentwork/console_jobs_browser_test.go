package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The job form in a real browser: a bad schedule's error appears under
// its field as it is typed, with no click and no reload; fixed, the next
// five fire times in the job's zone appear the same way. An edit form
// opened before someone changed the job through the API does not
// overwrite their change: the save shows the conflict, their version
// beside what was typed, which is kept.
func TestConsoleJobFormInBrowser(t *testing.T) {
	b := startBrowser(t, `
bus:
  listen: 127.0.0.1:0
model:
  script:
    rules:
      - match: {source: cron}
        text: "Done."
`)
	b.login()

	// As you type: no click, and the page is not reloaded (the marker
	// set on it stays).
	b.do("the new job form", chromedp.Navigate(b.base+"/jobs/new"), chromedp.WaitVisible(css("#f-schedule")))
	b.eval(`(window.typedHere = true)`)
	b.do("type a bad schedule", chromedp.SendKeys(css("#f-timezone"), "Asia/Tokyo"), chromedp.SendKeys(css("#f-schedule"), "0 25 * * *"))
	b.waitUntil(10*time.Second, "schedule error under the field",
		`!!document.querySelector("#f-schedule ~ #e-schedule") && document.getElementById("e-schedule").textContent.indexOf("schedule: ") === 0`)
	b.do("screenshot", b.shot("job-form-typing-error"))
	if !b.eval(`window.typedHere === true && location.pathname === "/jobs/new"`) {
		t.Fatal("the page was reloaded or left: the error did not come as typed")
	}
	if !b.eval(`document.getElementById("f-schedule").getAttribute("aria-invalid") === "true"`) {
		t.Error("the schedule field is not marked invalid")
	}
	if b.eval(`document.getElementById("e-id") !== null || document.getElementById("e-prompt") !== null`) {
		t.Error("fields not typed in yet show errors")
	}
	if got := b.text("#e-schedule"); !strings.Contains(got, "25") {
		t.Errorf("the schedule's error = %q, want it to name the hour 25", got)
	}

	b.eval(`(document.getElementById("f-schedule").value = "") === ""`) // then typed anew
	b.do("fix the schedule", chromedp.SendKeys(css("#f-schedule"), "0 9 * * mon"))
	b.waitUntil(10*time.Second, "five fire times",
		`document.querySelectorAll("#fires-list ol li").length === 5 && document.getElementById("e-schedule") === null`)
	b.do("screenshot", b.shot("job-form-typing-fires"))
	if !b.eval(`window.typedHere === true`) {
		t.Fatal("the page was reloaded: the fire times did not come as typed")
	}
	if got := b.text("#fires-list ol"); strings.Count(got, "09:00 JST") != 5 || strings.Count(got, "Mon ") != 5 {
		t.Errorf("the fire times = %q, want five Mondays at 09:00 JST", got)
	}
	if got := b.text("#fires-title"); got != "Next five fire times in Asia/Tokyo" {
		t.Errorf("the fire times' heading = %q", got)
	}

	// An edit that meets someone else's change.
	if st, _, body := jobCall(t, b, "POST", "/v1/jobs", `{"id":"weekly","schedule":"0 9 * * mon","prompt":"first"}`); st != http.StatusCreated {
		t.Fatalf("POST /v1/jobs = %d %s", st, body)
	}
	b.do("open the edit form", chromedp.Navigate(b.base+"/jobs/weekly/edit"), chromedp.WaitVisible(css("#f-prompt")))
	b.eval(`(document.getElementById("f-prompt").value = "") === ""`)
	b.do("type in it", chromedp.SendKeys(css("#f-prompt"), "mine, typed in the console"))
	if st, _, body := jobCall(t, b, "PATCH", "/v1/jobs/weekly", `{"prompt":"theirs, from the API"}`); st != http.StatusOK {
		t.Fatalf("PATCH /v1/jobs/weekly = %d %s", st, body)
	}
	b.do("save", chromedp.Click(css(`.job-form button:not([name])`)), chromedp.WaitVisible(css("#theirs")), b.shot("job-form-conflict"))
	if msg := b.text("p.error"); !strings.Contains(msg, "someone else changed this job since you opened it") {
		t.Errorf("the conflict says %q", msg)
	}
	if !b.eval(`document.getElementById("f-prompt").value === "mine, typed in the console"`) {
		t.Error("what was typed is not kept in the form")
	}
	if got := b.text("#theirs"); !strings.Contains(got, "theirs, from the API") {
		t.Errorf("their version = %q", got)
	}
	_, _, body := jobCall(t, b, "GET", "/v1/jobs/weekly", "")
	var st struct {
		Job struct {
			Prompt string `json:"prompt"`
		} `json:"job"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Job.Prompt != "theirs, from the API" {
		t.Errorf("after the refused save the job's prompt is %q (%v), want theirs", st.Job.Prompt, err)
	}
}

// jobCall makes one request of the HTTP API with the admin token.
func jobCall(t *testing.T, b *browser, method, path, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, b.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+b.admin)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(raw)
}
