package heartbeat_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/tools/memory"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

// checklistAPI calls the checklist routes of one server.
type checklistAPI struct {
	t     *testing.T
	url   string
	token string
}

// httpAnswer is one response: status, header, the view or the problem.
type httpAnswer struct {
	status  int
	header  http.Header
	view    heartbeat.ChecklistView
	problem struct {
		Status       int
		Code, Detail string
	}
}

func (c checklistAPI) do(method, body string, header ...string) httpAnswer {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.url+"/v1/heartbeat/checklist", strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := httpAnswer{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &a.view); err != nil {
			c.t.Fatalf("%s: %v: %s", method, err, raw)
		}
	} else {
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			c.t.Errorf("%s %d: Content-Type %q, want problem+json", method, resp.StatusCode, ct)
		}
		_ = json.Unmarshal(raw, &a.problem)
	}
	return a
}

// serveRoutes serves h's HTTP routes as the api server mounts them
// (without its admin check).
func serveRoutes(t *testing.T, h *heartbeat.Heartbeat) checklistAPI {
	t.Helper()
	mux := http.NewServeMux()
	h.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return checklistAPI{t: t, url: srv.URL}
}

var hexRevision = regexp.MustCompile(`^[0-9a-f]{16}$`)

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wakeAndPrompt wakes h, waits for its run's event and returns the
// prompt the model got.
func wakeAndPrompt(t *testing.T, h *heartbeat.Heartbeat, s *sink, m *fakeModel, n int) string {
	t.Helper()
	if _, err := h.Wake(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := s.wait(n)[n-1]; got.Result.Outcome == bus.OutcomeError {
		t.Fatalf("the woken run = %v", got)
	}
	return m.lastPrompt()
}

// A checklist file: read with its revision (a content hash) and item
// count; a change without a revision is refused (428), one at a stale
// revision too (412, naming the revision it is at, nothing written); at
// the right revision the file is replaced, its mode kept, and the next run
// uses it. Too large is refused; a missing file says so and is created
// with If-None-Match: *.
func TestChecklistHTTPFile(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(nextYear)
	dir := t.TempDir()
	path := filepath.Join(dir, "HEARTBEAT.md")
	writeChecklist(t, dir, checklistText)
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	h := newHeartbeat(t, b, heartbeat.Config{Targets: []string{"console"}}, clk, dir)
	m := scripted(t)
	startRunner(t, b, m, h, clk)
	s := watch(t, b)
	c := serveRoutes(t, h)

	got := c.do("GET", "")
	v := got.view
	if got.status != 200 || v.Source != "file" || v.Path != path || v.Text != checklistText || v.Items != 1 || v.Status != "" || !hexRevision.MatchString(v.Revision) ||
		got.header.Get("ETag") != `"`+v.Revision+`"` {
		t.Fatalf("GET = %d %+v ETag %s", got.status, v, got.header.Get("ETag"))
	}
	opened := v.Revision

	if got := c.do("PUT", "- [ ] blind\n"); got.status != http.StatusPreconditionRequired || !strings.Contains(got.problem.Detail, "GET /v1/heartbeat/checklist first") {
		t.Errorf("PUT without If-Match = %d %+v, want 428 saying to GET first", got.status, got.problem)
	}
	if got := c.do("PUT", "- [ ] blind\n", "If-Match", "*"); got.status != http.StatusPreconditionRequired {
		t.Errorf("PUT with If-Match: * = %d, want 428", got.status)
	}

	// Someone edits the file meanwhile.
	theirs := "# Heartbeat\n\n- [ ] Check the certificates\n"
	if err := os.WriteFile(path, []byte(theirs), 0o640); err != nil {
		t.Fatal(err)
	}
	got = c.do("PUT", "- [ ] mine\n", "If-Match", `"`+opened+`"`)
	now := c.do("GET", "").view.Revision
	if got.status != http.StatusPreconditionFailed || got.problem.Code != "conflict" || !strings.Contains(got.problem.Detail, "is at revision "+now) ||
		!strings.Contains(got.problem.Detail, "nothing was written") {
		t.Errorf("PUT at a stale revision = %d %+v, want 412 naming revision %s", got.status, got.problem, now)
	}
	if f := readFile(t, path); f != theirs {
		t.Fatalf("the refused PUT changed the file: %q", f)
	}

	mine := "# Heartbeat\n\n- [ ] Check the certificates\n- [ ] Check the replica lag <script>\n"
	got = c.do("PUT", mine, "If-Match", `"`+now+`"`)
	if got.status != 200 || got.view.Text != mine || got.view.Items != 2 || got.view.Revision == now || got.header.Get("ETag") != `"`+got.view.Revision+`"` {
		t.Fatalf("PUT at the right revision = %d %+v", got.status, got.view)
	}
	if f := readFile(t, path); f != mine {
		t.Errorf("the file after PUT = %q", f)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("the file's mode after PUT = %v %v, want 0640 kept", fi.Mode(), err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".HEARTBEAT.md.*")); len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
	if p := wakeAndPrompt(t, h, s, m, 1); !strings.Contains(p, "Check the replica lag <script>") {
		t.Errorf("the next run's prompt lacks the new checklist:\n%s", p)
	}

	big := strings.Repeat("- [ ] check\n", heartbeat.MaxChecklistBytes/12+1)
	if got := c.do("PUT", big, "If-Match", `"`+c.do("GET", "").view.Revision+`"`); got.status != http.StatusRequestEntityTooLarge || !strings.Contains(got.problem.Detail, "shorten it") {
		t.Errorf("PUT too large = %d %+v, want 413", got.status, got.problem)
	}
	if f := readFile(t, path); f != mine {
		t.Errorf("the refused large PUT changed the file")
	}

	// An empty checklist is written, and says the runs will skip.
	got = c.do("PUT", "# Heartbeat\n<!-- nothing -->\n", "If-Match", `"`+c.do("GET", "").view.Revision+`"`)
	if got.status != 200 || got.view.Status != "empty" || got.view.Items != 0 || !strings.Contains(got.view.Detail, "has no items") {
		t.Errorf("PUT of an empty checklist = %d %+v, want written with status empty", got.status, got.view)
	}

	// A missing file: status missing with what to do; created with
	// If-None-Match: *, once.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	got = c.do("GET", "")
	if got.status != 200 || got.view.Status != "missing" || got.view.Revision != "" || got.header.Get("ETag") != "" || !strings.Contains(got.view.Detail, "does not exist") {
		t.Errorf("GET of a missing file = %d %+v", got.status, got.view)
	}
	if got := c.do("PUT", "- [ ] one\n", "If-None-Match", "*"); got.status != 200 || readFile(t, path) != "- [ ] one\n" {
		t.Errorf("PUT If-None-Match: * of a missing file = %d %+v", got.status, got.problem)
	}
	if got := c.do("PUT", "- [ ] two\n", "If-None-Match", "*"); got.status != http.StatusPreconditionFailed || readFile(t, path) != "- [ ] one\n" {
		t.Errorf("a second create = %d %+v, want 412 and the file kept", got.status, got.problem)
	}
}

// A file larger than the cap: status missing, no text, but a revision, so
// it may be replaced.
func TestChecklistHTTPFileTooLarge(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	dir := t.TempDir()
	writeChecklist(t, dir, strings.Repeat("- [ ] check\n", heartbeat.MaxChecklistBytes/12+1))
	h := newHeartbeat(t, b, heartbeat.Config{}, clock.NewFake(nextYear), dir)
	c := serveRoutes(t, h)
	got := c.do("GET", "")
	if got.status != 200 || got.view.Status != "missing" || got.view.Text != "" || !strings.Contains(got.view.Detail, "larger than 256 KiB") || !hexRevision.MatchString(got.view.Revision) {
		t.Fatalf("GET of a too large file = %d %+v", got.status, got.view)
	}
	if got := c.do("PUT", "- [ ] short\n", "If-Match", got.view.Revision); got.status != 200 || got.view.Items != 1 {
		t.Errorf("replacing a too large file = %d %+v %+v", got.status, got.view, got.problem)
	}
}

// A checklist in memory: GET shows the file that will fill the document
// (writing nothing); a PUT is the store's compare-and-set, by the caller, and the next
// run uses it.
func TestChecklistHTTPMemory(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(nextYear)
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	mem, err := memory.New(b, memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := heartbeat.New(b, heartbeat.Config{ChecklistInMemory: true, Targets: []string{"console"}},
		heartbeat.WithClock(clk), heartbeat.WithBaseDir(dir), heartbeat.WithMemory(mem))
	if err != nil {
		t.Fatal(err)
	}
	m := scripted(t)
	startRunner(t, b, m, h, clk)
	s := watch(t, b)
	c := serveRoutes(t, h)

	got := c.do("GET", "")
	if v := got.view; got.status != 200 || v.Source != "memory" || v.Document != "checklist" || v.Text != checklistText || v.Revision != "" || v.Items != 1 ||
		got.header.Get("ETag") != "" || !strings.Contains(v.Detail, "will be filled from HEARTBEAT.md") {
		t.Fatalf("GET = %d %+v, want the file's text, to fill the document at the next run", got.status, got.view)
	}
	// The agent changes it meanwhile.
	if _, err := mem.Put(t.Context(), memory.Checklist, "- [ ] the agent's\n", "agent", nil); err != nil {
		t.Fatal(err)
	}
	got = c.do("PUT", "- [ ] mine\n", "If-None-Match", "*")
	if got.status != http.StatusPreconditionFailed || !strings.Contains(got.problem.Detail, "revision 1") {
		t.Errorf("PUT at a stale revision = %d %+v, want 412 naming revision 1", got.status, got.problem)
	}
	if d, _ := mem.Read(t.Context(), memory.Checklist); d.Text != "- [ ] the agent's\n" {
		t.Fatalf("the refused PUT changed the document: %q", d.Text)
	}
	if got := c.do("PUT", "- [ ] mine\n", "If-Match", "abc"); got.status != http.StatusBadRequest || !strings.Contains(got.problem.Detail, "ETag") {
		t.Errorf("PUT at a file's kind of revision = %d %+v, want 400", got.status, got.problem)
	}
	got = c.do("PUT", "- [ ] Check the mail queue\n", "If-Match", `"1"`)
	if got.status != 200 || got.view.Revision != "2" || got.view.Items != 1 || got.header.Get("ETag") != `"2"` {
		t.Fatalf("PUT at the right revision = %d %+v %+v", got.status, got.view, got.problem)
	}
	if d, _ := mem.Read(t.Context(), memory.Checklist); d.Text != "- [ ] Check the mail queue\n" || d.By != "http" {
		t.Errorf("the document after PUT = %q by %q", d.Text, d.By)
	}
	if p := wakeAndPrompt(t, h, s, m, 1); !strings.Contains(p, "Check the mail queue") || !strings.Contains(p, "revision 2") {
		t.Errorf("the next run's prompt lacks the new checklist:\n%s", p)
	}
	big := strings.Repeat("x", memory.MaxDoc+1)
	if got := c.do("PUT", big, "If-Match", `"2"`); got.status != http.StatusRequestEntityTooLarge {
		t.Errorf("PUT larger than a memory document = %d %+v, want 413", got.status, got.problem)
	}
}

// Behind the api server: the admin token's right, as pause and resume.
func TestChecklistHTTPAuth(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	h := newHeartbeat(t, b, heartbeat.Config{}, clock.NewFake(nextYear), dir)
	const admin = "admin-token-0123456789abcdef"
	srv := httptest.NewServer(api.New(api.Config{AdminToken: admin}, api.Deps{Bus: b, Routes: []api.Router{h}}).Handler())
	t.Cleanup(srv.Close)
	c := checklistAPI{t: t, url: srv.URL}
	if got := c.do("GET", ""); got.status != http.StatusUnauthorized {
		t.Errorf("GET without a token = %d, want 401", got.status)
	}
	c.token = "not-the-admin-token-0123456789"
	if got := c.do("PUT", "- [ ] x\n", "If-Match", "0000000000000000"); got.status != http.StatusUnauthorized {
		t.Errorf("PUT with another token = %d, want 401", got.status)
	}
	c.token = admin
	rev := c.do("GET", "").view.Revision
	if got := c.do("PUT", "- [ ] x\n", "If-Match", rev, api.ToolHeader, "1"); got.status != http.StatusForbidden {
		t.Errorf("PUT from a run's tool = %d, want 403", got.status)
	}
	if f := readFile(t, filepath.Join(dir, "HEARTBEAT.md")); f != checklistText {
		t.Fatalf("a refused PUT changed the file: %q", f)
	}
	if got := c.do("PUT", "- [ ] x\n", "If-Match", rev); got.status != 200 {
		t.Errorf("PUT with the admin token = %d %+v", got.status, got.problem)
	}
}

// A console session of a credential (console: write) may not change the
// checklist (the heartbeat runs it with the operator's tools and
// targets): 403, nothing written. The admin's session may; so may an MCP
// caller (its grant's kind jobs covers the checklist).
func TestChecklistHTTPConsoleCredential(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "HEARTBEAT.md")
	writeChecklist(t, dir, checklistText)
	h := newHeartbeat(t, b, heartbeat.Config{}, clock.NewFake(nextYear), dir)
	as := func(a api.Actor) checklistAPI {
		mux := http.NewServeMux()
		h.Routes(mux)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mux.ServeHTTP(w, r.WithContext(api.WithActor(r.Context(), a)))
		}))
		t.Cleanup(srv.Close)
		return checklistAPI{t: t, url: srv.URL}
	}
	cred := as(api.Actor{Via: "console", Name: "ops", Credential: "ops"})
	rev := cred.do("GET", "").view.Revision
	got := cred.do("PUT", "- [ ] x\n", "If-Match", rev)
	if got.status != http.StatusForbidden || !strings.Contains(got.problem.Detail, "only the admin") {
		t.Errorf("PUT from a credential's console session = %d %+v, want 403 saying only the admin", got.status, got.problem)
	}
	if f := readFile(t, path); f != checklistText {
		t.Fatalf("a refused PUT changed the file: %q", f)
	}
	got = as(api.Actor{Via: "console", Name: "admin"}).do("PUT", "- [ ] by the admin\n", "If-Match", rev)
	if got.status != 200 || readFile(t, path) != "- [ ] by the admin\n" {
		t.Fatalf("PUT from the admin's console session = %d %+v", got.status, got.problem)
	}
	got = as(api.Actor{Via: "mcp", Name: "ops", Credential: "ops"}).do("PUT", "- [ ] by mcp\n", "If-Match", got.view.Revision)
	if got.status != 200 || readFile(t, path) != "- [ ] by mcp\n" {
		t.Errorf("PUT through MCP = %d %+v, want 200 (its grant's kind jobs decides)", got.status, got.problem)
	}
}

