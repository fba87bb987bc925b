package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const wfToken = "ci-workflow-token-0123456789"

// workflowConfig is the quick start's shape plus a workflow of a tool step
// (exec of a script that appends a line to a file), an agent step (the
// script model) and a notify step to the console connector.
func workflowConfig(dir, addr string) string {
	return `
bus:
  listen: 127.0.0.1:0
http:
  listen: ` + addr + `
model:
  script:
    rules:
      - match: {source: step}
        text: '{"commit": "abc123", "confidence": 0.9}'
      - match: {source: task}
        text: "Done: {{prompt}}"
tools:
  exec:
    allow:
      - [` + filepath.Join(dir, "append.sh") + `]
webhook:
  tokens:
    - name: ci
      token: ` + wfToken + `
      sources: [workflow]
      names: [ship]
workflows:
  ship:
    description: Log a build, find its commit, tell the team
    inputs:
      build: {type: string, required: true}
      count: {type: integer, default: 1}
    on:
      - webhook: {}
    targets: [console]
    steps:
      - id: log
        tool: exec
        args: {argv: ["` + filepath.Join(dir, "append.sh") + `", "build ${{ inputs.build }} x${{ inputs.count }}"]}
      - id: analyse
        agent:
          prompt: "Which commit broke build ${{ inputs.build }}? Log: ${{ steps.log.output }}"
          output: {type: object, properties: {commit: {type: string}, confidence: {type: number}}, required: [commit]}
      - id: tell
        if: steps.analyse.output.confidence > 0.5
        notify: {text: "Build ${{ inputs.build }} broke at ${{ steps.analyse.output.commit }}", targets: [console]}
`
}

func TestWorkflowCommands(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	script := "#!/bin/sh\nprintf '%s\\n' \"$1\" >> \"$(dirname \"$0\")/lines.txt\"\necho \"appended $1\"\n"
	if err := os.WriteFile(filepath.Join(dir, "append.sh"), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cfg := writeConfig(t, dir, workflowConfig(dir, addr))
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"config", "check", "--config", cfg}, &out, &errOut); err != nil {
		t.Fatalf("config check: %v", err)
	}
	consoleOut, stop := startServe(t, cfg, dataDir)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cli := cliOf(ctx, t, dataDir)

	if got := cli("workflow", "list"); !strings.Contains(got, "ship") || !strings.Contains(got, "webhook") || !strings.Contains(got, "build (string, required)") {
		t.Errorf("workflow list printed %q", got)
	}
	if got := cli("workflow", "show", "ship"); !strings.Contains(got, "analyse") || !strings.Contains(got, "agent") {
		t.Errorf("workflow show printed %q", got)
	}

	// run --wait: the timeline, done.
	got := cli("workflow", "run", "ship", "--input", "build=b7", "--input", "count=2", "--wait")
	for _, want := range []string{"done", "log", "tool", "appended build b7 x2", "analyse", `"commit":"abc123"`, "tell", "notify"} {
		if !strings.Contains(got, want) {
			t.Errorf("workflow run --wait printed\n%s\nlacking %q", got, want)
		}
	}
	consoleOut.waitContains(t, "Build b7 broke at abc123", 20*time.Second)
	if raw, _ := os.ReadFile(filepath.Join(dir, "lines.txt")); string(raw) != "build b7 x2\n" {
		t.Errorf("lines.txt = %q, want the one line of the run", raw)
	}
	id := strings.Fields(strings.TrimPrefix(strings.SplitN(got, "\n", 2)[0], "run "))[0]
	if got := cli("workflow", "status", id); !strings.Contains(got, "appended build b7 x2") || !strings.Contains(got, "abc123") {
		t.Errorf("workflow status printed %q, want the steps' outputs", got)
	}
	if got := cli("workflow", "runs", "ship"); !strings.Contains(got, id) || !strings.Contains(got, "done") {
		t.Errorf("workflow runs printed %q", got)
	}

	// Bad inputs: the field, before anything starts.
	err := run(ctx, []string{"workflow", "run", "ship", "--input", "count=many", "--data-dir", dataDir}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--input count") {
		t.Errorf("--input count=many = %v", err)
	}
	err = run(ctx, []string{"workflow", "run", "ship", "--data-dir", dataDir}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "inputs.build: required") {
		t.Errorf("a run without build = %v, want the field", err)
	}
	// A done run cannot be retried.
	err = run(ctx, []string{"workflow", "retry", id, "--data-dir", dataDir}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "only a failed, cancelled or timed-out run") {
		t.Errorf("retry of a done run = %v", err)
	}

	// POST with the webhook credential, twice with one Idempotency-Key:
	// one run.
	post := func() string {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/workflows/ship/runs", strings.NewReader(`{"inputs":{"build":"b8"}}`))
		req.Header.Set("Authorization", "Bearer "+wfToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "deploy-8")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var acc struct{ ID string }
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(body, &acc) != nil || acc.ID == "" {
			t.Fatalf("POST /v1/workflows/ship/runs = %d %s", resp.StatusCode, body)
		}
		return acc.ID
	}
	first := post()
	if again := post(); again != first {
		t.Errorf("the same Idempotency-Key started run %s, then %s", first, again)
	}
	if got := cli("workflow", "status", first, "--wait"); !strings.Contains(got, ": done") || !strings.Contains(got, "appended build b8 x1") {
		t.Errorf("workflow status --wait printed %q", got)
	}
	if raw, _ := os.ReadFile(filepath.Join(dir, "lines.txt")); string(raw) != "build b7 x2\nbuild b8 x1\n" {
		t.Errorf("lines.txt = %q, want one line per run", raw)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// config check refuses bad definitions, each at its file:line, in the
// config file and in workflows_dir.
func TestConfigCheckWorkflows(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "flows"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "flows", "a.yaml"), []byte("steps:\n  - id: x\n    workflow: b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := writeConfig(t, dir, `workflows_dir: flows
workflows:
  b:
    steps:
      - id: y
        workflow: a
  bad:
    steps:
      - id: one
        bogus: {}
      - id: two
        notify: {text: "${{ steps.three.output }}"}
      - id: three
        notify: {text: "${{ inputs. }}"}
`)
	err := run(t.Context(), []string{"config", "check", "--config", p}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil {
		t.Fatal("config check accepted bad workflows")
	}
	for _, want := range []string{
		p + `:10: workflow bad: unknown key "workflows.bad.steps[0].bogus"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("config check:\n%v\nlacks %q", err, want)
		}
	}
	// Without the unknown key, the rest: a later step, a template that
	// does not parse, a cycle of child workflows across the file and the
	// directory.
	raw, _ := os.ReadFile(p)
	if err := os.WriteFile(p, bytes.Replace(raw, []byte("bogus: {}"), []byte("wait: 1s"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	err = run(t.Context(), []string{"config", "check", "--config", p}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil {
		t.Fatal("config check accepted bad workflows")
	}
	for _, want := range []string{
		p + ":12: workflow bad: step two: workflows.bad.steps[1].notify.text:",
		p + ":14: workflow bad: step three: workflows.bad.steps[2].notify.text:",
		p + ":6: workflow b: step y: workflows.b.steps[0].workflow: child workflows form a cycle",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("config check:\n%v\nlacks %q", err, want)
		}
	}
}
