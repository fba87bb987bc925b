package main

import (
	"net/http"
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// The console in a real browser: a workflow started from its page (an
// input of the wrong type refused under its field, what was typed kept;
// fixed, the run's page shows the run going to done), and a memory
// document rendered as Markdown with its <script> shown as text and
// nothing run.
func TestConsoleWorkflowFormAndMarkdownInBrowser(t *testing.T) {
	b := startBrowser(t, `
bus:
  listen: 127.0.0.1:0
model:
  script:
    rules:
      - match: {source: task}
        text: "ok"
workflows:
  release:
    description: Ship a build and say so
    targets: [console]
    inputs:
      build: {type: string, required: true, description: The build to ship}
      count: {type: integer, default: 1, description: How many copies}
      dry: {type: boolean, description: Only pretend}
    steps:
      - id: tell
        notify: {text: "Shipping ${{ inputs.build }} x${{ inputs.count }}"}
`)
	b.login()

	// A wrong input: refused under its field, the text kept.
	b.do("the run form", chromedp.Navigate(b.base+"/workflows/release"), chromedp.WaitVisible(css("#run-form")),
		chromedp.Clear(css("#in-count")), chromedp.SendKeys(css("#in-count"), "many"),
		chromedp.Click(css("#run-start")), chromedp.WaitVisible(css("#e-count")), b.shot("workflow-run-form-refused"))
	if got := b.text("#e-count"); !strings.Contains(got, "want an integer") {
		t.Errorf("under count: %q, want the API's type error", got)
	}
	if got := b.text("#e-build"); !strings.Contains(got, "required") {
		t.Errorf("under build: %q, want that it is required", got)
	}
	if !b.eval(`document.querySelector("#in-count").value === "many" && document.querySelector("#in-count").getAttribute("aria-invalid") === "true"`) {
		t.Error("the refused form does not keep what was typed in count, or does not mark it invalid")
	}

	// Fixed: the run starts, its page shows it going to done.
	b.do("start the run", chromedp.Clear(css("#in-count")), chromedp.SendKeys(css("#in-count"), "3"),
		chromedp.SendKeys(css("#in-build"), "b42"), chromedp.Click(css("#run-start")), chromedp.WaitVisible(css("#run-status")))
	if flash := b.text(".flash"); !strings.HasPrefix(flash, "Started run ") || !strings.HasSuffix(flash, " of release.") {
		t.Errorf("after Start the page says %q", flash)
	}
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	// The run's end, waited for as the CLI waits (on its events); then
	// its page once more.
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	if err := run(t.Context(), []string{"workflow", "status", path.Base(u.Path), "--wait", "--data-dir", b.srv.dataDir}, &out, &errOut); err != nil {
		t.Fatalf("workflow status --wait: %v\n%s%s", err, out.String(), errOut.String())
	}
	b.do("the run's page again", chromedp.Navigate(loc), chromedp.WaitVisible(css("#run-status")))
	if st := b.text("#run-status"); st != "done" {
		t.Fatalf("the run's page says %q after it ended, want done\nserver stderr:\n%s", st, b.srv.stderr.String())
	}
	b.do("screenshot", b.shot("workflow-run-done"))
	if got := b.text("#run-inputs"); !strings.Contains(got, `"build": "b42"`) || !strings.Contains(got, `"count": 3`) || !strings.Contains(got, `"dry": false`) {
		t.Errorf("the run's inputs read %q", got)
	}

	// Memory as Markdown: a heading, a list, a table, and a <script> as
	// text; nothing runs.
	doc := "# Plan\n\n- first\n- second\n\n| host | disk |\n|------|-----:|\n| web1 | 93% |\n\n" +
		"<script>window.__alerted = true; alert(1)</script>\n\nand <img src=x onerror=\"window.__alerted = true\"> [x](javascript:window.__alerted=true)\n"
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, b.base+"/v1/memory/long", strings.NewReader(doc))
	req.Header.Set("Authorization", "Bearer "+b.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/memory/long = %d", resp.StatusCode)
	}
	b.do("the memory document", chromedp.Navigate(b.base+"/memory/long"), chromedp.WaitVisible(css("#doc-md h1")), b.shot("memory-markdown"))
	if got := b.text("#doc-md h1"); got != "Plan" {
		t.Errorf("the heading reads %q", got)
	}
	for what, js := range map[string]string{
		"a list of two":              `document.querySelectorAll("#doc-md ul > li").length === 2`,
		"a table":                    `document.querySelector("#doc-md table td") !== null && document.querySelector("#doc-md table td").textContent === "web1"`,
		"the script as text":         `document.querySelector("#doc-md").textContent.includes("<script>window.__alerted = true; alert(1)</script>")`,
		"no script element":          `document.querySelectorAll("#doc-md script, #doc-md img, #doc-md [onerror]").length === 0`,
		"no javascript: link":        `[...document.querySelectorAll("#doc-md a")].every(a => a.protocol === "http:" || a.protocol === "https:" || a.protocol === "mailto:")`,
		"nothing that ran":           `window.__alerted === undefined`,
		"a link to the source":       `document.querySelector("#view-source") !== null`,
		"no inline script on a page": `[...document.scripts].every(s => s.src !== "")`,
	} {
		if !b.eval(js) {
			t.Errorf("the rendered memory has not %s (%s)", what, js)
		}
	}
	b.do("its source", chromedp.Click(css("#view-source")), chromedp.WaitVisible(css("#doc-text")))
	if got := b.text("#doc-text"); !strings.HasPrefix(got, "# Plan") || !strings.Contains(got, "<script>") {
		t.Errorf("the source view reads %q", got)
	}
}