// Reading a checklist in memory that was never written writes nothing:
// it shows the file's text, to be filled in at the next run, and no
// revision (a PUT creates it with If-None-Match: *). The next run fills
// it.
func TestChecklistReadDoesNotSeed(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	mem, err := memory.New(b, memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := heartbeat.New(b, heartbeat.Config{ChecklistInMemory: true}, heartbeat.WithBaseDir(dir), heartbeat.WithMemory(mem))
	if err != nil {
		t.Fatal(err)
	}
	v, err := h.Checklist(t.Context())
	if err != nil || v.Text != checklistText || v.Revision != "" || v.Items != 1 || v.Status != "" || !strings.Contains(v.Detail, "will be filled from HEARTBEAT.md at the next run") {
		t.Fatalf("Checklist() = %+v, %v; want the file's text, no revision, and that it will be filled at the next run", v, err)
	}
	if d, err := mem.Read(t.Context(), memory.Checklist); !errors.Is(err, memory.ErrNotFound) {
		t.Fatalf("a read wrote the document: %+v %v", d, err)
	}
	if _, name, _, _, err := h.ChecklistNow(t.Context()); err != nil || name != "HEARTBEAT.md in your memory, revision 1" {
		t.Errorf("the run's read = %q %v, want it filled at revision 1", name, err)
	}
}

// A file past the cap is read only to the cap: its revision is made of
// what was read, its size and time, so a write may still replace it. A
// symlink to /dev/zero or a FIFO is refused at once, never read to its
// end (or waited on).
func TestChecklistFileBounded(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	dir := t.TempDir()
	path := filepath.Join(dir, heartbeat.DefaultChecklist)
	h := newHeartbeat(t, b, heartbeat.Config{}, clock.NewFake(nextYear), dir)
	read := func() heartbeat.ChecklistView {
		t.Helper()
		got := make(chan heartbeat.ChecklistView, 1)
		go func() {
			v, _ := h.Checklist(t.Context())
			got <- v
		}()
		select {
		case v := <-got:
			return v
		case <-time.After(20 * time.Second):
			t.Fatal("reading the checklist hangs")
			return heartbeat.ChecklistView{}
		}
	}
	writeChecklist(t, dir, strings.Repeat("x", heartbeat.MaxChecklistBytes+1))
	v := read()
	if v.Status != "missing" || !hexRevision.MatchString(v.Revision) || !strings.Contains(v.Detail, "larger than") {
		t.Errorf("a file past the cap = %+v", v)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		if err := os.Symlink("/dev/zero", path); err != nil {
			t.Fatal(err)
		}
		if v := read(); v.Status != "missing" || v.Revision != "" || !strings.Contains(v.Detail, "not a regular file") {
			t.Errorf("a symlink to /dev/zero = %+v, want missing: not a regular file", v)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	if v := read(); v.Status != "missing" || !strings.Contains(v.Detail, "not a regular file") {
		t.Errorf("a FIFO = %+v, want missing: not a regular file", v)
	}
}
