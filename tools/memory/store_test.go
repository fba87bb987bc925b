package memory_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/memory"
)

// day is the clock of the tests: 2026-03-14 10:30 UTC.
var day = time.Date(2026, 3, 14, 10, 30, 0, 0, time.UTC)

func newStore(t *testing.T, b *bus.Bus, cfg memory.Config) *memory.Store {
	t.Helper()
	if b == nil {
		b = bustest.New(t)
	}
	s, err := memory.New(b, cfg, memory.WithClock(func() time.Time { return day }))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestResolve(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, memory.Config{Timezone: "Pacific/Kiritimati"}) // UTC+14: already the 15th
	for _, tc := range []struct{ in, want string }{
		{"long", "long"}, {"MEMORY.md", "long"}, {"checklist", "checklist"}, {"HEARTBEAT.md", "checklist"},
		{"today", "daily.2026-03-15"}, {"yesterday", "daily.2026-03-14"},
		{"2026-01-02", "daily.2026-01-02"}, {"daily.2026-01-02", "daily.2026-01-02"}, {"memory/2026-01-02.md", "daily.2026-01-02"},
		{"2026-02-30", ""}, {"notes", ""}, {"", ""},
	} {
		got, err := s.Resolve(tc.in)
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		if err != nil && !errors.Is(err, memory.ErrInvalid) {
			t.Errorf("Resolve(%q) error %v is not ErrInvalid", tc.in, err)
		}
	}
}

func TestAppendAndRead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newStore(t, nil, memory.Config{})
	if _, err := s.Read(ctx, "today"); !errors.Is(err, memory.ErrNotFound) {
		t.Fatalf("Read(today) of an empty store: %v, want ErrNotFound", err)
	}
	if _, err := s.Append(ctx, "heartbeat/default, run r1", "The disk was 93% full."); err != nil {
		t.Fatal(err)
	}
	d, err := s.Append(ctx, "cron/report, run r2", "Sent the report.")
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Read(ctx, "today")
	if err != nil {
		t.Fatal(err)
	}
	want := "# 2026-03-14\n\n## 10:30:00 UTC · heartbeat/default, run r1\n\nThe disk was 93% full.\n\n## 10:30:00 UTC · cron/report, run r2\n\nSent the report.\n"
	if got.Text != want || got.Revision != d.Revision || got.File != "memory/2026-03-14.md" || got.By != "cron/report, run r2" {
		t.Errorf("Read(today) = %+v, want text %q at revision %d", got, want, d.Revision)
	}
	for _, tc := range []struct {
		text string
		want *memory.Error
	}{{"  ", memory.ErrInvalid}, {strings.Repeat("x", memory.MaxEntry+1), memory.ErrTooLarge}} {
		if _, err := s.Append(ctx, "x", tc.text); !errors.Is(err, tc.want) {
			t.Errorf("Append(%d bytes) = %v, want %s", len(tc.text), err, tc.want.Code)
		}
	}
}

func TestDailyLogFull(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newStore(t, nil, memory.Config{})
	entry := strings.Repeat("y", memory.MaxEntry-100)
	var err error
	for i := 0; i < 20 && err == nil; i++ {
		_, err = s.Append(ctx, "t", entry)
	}
	if !errors.Is(err, memory.ErrTooLarge) || !strings.Contains(err.Error(), "memory_replace") {
		t.Fatalf("appending past %d bytes: %v, want ErrTooLarge saying what to do", memory.MaxDoc, err)
	}
	d, _ := s.Read(ctx, "today")
	if d.Bytes > memory.MaxDoc {
		t.Errorf("today's log is %d bytes, more than %d", d.Bytes, memory.MaxDoc)
	}
}

