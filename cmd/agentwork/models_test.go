package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model/openai/openaifake"
	"github.com/agentwork/agentwork/triggers/cron"
)

// TestModelsPerSourceAndFallback is issue 12's acceptance for per-job
// models, end to end with the real serve and the OpenAI-compatible fake:
// the heartbeat runs on its cheap model and a cron job on its strong one
// (the fake's log shows the model of each call); when the strong model
// answers 503, the job's fallback model, on another server, answers that
// call at once, its answer is delivered and the done event names it. The
// cron API refuses a job that names no model.
func TestModelsPerSourceAndFallback(t *testing.T) {
	if testing.Short() {
		t.Skip("runs serve")
	}
	primary, backup := openaifake.New(t), openaifake.New(t)
	backup.SetKey("sk-backup-0123456789")
	t.Setenv("OPENAI_KEY", openaifake.DefaultKey)
	t.Setenv("BACKUP_KEY", "sk-backup-0123456789")
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	if err := os.WriteFile(filepath.Join(dir, "HEARTBEAT.md"), []byte("- Anything on fire?\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, fmt.Sprintf(`
bus:
  listen: 127.0.0.1:0
http:
  listen: "off"
model:
  provider: openai
  base_url: %[1]s
  model: gpt-fake
  api_key: ${OPENAI_KEY}
models:
  cheap:
    provider: openai
    base_url: %[1]s
    model: cheap-1
    api_key: ${OPENAI_KEY}
  strong:
    provider: openai
    base_url: %[1]s
    model: strong-1
    api_key: ${OPENAI_KEY}
  backup:
    provider: openai
    base_url: %[2]s
    model: backup-1
    api_key: ${BACKUP_KEY}
runner:
  max_attempts: 1
heartbeat:
  model: cheap
  output_mode: ok_token
cron:
  jobs:
    - id: report
      schedule: "0 0 1 1 *"
      prompt: Sum up the week.
      deliver: reply
      model: strong
      fallback: [backup]
`, primary.URL, backup.URL))
	stdout, _ := startServe(t, cfg, dataDir)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	b, err := bus.Dial(ctx, bus.Config{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cli := func(args ...string) (string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := run(ctx, append(args, "--data-dir", dataDir), &out, &errOut)
		return out.String() + errOut.String(), err
	}

	// The heartbeat: the cheap model.
	primary.Enqueue(openaifake.Text("HEARTBEAT_OK"))
	out, err := cli("heartbeat", "wake", "--json")
	var woke struct{ ID string }
	if err != nil || json.Unmarshal([]byte(out), &woke) != nil {
		t.Fatalf("heartbeat wake: %v\n%s", err, out)
	}
	if _, hb := runEvent(t, ctx, b, bus.SourceHeartbeat, woke.ID); hb.Model != "cheap-1" {
		t.Errorf("heartbeat event = %s by %q (%s), want cheap-1's", hb.Outcome, hb.Model, hb.Error)
	}

	// The job: the strong model.
	primary.Enqueue(openaifake.Text("Sales rose 4%."))
	rr := cronRun(t, cli, "report")
	if _, job := runEvent(t, ctx, b, bus.SourceCron, rr.RequestID); job.Outcome != bus.OutcomeDone || job.Model != "strong-1" {
		t.Errorf("job event = %s by %q (%s), want done by strong-1", job.Outcome, job.Model, job.Error)
	}
	stdout.waitContains(t, "Sales rose 4%.", 20*time.Second)

	// The strong model is overloaded: backup answers that call.
	primary.Enqueue(openaifake.Error(http.StatusServiceUnavailable, "The engine is currently overloaded"))
	backup.Enqueue(openaifake.Text("Sales fell 2%."))
	rr = cronRun(t, cli, "report")
	_, job := runEvent(t, ctx, b, bus.SourceCron, rr.RequestID)
	if job.Outcome != bus.OutcomeDone || job.Model != "backup-1" || job.Reply != "Sales fell 2%." {
		t.Errorf("job event after a 503 = %s %q by %q (%s), want done with backup-1's answer", job.Outcome, job.Reply, job.Model, job.Error)
	}
	stdout.waitContains(t, "Sales fell 2%.", 20*time.Second)

	var models []string
	for _, r := range primary.Requests() {
		models = append(models, r.Model)
	}
	if got := strings.Join(models, ","); got != "cheap-1,strong-1,strong-1" {
		t.Errorf("the main server was asked for %s, want cheap-1 (heartbeat), strong-1 (job), strong-1 (job, 503)", got)
	}
	if got := backup.Requests(); len(got) != 1 || got[0].Model != "backup-1" {
		t.Errorf("the backup server saw %d requests, want one for backup-1", len(got))
	}

	// The cron API checks the models a job names; cron show shows them.
	if out, err := cli("cron", "add", "adhoc", "--schedule", "@daily", "--prompt", "x", "--model", "strong", "--fallback", "strnog"); err == nil ||
		!strings.Contains(out+err.Error(), `fallback[0]: "strnog": no such model (models: backup, cheap, default, strong)`) {
		t.Errorf("cron add (unknown fallback model) = %v:\n%s\nwant a refusal naming the field and the models", err, out)
	}
	if out, err := cli("cron", "show", "report"); err != nil || !regexpMatch(`model:\s+strong\n`, out) || !regexpMatch(`fallback:\s+backup\n`, out) {
		t.Errorf("cron show report = %v:\n%s\nwant its model and fallback", err, out)
	}
}

// cronRun runs job id now through the CLI.
func cronRun(t *testing.T, cli func(...string) (string, error), id string) cron.RunResult {
	t.Helper()
	out, err := cli("cron", "run", id, "--json")
	var rr cron.RunResult
	if err != nil || json.Unmarshal([]byte(out), &rr) != nil || rr.RequestID == "" {
		t.Fatalf("cron run %s: %v\n%s", id, err, out)
	}
	return rr
}
