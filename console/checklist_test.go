package console_test

import (
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/tools/memory"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

// heartbeatFixture serves the real heartbeat's routes, its checklist a
// file in dir (or, with mem, the memory's document).
func heartbeatFixture(t *testing.T, inMemory bool) (f *fixture, dir string, mem *memory.Store) {
	t.Helper()
	dir = t.TempDir()
	f = newFixture(t, func(d *api.Deps) {
		opts := []heartbeat.Option{heartbeat.WithBaseDir(dir)}
		if inMemory {
			m, err := memory.New(d.Bus, memory.Config{})
			if err != nil {
				t.Fatal(err)
			}
			mem, d.Memory = m, m
			opts = append(opts, heartbeat.WithMemory(m))
		}
		h, err := heartbeat.New(d.Bus, heartbeat.Config{ChecklistInMemory: inMemory}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		d.Routes = []api.Router{h}
	})
	return f, dir, mem
}

var checklistRevision = regexp.MustCompile(`name="revision" value="([0-9a-f]*)"`)

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func fileText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The heartbeat page shows the checklist as text, with its source and
// items; a read-only session gets no editor and its save is refused; an
// edit saves through the API at the revision it was opened at, and when
// the checklist changed meanwhile the save is refused, theirs shown and
// the typed text kept; saving again replaces theirs.
func TestHeartbeatChecklist(t *testing.T) {
	t.Parallel()
	f, dir, _ := heartbeatFixture(t, false)
	path := filepath.Join(dir, "HEARTBEAT.md")
	const evil = "# Heartbeat\n- [ ] Check <script>alert(1)</script>\n"
	writeFile(t, path, evil)

	viewer := f.browser(t).login(viewerToken)
	p := viewer.do("GET", "/heartbeat", nil)
	if p.status != 200 || strings.Contains(p.body, "<script>alert") || !strings.Contains(p.body, `<pre class="text" id="checklist-text"># Heartbeat
- [ ] Check &lt;script&gt;alert(1)&lt;/script&gt;`) || !strings.Contains(p.body, `<dd id="checklist-items">1</dd>`) ||
		!strings.Contains(p.body, "file <code>HEARTBEAT.md</code>") || strings.Contains(p.body, dir) {
		t.Fatalf("GET /heartbeat = %d, want the checklist escaped with its source (its base name only: no directory) and items:\n%s", p.status, p.body)
	}
	if strings.Contains(p.body, `id="edit-checklist"`) {
		t.Error("a read-only session is offered to edit the checklist")
	}
	if p := viewer.do("GET", "/heartbeat/checklist", nil); p.status != 200 || strings.Contains(p.body, "<textarea") || !strings.Contains(p.body, "Read-only") {
		t.Errorf("the editor for a read-only session = %d, want no form:\n%s", p.status, p.body)
	}
	if got := viewer.do("POST", "/heartbeat/checklist", url.Values{"csrf": {viewer.csrf}, "text": {"- x"}, "revision": {""}}); got.status != http.StatusForbidden {
		t.Errorf("a read-only save = %d, want 403", got.status)
	}
	if fileText(t, path) != evil {
		t.Fatal("a refused save changed the file")
	}

	// A credential with console: write does not change the checklist:
	// the heartbeat runs it with the operator's tools and targets.
	cred := f.browser(t).login(opToken)
	if p := cred.do("GET", "/heartbeat", nil); strings.Contains(p.body, `id="edit-checklist"`) {
		t.Error("a credential's session is offered to edit the checklist")
	}
	if p := cred.do("GET", "/heartbeat/checklist", nil); strings.Contains(p.body, "<textarea") || !strings.Contains(p.body, "Only the admin changes the heartbeat") {
		t.Errorf("the editor for a credential's session = %d, want no form and why:\n%s", p.status, p.body)
	}
	rev := checklistRevision.FindStringSubmatch(f.browser(t).login(adminToken).do("GET", "/heartbeat/checklist", nil).body)
	if rev == nil {
		t.Fatal("the admin's editor has no revision")
	}
	if got := cred.do("POST", "/heartbeat/checklist", url.Values{"csrf": {cred.csrf}, "text": {"- [ ] x"}, "revision": {rev[1]}}); got.status != http.StatusForbidden ||
		!strings.Contains(got.body, "only the admin changes the heartbeat") {
		t.Errorf("a credential's save = %d, want 403 saying only the admin:\n%s", got.status, got.body)
	}
	if fileText(t, path) != evil {
		t.Fatal("a credential's refused save changed the file")
	}

	op := f.browser(t).login(adminToken)
	if p := op.do("GET", "/heartbeat", nil); !strings.Contains(p.body, `href="/heartbeat/checklist" id="edit-checklist"`) {
		t.Errorf("the heartbeat page offers the admin no editor:\n%s", p.body)
	}
	p = op.do("GET", "/heartbeat/checklist", nil)
	m := checklistRevision.FindStringSubmatch(p.body)
	if p.status != 200 || m == nil || m[1] == "" || !strings.Contains(p.body, "<textarea id=\"text\" name=\"text\" rows=\"18\">\n# Heartbeat\n- [ ] Check &lt;script&gt;") {
		t.Fatalf("the editor = %d, no revision or no text:\n%s", p.status, p.body)
	}
	opened := m[1]
	theirs := "# Heartbeat\n- [ ] Check the <b>certificates</b>\n"
	writeFile(t, path, theirs) // someone edits it meanwhile
	mine := "# Heartbeat\n- [ ] Check the replica lag <i>now</i>\n"
	got := op.do("POST", "/heartbeat/checklist", url.Values{"csrf": {op.csrf}, "text": {mine}, "revision": {opened}})
	if got.status != http.StatusConflict {
		t.Fatalf("a save over someone else's = %d, want 409:\n%s", got.status, got.body)
	}
	for _, want := range []string{"changed after you opened it", `id="theirs"># Heartbeat` + "\n- [ ] Check the &lt;b&gt;certificates&lt;/b&gt;", "Check the replica lag &lt;i&gt;now&lt;/i&gt;", "Save mine over theirs"} {
		if !strings.Contains(got.body, want) {
			t.Errorf("the conflict page lacks %q:\n%s", want, got.body)
		}
	}
	if fileText(t, path) != theirs {
		t.Fatal("the refused save changed the file")
	}
	m = checklistRevision.FindStringSubmatch(got.body)
	if m == nil || m[1] == opened {
		t.Fatalf("the conflict's editor is not at the new revision (%v, opened at %s)", m, opened)
	}
	got = op.do("POST", "/heartbeat/checklist", url.Values{"csrf": {op.csrf}, "text": {strings.ReplaceAll(mine, "\n", "\r\n")}, "revision": {m[1]}})
	if got.status != http.StatusSeeOther || got.header.Get("Location") != "/heartbeat" {
		t.Fatalf("the second save = %d %s:\n%s", got.status, got.header.Get("Location"), got.body)
	}
	if f := fileText(t, path); f != mine {
		t.Errorf("the file after the save = %q, want %q", f, mine)
	}
	if p := op.do("GET", "/heartbeat", nil); !strings.Contains(p.body, "Checklist saved: 1 item(s).") || !strings.Contains(p.body, "replica lag &lt;i&gt;now") {
		t.Errorf("after the save the page lacks the flash or the new text:\n%s", p.body)
	}

	// Missing: the page says so and what to do; the editor creates it.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if p := op.do("GET", "/heartbeat", nil); !strings.Contains(p.body, `<dd id="checklist-status" class="error-text">missing: `+path+` does not exist: create it`) {
		t.Errorf("a missing checklist is not shown as such:\n%s", p.body)
	}
	if p := viewer.do("GET", "/heartbeat", nil); !strings.Contains(p.body, `<dd id="checklist-status" class="error-text">missing: HEARTBEAT.md does not exist: create it`) || strings.Contains(p.body, dir) {
		t.Errorf("a missing checklist shows a non-admin session its directory:\n%s", p.body)
	}
	if p := viewer.do("GET", "/heartbeat/checklist", nil); strings.Contains(p.body, dir) {
		t.Errorf("the checklist's page shows a non-admin session its directory:\n%s", p.body)
	}
	if p := op.do("GET", "/heartbeat/checklist", nil); checklistRevision.FindStringSubmatch(p.body) == nil || checklistRevision.FindStringSubmatch(p.body)[1] != "" {
		t.Errorf("the editor of a missing checklist has a revision:\n%s", p.body)
	}
	if got := op.do("POST", "/heartbeat/checklist", url.Values{"csrf": {op.csrf}, "text": {"- [ ] new\n"}, "revision": {""}}); got.status != http.StatusSeeOther || fileText(t, path) != "- [ ] new\n" {
		t.Errorf("creating the checklist = %d:\n%s", got.status, got.body)
	}
	if got := op.do("POST", "/heartbeat/checklist", url.Values{"csrf": {op.csrf}, "text": {"- [ ] x\n"}}); got.status != http.StatusSeeOther || fileText(t, path) != "- [ ] new\n" {
		t.Errorf("a form without a revision = %d, want refused and the file kept", got.status)
	}
}

// A checklist in memory is saved as the console's user.
func TestHeartbeatChecklistInMemory(t *testing.T) {
	t.Parallel()
	f, dir, mem := heartbeatFixture(t, true)
	writeFile(t, filepath.Join(dir, "HEARTBEAT.md"), "- [ ] from the file\n")
	op := f.browser(t).login(adminToken)
	p := op.do("GET", "/heartbeat", nil)
	if !strings.Contains(p.body, "memory document <code>checklist</code> (not in memory yet: will be filled from HEARTBEAT.md at the next run") || !strings.Contains(p.body, "- [ ] from the file") {
		t.Fatalf("the heartbeat page lacks the checklist to be filled from the file:\n%s", p.body)
	}
	if _, err := mem.Read(t.Context(), memory.Checklist); !errors.Is(err, memory.ErrNotFound) {
		t.Fatalf("showing the checklist wrote it: %v", err)
	}
	// A credential with console: write changes it neither here nor in the
	// memory's editor.
	cred := f.browser(t).login(opToken)
	if got := cred.do("POST", "/heartbeat/checklist", url.Values{"csrf": {cred.csrf}, "text": {"- [ ] x\n"}, "revision": {"1"}}); got.status != http.StatusForbidden {
		t.Errorf("a credential's save = %d, want 403:\n%s", got.status, got.body)
	}
	if p := cred.do("GET", "/memory/checklist", nil); strings.Contains(p.body, `id="edit"`) || !strings.Contains(p.body, "Only the admin changes the heartbeat") {
		t.Errorf("the memory page offers a credential to edit the checklist:\n%s", p.body)
	}
	if got := cred.do("POST", "/memory/checklist", url.Values{"csrf": {cred.csrf}, "text": {"- [ ] x\n"}, "revision": {"1"}}); got.status != http.StatusForbidden ||
		!strings.Contains(got.body, "only the admin changes the heartbeat") {
		t.Errorf("a credential's save in the memory editor = %d, want 403 saying only the admin:\n%s", got.status, got.body)
	}
	got := op.do("POST", "/heartbeat/checklist", url.Values{"csrf": {op.csrf}, "text": {"- [ ] from the console\n"}, "revision": {""}})
	if got.status != http.StatusSeeOther {
		t.Fatalf("save = %d:\n%s", got.status, got.body)
	}
	if d, _ := mem.Read(t.Context(), memory.Checklist); d.Text != "- [ ] from the console\n" || d.By != "console:admin" || d.Revision != 1 {
		t.Errorf("the document = %q by %q at %d, want the console's by console:admin at 1", d.Text, d.By, d.Revision)
	}
}
