package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/console"
	"github.com/agentwork/agentwork/tools/memory"
)

func memoryFixture(t *testing.T) (*fixture, *memory.Store) {
	t.Helper()
	var st *memory.Store
	f := newFixture(t, func(d *api.Deps) {
		s, err := memory.New(d.Bus, memory.Config{})
		if err != nil {
			t.Fatal(err)
		}
		st, d.Memory = s, s
	})
	return f, st
}

var revisionField = regexp.MustCompile(`name="revision" value="(\d+)"`)

// A document shows as escaped text with its history; an edit saves
// through the API at the revision it was opened at; when someone else
// saved meanwhile, the save is refused, both versions are shown and the
// user's text is kept; saving again then replaces theirs.
func TestMemoryPages(t *testing.T) {
	t.Parallel()
	f, st := memoryFixture(t)
	viewer := f.browser(t).login(viewerToken)
	if p := viewer.do("GET", "/memory", nil); p.status != 200 || !strings.Contains(p.body, "Nothing in memory yet") {
		t.Errorf("the empty memory page = %d:\n%s", p.status, p.body)
	}
	if _, err := st.Put(t.Context(), "long", "# Notes\n<script>alert(1)</script>\n", "test", nil); err != nil {
		t.Fatal(err)
	}
	p := viewer.do("GET", "/memory/long", nil)
	if p.status != 200 || strings.Contains(p.body, "<script>alert") || !strings.Contains(p.body, "<h1>Notes</h1>") ||
		!strings.Contains(p.body, "&lt;script&gt;alert(1)&lt;/script&gt;") || !strings.Contains(p.body, `id="history"`) || !strings.Contains(p.body, `href="/memory/long?view=source"`) {
		t.Fatalf("GET /memory/long = %d, want the Markdown rendered, the script as text, a link to the source and the history:\n%s", p.status, p.body)
	}
	if p := viewer.do("GET", "/memory/long?view=source", nil); p.status != 200 || strings.Contains(p.body, "<h1>Notes</h1>") || !strings.Contains(p.body, "# Notes\n&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Fatalf("GET /memory/long?view=source = %d, want the text as it is, escaped:\n%s", p.status, p.body)
	}
	if strings.Contains(p.body, `id="edit"`) {
		t.Error("a read-only session is offered to edit")
	}
	if p := viewer.do("GET", "/memory", nil); !strings.Contains(p.body, `href="/memory/long"`) || !strings.Contains(p.body, "MEMORY.md") {
		t.Errorf("the memory list lacks the document:\n%s", p.body)
	}
	if got := viewer.do("POST", "/memory/long", url.Values{"csrf": {viewer.csrf}, "text": {"x"}, "revision": {"1"}}); got.status != http.StatusForbidden {
		t.Errorf("a read-only save = %d, want 403", got.status)
	}

	op := f.browser(t).login(opToken)
	p = op.do("GET", "/memory/long?edit=1", nil)
	m := revisionField.FindStringSubmatch(p.body)
	if m == nil || !strings.Contains(p.body, `<textarea id="text" name="text" rows="18">`) {
		t.Fatalf("the editor has no revision or no text box:\n%s", p.body)
	}
	opened := m[1]
	// Someone else saves meanwhile.
	if _, err := st.Put(t.Context(), "long", "# Notes\ntheirs\n", "agent", nil); err != nil {
		t.Fatal(err)
	}
	mine := "# Notes\nmine <b>kept</b>\n"
	got := op.do("POST", "/memory/long", url.Values{"csrf": {op.csrf}, "text": {mine}, "revision": {opened}})
	if got.status != http.StatusConflict {
		t.Fatalf("a save over someone else's = %d, want 409 with both versions:\n%s", got.status, got.body)
	}
	for _, want := range []string{"someone else saved", `id="theirs">` + "# Notes\ntheirs\n", "mine &lt;b&gt;kept&lt;/b&gt;", "Save mine over theirs"} {
		if !strings.Contains(got.body, want) {
			t.Errorf("the conflict page lacks %q:\n%s", want, got.body)
		}
	}
	if d, _ := st.Read(t.Context(), "long"); d.Text != "# Notes\ntheirs\n" {
		t.Fatalf("the refused save changed the document: %q", d.Text)
	}
	m = revisionField.FindStringSubmatch(got.body)
	if m == nil || m[1] == opened {
		t.Fatalf("the conflict's editor is not at the new revision (%v, opened at %s)", m, opened)
	}
	// Saving again replaces theirs, as the user.
	got = op.do("POST", "/memory/long", url.Values{"csrf": {op.csrf}, "text": {mine}, "revision": {m[1]}})
	if got.status != http.StatusSeeOther {
		t.Fatalf("the second save = %d:\n%s", got.status, got.body)
	}
	if d, _ := st.Read(t.Context(), "long"); d.Text != mine || d.By != "console:oper" {
		t.Errorf("after the second save: %q by %q, want mine by console:oper", d.Text, d.By)
	}
	if p := op.do("GET", "/memory/long", nil); !strings.Contains(p.body, "Saved long.") || strings.Count(p.body, "<details>") != 3 {
		t.Errorf("after the save the page lacks the flash or the 3 revisions:\n%s", p.body)
	}

	// A document not written yet: says so, and is written with
	// If-None-Match (revision 0).
	if p := op.do("GET", "/memory/checklist", nil); p.status != 200 || !strings.Contains(p.body, "Nothing was written to this document yet") {
		t.Errorf("an empty document = %d:\n%s", p.status, p.body)
	}
	if got := op.do("POST", "/memory/checklist", url.Values{"csrf": {op.csrf}, "text": {"- look"}, "revision": {"0"}}); got.status != http.StatusForbidden {
		t.Errorf("a credential writing the heartbeat's checklist = %d, want 403 (the admin's only):\n%s", got.status, got.body)
	}
	admin := f.browser(t).login(adminToken)
	if got := admin.do("POST", "/memory/checklist", url.Values{"csrf": {admin.csrf}, "text": {"- look"}, "revision": {"0"}}); got.status != http.StatusSeeOther {
		t.Errorf("writing a new document = %d:\n%s", got.status, got.body)
	}
	if d, _ := st.Read(t.Context(), "checklist"); d.Text != "- look" {
		t.Errorf("the new checklist = %q", d.Text)
	}
	if p := op.do("GET", "/memory/nonsense", nil); p.status != http.StatusBadRequest {
		t.Errorf("GET /memory/nonsense = %d, want 400", p.status)
	}
}

