package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The heartbeat's checklist in a real browser against the real binary:
// the heartbeat page shows it; an edit made while someone else changed
// it through the API is refused with theirs shown and the typed text
// kept; saved again it is the file's; a wake then runs with it (the script
// model answers the new item only).
func TestConsoleHeartbeatChecklistInBrowser(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "HEARTBEAT.md")
	if err := os.WriteFile(path, []byte("# Heartbeat\n\n- [ ] Check the disk <b>space</b>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := startBrowser(t, `
bus:
  listen: 127.0.0.1:0
model:
  script:
    rules:
      - match: {source: heartbeat, prompt: "replica lag"}
        text: "Looked at the replica."
        notify: "The replica lags 40 s behind: look at its disk."
      - match: {source: heartbeat}
        text: "All well."
heartbeat:
  checklist: `+path+`
  targets: [console]
`)
	b.login()
	b.do("the heartbeat page", chromedp.Navigate(b.base+"/heartbeat"), chromedp.WaitVisible(css("#checklist-text")), b.shot("heartbeat"))
	if got := b.text("#checklist-text"); !strings.Contains(got, "- [ ] Check the disk <b>space</b>") {
		t.Errorf("the checklist on the heartbeat page = %q", got)
	}
	if got := b.text("#checklist-items"); got != "1" {
		t.Errorf("items = %q, want 1", got)
	}

	// Edit; meanwhile someone changes it through the API.
	b.do("open the editor", chromedp.Click(css("#edit-checklist")), chromedp.WaitVisible(css("#text")),
		chromedp.Clear(css("#text")), chromedp.SendKeys(css("#text"), "# Heartbeat\n- [ ] Check the replica lag\n"))
	theirs := "# Heartbeat\n- [ ] Check the certificates\n"
	b.putChecklist(theirs)
	b.do("save over theirs", chromedp.Click(css("#checklist-editor button")), chromedp.WaitVisible(css("#theirs")), b.shot("heartbeat-checklist-conflict"))
	if got := b.text("#theirs"); !strings.Contains(got, "Check the certificates") {
		t.Errorf("theirs on the conflict page = %q", got)
	}
	if !b.eval(`document.querySelector("#text").value.includes("Check the replica lag")`) {
		t.Error("the typed text was not kept after the conflict")
	}
	if got := b.text("p.error"); !strings.Contains(got, "changed after you opened it") {
		t.Errorf("the conflict says %q", got)
	}
	if got, _ := os.ReadFile(path); string(got) != theirs {
		t.Fatalf("the refused save changed the file: %q", got)
	}

	// Saved again, it replaces theirs.
	b.do("save mine", chromedp.Click(css("#checklist-editor button")), chromedp.WaitVisible(css(".flash")))
	if got := b.text(".flash"); !strings.Contains(got, "Checklist saved: 1 item(s).") {
		t.Errorf("after the save the page says %q", got)
	}
	if got, _ := os.ReadFile(path); string(got) != "# Heartbeat\n- [ ] Check the replica lag\n" {
		t.Fatalf("the file after the save = %q", got)
	}

	// A wake runs with it.
	b.do("wake", chromedp.Click(css(`form[action="/heartbeat/wake"] button`)), chromedp.WaitVisible(css(".flash")))
	waitFor(t, 30*time.Second, "a heartbeat run that notified about the replica", func() bool {
		return strings.Contains(b.lastHeartbeatText(), "The replica lags 40 s")
	}, b.srv.child)
	b.do("the heartbeat page after the run", chromedp.Navigate(b.base+"/heartbeat"), chromedp.WaitVisible(css("#checklist-text")), b.shot("heartbeat-after-edit"))
}

// putChecklist replaces the checklist through the API, at its current
// revision, as another client would.
func (b *browser) putChecklist(text string) {
	b.t.Helper()
	req, _ := http.NewRequestWithContext(b.t.Context(), http.MethodGet, b.base+"/v1/heartbeat/checklist", nil)
	req.Header.Set("Authorization", "Bearer "+b.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	etag := resp.Header.Get("ETag")
	if resp.StatusCode != http.StatusOK || etag == "" {
		b.t.Fatalf("GET /v1/heartbeat/checklist = %d, ETag %q", resp.StatusCode, etag)
	}
	req, _ = http.NewRequestWithContext(b.t.Context(), http.MethodPut, b.base+"/v1/heartbeat/checklist", strings.NewReader(text))
	req.Header.Set("Authorization", "Bearer "+b.admin)
	req.Header.Set("If-Match", etag)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.t.Fatalf("PUT /v1/heartbeat/checklist = %d", resp.StatusCode)
	}
}

// lastHeartbeatText is the notify_user text of the latest heartbeat run
// ("" when there is none yet).
func (b *browser) lastHeartbeatText() string {
	req, _ := http.NewRequestWithContext(b.t.Context(), http.MethodGet, b.base+"/v1/heartbeat/history?limit=1", nil)
	req.Header.Set("Authorization", "Bearer "+b.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var h struct {
		Runs []struct {
			Result struct {
				Text string `json:"text"`
			} `json:"result"`
		} `json:"runs"`
	}
	if json.NewDecoder(resp.Body).Decode(&h) != nil || len(h.Runs) == 0 {
		return ""
	}
	return h.Runs[0].Result.Text
}
