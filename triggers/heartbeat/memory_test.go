package heartbeat_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/tools/memory"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

// A checklist in memory: it needs the memory; a document never written is
// filled from the file once, after which the file is not read; without a
// file it skips no-checklist, and an empty document skips empty-checklist.
func TestChecklistInMemory(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	cfg := heartbeat.Config{ChecklistInMemory: true}
	if _, err := heartbeat.New(b, cfg); err == nil || !strings.Contains(err.Error(), "heartbeat.checklist_in_memory") {
		t.Errorf("New without memory = %v, want an error naming heartbeat.checklist_in_memory", err)
	}
	mem, err := memory.New(b, memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	h, err := heartbeat.New(b, cfg, heartbeat.WithBaseDir(dir), heartbeat.WithMemory(mem))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, status, detail, err := h.ChecklistNow(t.Context()); err != nil || status != "missing" || !strings.Contains(detail, "agentwork memory edit checklist") {
		t.Errorf("no document, no file: status %q %q %v, want missing with what to do", status, detail, err)
	}
	path := filepath.Join(dir, heartbeat.DefaultChecklist)
	if err := os.WriteFile(path, []byte("- [ ] check the disk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text, name, status, _, err := h.ChecklistNow(t.Context())
	if err != nil || status != "" || text != "- [ ] check the disk" || name != "HEARTBEAT.md in your memory, revision 1" {
		t.Errorf("filled from the file: %q %q %q %v", text, name, status, err)
	}
	if err := os.WriteFile(path, []byte("- [ ] the file changed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if text, _, _, _, _ := h.ChecklistNow(t.Context()); text != "- [ ] check the disk" {
		t.Errorf("after the file changed: %q, want the memory's checklist", text)
	}
	if _, err := mem.Put(t.Context(), memory.Checklist, "# Heartbeat\n", "test", nil); err != nil {
		t.Fatal(err)
	}
	if _, _, status, _, err := h.ChecklistNow(t.Context()); err != nil || status != "empty" {
		t.Errorf("empty document: status %q %v, want empty", status, err)
	}
}