// Concurrent appends from many runs all land: none is lost to another.
func TestConcurrentAppends(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := bustest.New(t)
	s1 := newStore(t, b, memory.Config{})
	s2 := newStore(t, bustest.Client(t, b), memory.Config{}) // another instance
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		s := s1
		if i%2 == 1 {
			s = s2
		}
		wg.Go(func() {
			_, err := s.Append(ctx, fmt.Sprintf("run %d", i), fmt.Sprintf("note %d", i))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	d, err := s1.Read(ctx, "today")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if !strings.Contains(d.Text, fmt.Sprintf("note %d\n", i)) {
			t.Errorf("note %d is missing from today's log:\n%s", i, d.Text)
		}
	}
}

func TestReplaceSection(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newStore(t, nil, memory.Config{})
	steps := []struct{ section, text, want string }{
		{"People", "- Ana runs ops.", "## People\n\n- Ana runs ops.\n"},
		{"Servers", "- db1 is the primary.", "## People\n\n- Ana runs ops.\n\n## Servers\n\n- db1 is the primary.\n"},
		{"## people", "- Ana runs ops.\n- Bo is on call.", "## People\n\n- Ana runs ops.\n- Bo is on call.\n\n## Servers\n\n- db1 is the primary.\n"},
		{"People", "", "## Servers\n\n- db1 is the primary.\n"},
	}
	for _, st := range steps {
		d, err := s.Replace(ctx, "me", st.section, st.text)
		if err != nil {
			t.Fatal(err)
		}
		if st.section == "## people" {
			st.want = strings.Replace(st.want, "## People", "## people", 1)
		}
		if d.Text != st.want {
			t.Errorf("Replace(%q, %q) = %q, want %q", st.section, st.text, d.Text, st.want)
		}
	}
	if _, err := s.Replace(ctx, "me", "a\nb", "x"); !errors.Is(err, memory.ErrInvalid) {
		t.Errorf("a title of two lines: %v, want ErrInvalid", err)
	}
	// A heading in the text would make sections the next replace misses.
	for _, text := range []string{"- x\n## Other\n- y", "# Title\n- y"} {
		if _, err := s.Replace(ctx, "me", "Servers", text); !errors.Is(err, memory.ErrInvalid) || !strings.Contains(err.Error(), "heading") {
			t.Errorf("Replace(text %q) = %v, want ErrInvalid about the heading", text, err)
		}
	}
	if d, err := s.Replace(ctx, "me", "Servers", "- db1\n### Notes\n- fine"); err != nil || !strings.Contains(d.Text, "### Notes") {
		t.Errorf("a ### heading in a section: %v, %q", err, d.Text)
	}
}

func TestPutCompareAndSet(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newStore(t, nil, memory.Config{})
	zero := uint64(0)
	d1, err := s.Put(ctx, "long", "# Facts\n", "edit", &zero)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "long", "again\n", "edit", &zero); !errors.Is(err, memory.ErrConflict) {
		t.Fatalf("a create of an existing document: %v, want ErrConflict", err)
	}
	d2, err := s.Put(ctx, "long", "# Facts\n\n- one\n", "edit", &d1.Revision)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Put(ctx, "long", "stale\n", "edit", &d1.Revision)
	if !errors.Is(err, memory.ErrConflict) || !strings.Contains(err.Error(), fmt.Sprintf("revision %d now", d2.Revision)) {
		t.Fatalf("a write at a stale revision: %v, want ErrConflict naming revision %d", err, d2.Revision)
	}
	if _, err := s.Put(ctx, "long", strings.Repeat("z", memory.MaxDoc+1), "edit", nil); !errors.Is(err, memory.ErrTooLarge) {
		t.Errorf("a document over %d bytes: %v, want ErrTooLarge", memory.MaxDoc, err)
	}
	h, err := s.History(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h[0].Text != "# Facts\n\n- one\n" || h[1].Text != "# Facts\n" {
		t.Errorf("History(long) = %+v, want the two revisions, newest first", h)
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "long" || list[0].Bytes != len("# Facts\n\n- one\n") || list[0].Text != "" {
		t.Errorf("List = %+v, want long without its text", list)
	}
}

// A daily log older than keep_days is refused (it would expire at once);
// one within is kept.
func TestDailyKeep(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newStore(t, nil, memory.Config{KeepDays: 2})
	if _, err := s.Put(ctx, "2026-03-12", "old\n", "import", nil); err != nil {
		t.Errorf("a log within keep_days: %v", err)
	}
	if _, err := s.Put(ctx, "2026-03-11", "older\n", "import", nil); !errors.Is(err, memory.ErrInvalid) {
		t.Errorf("a log past keep_days: %v, want ErrInvalid", err)
	}
}

func TestExportImport(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newStore(t, nil, memory.Config{})
	if _, err := s.Replace(ctx, "me", "People", "- Ana"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "me", "a note"); err != nil {
		t.Fatal(err)
	}
	docs, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range docs {
		d, err := s.Read(ctx, docs[i].Name)
		if err != nil {
			t.Fatal(err)
		}
		docs[i] = d
	}
	dir := t.TempDir()
	files, err := memory.Export(dir, docs)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(files, ",") != "memory/2026-03-14.md,MEMORY.md" {
		t.Errorf("Export wrote %v", files)
	}
	if err := os.WriteFile(filepath.Join(dir, "MEMORY.md"), []byte("## People\n\n- Ana\n- Bo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	read, err := memory.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	other := newStore(t, nil, memory.Config{})
	for _, d := range read {
		if _, err := other.Put(ctx, d.Name, d.Text, "import", nil); err != nil {
			t.Fatal(err)
		}
	}
	got, err := other.Read(ctx, "long")
	if err != nil || got.Text != "## People\n\n- Ana\n- Bo\n" {
		t.Errorf("imported long = %q, %v", got.Text, err)
	}
	if _, err := memory.ReadDir(t.TempDir()); err == nil {
		t.Error("ReadDir of an empty folder: no error")
	}
}

func TestPrompt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newStore(t, nil, memory.Config{})
	if p, err := s.Prompt(ctx, memory.LevelNone); p != "" || err != nil {
		t.Errorf("Prompt(none) = %q, %v", p, err)
	}
	if _, err := s.Put(ctx, "long", strings.Repeat("fact line\n", 2000), "me", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "me", "today's note"); err != nil {
		t.Fatal(err)
	}
	light, err := s.Prompt(ctx, memory.LevelLight)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(light, memory.PromptBegin) || !strings.Contains(light, "\n"+memory.PromptEnd) || strings.Contains(light, "today's note") {
		t.Errorf("Prompt(light) = %q, want long-term memory alone, delimited", light)
	}
	if !strings.Contains(light, `more bytes of MEMORY.md are not shown: memory_read with name "long"`) || len(light) > memory.PromptLong+1024 {
		t.Errorf("Prompt(light) of a long memory (%d bytes) does not say what it cut", len(light))
	}
	full, err := s.Prompt(ctx, memory.LevelFull)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(full, "today's note") || !strings.Contains(full, "Yesterday's log: memory/2026-03-13.md (empty)") {
		t.Errorf("Prompt(full) = %q, want today's note and an empty yesterday", full)
	}
	if _, err := s.Prompt(ctx, "all"); err == nil {
		t.Error("Prompt(all): no error")
	}
}

func TestTools(t *testing.T) {
	t.Parallel()
	ctx := tools.WithRun(t.Context(), tools.RunInfo{ID: "run-1", Source: "heartbeat", Name: "default"})
	const key = "sk-live-0123456789abcdef"
	s, err := memory.New(bustest.New(t), memory.Config{}, memory.WithClock(func() time.Time { return day }), memory.WithSecrets(key))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(s.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	call := func(name, args string) tools.Call {
		t.Helper()
		return reg.Call(ctx, "c", name, args)
	}
	if c := call(memory.ReadName, `{"name":"today"}`); c.Outcome != tools.OutcomeOK || !strings.Contains(c.Result, "is empty") {
		t.Errorf("memory_read of an empty log = %+v", c)
	}
	if c := call(memory.AppendName, `{"text":"checked the disk; the key is `+key+`"}`); c.Outcome != tools.OutcomeOK {
		t.Fatalf("memory_append = %+v", c)
	}
	if c := call(memory.ReplaceName, `{"section":"Servers","text":"- db1, token `+key+`"}`); c.Outcome != tools.OutcomeOK {
		t.Fatalf("memory_replace = %+v", c)
	}
	c := call(memory.ReadName, `{"name":"today"}`)
	if !strings.Contains(c.Result, "· heartbeat/default, run run-1\n\nchecked the disk") {
		t.Errorf("memory_read today = %q, want the note headed by its run", c.Result)
	}
	// A secret the model saw is not kept in memory.
	for _, name := range []string{"today", "long"} {
		if c := call(memory.ReadName, `{"name":"`+name+`"}`); strings.Contains(c.Result, key) || !strings.Contains(c.Result, "db1") && name == "long" {
			t.Errorf("memory_read %s = %q, want it without the secret", name, c.Result)
		}
	}
	if c := call(memory.ListName, `{}`); !strings.Contains(c.Result, "long\tMEMORY.md") || !strings.Contains(c.Result, "daily.2026-03-14") {
		t.Errorf("memory_list = %q", c.Result)
	}
	for _, args := range []struct{ tool, args string }{
		{memory.ReadName, `{"name":"notes"}`},
		{memory.AppendName, `{"text":""}`},
		{memory.AppendName, fmt.Sprintf(`{"text":%q}`, strings.Repeat("x", memory.MaxEntry+1))},
	} {
		if c := call(args.tool, args.args); c.Outcome == tools.OutcomeOK || c.Error == "" {
			t.Errorf("%s(%.40s) = %+v, want a tool error", args.tool, args.args, c)
		}
	}
}

// checklist_update replaces the checklist at the revision it read, keeping
// the previous one in the history; it refuses a checklist the heartbeat
// would skip as empty (blank, only a heading, a comment, an empty item or
// a rule) or one too large, and refuses to act while the heartbeat reads
// a file.
func TestChecklistTool(t *testing.T) {
	t.Parallel()
	ctx := tools.WithRun(t.Context(), tools.RunInfo{ID: "run-2", Source: "heartbeat", Name: "default"})
	b := bustest.New(t)
	call := func(s *memory.Store, args string) tools.Call {
		t.Helper()
		reg, err := tools.NewRegistry(s.Tools()...)
		if err != nil {
			t.Fatal(err)
		}
		return reg.Call(ctx, "c", memory.ChecklistName, args)
	}
	file := newStore(t, b, memory.Config{})
	if c := call(file, `{"text":"- [ ] check the disk"}`); c.Outcome == tools.OutcomeOK || !strings.Contains(c.Error, "from a file") {
		t.Errorf("checklist_update while the heartbeat reads a file = %+v, want a tool error", c)
	}
	s, err := memory.New(b, memory.Config{}, memory.WithHeartbeatChecklist(true))
	if err != nil {
		t.Fatal(err)
	}
	if c := call(s, `{"text":"- [ ] check the disk","revision":0}`); c.Outcome != tools.OutcomeOK || !strings.Contains(c.Result, "wrote the checklist") {
		t.Fatalf("first checklist_update = %+v", c)
	}
	if c := call(s, `{"text":"- [ ] check the backup","revision":1}`); c.Outcome != tools.OutcomeOK || !strings.Contains(c.Result, "revision 1 is kept") {
		t.Fatalf("second checklist_update = %+v", c)
	}
	for _, args := range []string{`{"text":" \n ","revision":2}`, `{"text":"# Checklist","revision":2}`, `{"text":"<!-- later -->","revision":2}`, `{"text":"- [ ]","revision":2}`, `{"text":"---","revision":2}`, fmt.Sprintf(`{"text":%q,"revision":2}`, strings.Repeat("- x\n", memory.MaxDoc/4+1))} {
		if c := call(s, args); c.Outcome == tools.OutcomeOK || c.Error == "" {
			t.Errorf("checklist_update(%.30s) = %+v, want a tool error", args, c)
		}
	}
	h, err := s.History(t.Context(), memory.Checklist)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h[0].Text != "- [ ] check the backup\n" || h[1].Text != "- [ ] check the disk\n" || h[0].By != "heartbeat/default, run run-2" {
		t.Errorf("history = %+v, want both revisions, newest first, by the run", h)
	}
}

// checklist_update compares and sets at the revision the model read, not
// at the one the tool finds: a person's edit made after the model's read
// is not overwritten, and the model is told to read it again; a model
// that says the checklist does not exist (revision 0) while it does is
// refused too.
func TestChecklistToolStaleRevision(t *testing.T) {
	t.Parallel()
	ctx := tools.WithRun(t.Context(), tools.RunInfo{ID: "run-3", Source: "heartbeat", Name: "default"})
	s, err := memory.New(bustest.New(t), memory.Config{}, memory.WithHeartbeatChecklist(true))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(s.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	read, err := s.Put(ctx, memory.Checklist, "- [ ] check the disk\n", "heartbeat: copied from HEARTBEAT.md", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The model read revision read.Revision; then a person edits it.
	edit, err := s.Put(ctx, memory.Checklist, "- [ ] check the disk\n- [ ] check the mail\n", "user", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, rev := range []uint64{read.Revision, 0} {
		c := reg.Call(ctx, "c", memory.ChecklistName, fmt.Sprintf(`{"text":"- [ ] check the backup","revision":%d}`, rev))
		if c.Outcome == tools.OutcomeOK || !strings.Contains(c.Error, "not changed") || !strings.Contains(c.Error, "memory_read checklist") ||
			!strings.Contains(c.Error, fmt.Sprintf("revision %d now", edit.Revision)) {
			t.Errorf("checklist_update at revision %d, after an edit to %d = %+v, want a tool error saying to read it again", rev, edit.Revision, c)
		}
	}
	if d, err := s.Read(ctx, memory.Checklist); err != nil || d.Revision != edit.Revision || d.By != "user" {
		t.Errorf("checklist = %+v, %v; want the person's edit kept", d, err)
	}
	c := reg.Call(ctx, "c", memory.ChecklistName, fmt.Sprintf(`{"text":"- [ ] check the backup","revision":%d}`, edit.Revision))
	if c.Outcome != tools.OutcomeOK {
		t.Errorf("checklist_update at the revision read again = %+v", c)
	}
}
