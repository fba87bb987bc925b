package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/triggers/heartbeat"
)

// `agentwork heartbeat checklist` prints where the checklist lives, its
// revision, items and text, and says why a run would skip it.
func TestHeartbeatChecklistCommand(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	startServe(t, writeConfig(t, dir, testConfig), dataDir)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cli := cliOf(ctx, t, dataDir)
	if out := cli("heartbeat", "checklist"); !strings.Contains(out, "revision:   none (it does not exist)") || !strings.Contains(out, "status:     missing: ") {
		t.Errorf("heartbeat checklist without a file printed:\n%s", out)
	}
	path := filepath.Join(dir, "HEARTBEAT.md")
	if err := os.WriteFile(path, []byte("# Heartbeat\n- [ ] Check the backups\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := cli("heartbeat", "checklist")
	if !strings.Contains(out, "checklist:  file "+path) || !strings.Contains(out, "items:      1") || !strings.HasSuffix(out, "\n# Heartbeat\n- [ ] Check the backups\n") || strings.Contains(out, "status:") {
		t.Errorf("heartbeat checklist printed:\n%s", out)
	}
	var v heartbeat.ChecklistView
	if err := json.Unmarshal([]byte(cli("heartbeat", "checklist", "--json")), &v); err != nil || v.Source != "file" || len(v.Revision) != 16 || v.Items != 1 {
		t.Errorf("heartbeat checklist --json = %+v, %v", v, err)
	}
}