// Without memory the page says how to turn it on.
func TestMemoryOff(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if p := f.browser(t).login(viewerToken).do("GET", "/memory", nil); p.status != 200 || !strings.Contains(p.body, "keeps no memory") {
		t.Errorf("GET /memory without memory = %d:\n%s", p.status, p.body)
	}
}

// A document's Markdown is rendered on its page and in its history, and
// nothing in it runs: raw HTML is text, script links are no links, images
// are not loaded; the page keeps its CSP.
func TestMemoryMarkdown(t *testing.T) {
	t.Parallel()
	f, st := memoryFixture(t)
	hostile := "# Plan\n\n- one\n- two\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n<script>alert(1)</script>\n\n" +
		"[x](JaVaScRiPt:alert(1)) <img src=x onerror=alert(1)> ![p](https://evil.example/p.png) <memory-context>x</memory-context>\n"
	if _, err := st.Put(t.Context(), "long", "first *rev*", "test", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(t.Context(), "long", hostile, "agent", nil); err != nil {
		t.Fatal(err)
	}
	viewer := f.browser(t).login(viewerToken)
	p := viewer.do("GET", "/memory/long", nil)
	if p.status != 200 {
		t.Fatalf("GET /memory/long = %d:\n%s", p.status, p.body)
	}
	if csp := p.header.Get("Content-Security-Policy"); csp != console.ContentSecurityPolicy || !strings.Contains(csp, "img-src 'self' data:") || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("the page's CSP = %q", csp)
	}
	for _, want := range []string{"<h1>Plan</h1>", "<li>one</li>", "<td>1</td>", "&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(1)&gt;",
		`<span class="md-nolink">x</span>`, "&lt;memory-context&gt;", `rel="noopener noreferrer nofollow">image: p</a>`, `<pre class="text">first *rev*</pre>`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the rendered page lacks %q:\n%s", want, p.body)
		}
	}
	for _, bad := range []string{"<script>alert", "<img", "onerror=alert(1)>", `href="javascript`, `href="JaVaScRiPt`, "<memory-context>"} {
		if strings.Contains(p.body, bad) {
			t.Errorf("the rendered page has %q:\n%s", bad, p.body)
		}
	}
	src := viewer.do("GET", "/memory/long?view=source", nil)
	if strings.Contains(src.body, "<h1>Plan</h1>") || strings.Contains(src.body, "<em>rev</em>") || !strings.Contains(src.body, "first *rev*") || !strings.Contains(src.body, `href="/memory/long"`) {
		t.Errorf("the source view renders Markdown, or lacks the text or the link back:\n%s", src.body)
	}
}

// The table bomb (a 2,000-column header over thousands of empty rows,
// hundreds of MB once rendered) is a page of bounded size showing its
// source; past revisions show as source, never rendered.
func TestMemoryTableBomb(t *testing.T) {
	t.Parallel()
	f, st := memoryFixture(t)
	c := 2000
	doc := "|" + strings.Repeat("a|", c) + "\n|" + strings.Repeat("-|", c) + "\n"
	doc += strings.Repeat("|\n", (memory.MaxDoc-len(doc))/2)
	for _, text := range []string{doc, strings.TrimSuffix(doc, "|\n"), "# Now"} {
		if _, err := st.Put(t.Context(), "long", text, "test", nil); err != nil {
			t.Fatal(err)
		}
	}
	p := f.browser(t).login(viewerToken).do("GET", "/memory/long", nil)
	if p.status != 200 || len(p.body) > 1<<20 {
		t.Fatalf("GET /memory/long = %d, %d bytes; want 200 and under 1 MiB", p.status, len(p.body))
	}
	if !strings.Contains(p.body, "<h1>Now</h1>") || strings.Count(p.body, "<table>") != 0 || strings.Count(p.body, "<details>") != 3 {
		t.Errorf("want the current text rendered and the 3 revisions as source:\n%s", p.body[:min(len(p.body), 3000)])
	}
}
