package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/openai/openaifake"
	"github.com/agentwork/agentwork/workflow"
)

// The acceptance tests of workflows (issue 18) with the real binary: the
// OpenAI-compatible fake answers the agent steps, an allow-listed exec
// script appends a line to a file for each side effect, the console
// connector prints the notifications.

// appendScript writes dir/append.sh: it appends its argument as a line to
// dir/lines.txt and says so.
func appendScript(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "append.sh")
	script := "#!/bin/sh\nprintf '%s\\n' \"$1\" >> \"$(dirname \"$0\")/lines.txt\"\necho \"appended $1\"\n"
	if err := os.WriteFile(p, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

// lines returns the lines of dir/lines.txt.
func lines(t *testing.T, dir string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "lines.txt"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
}

// wfCLI runs `agentwork workflow ...` against the server of dataDir and
// returns what it printed and its error.
func wfCLI(ctx context.Context, dataDir string, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	err := run(ctx, append(append([]string{"workflow"}, args...), "--data-dir", dataDir), &out, &errOut)
	if err != nil {
		err = fmt.Errorf("agentwork workflow %s: %w\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), err
}

// runsOf returns the runs of workflow name, as `workflow runs --json` gives them.
func runsOf(ctx context.Context, t *testing.T, dataDir, name string) []workflow.Run {
	t.Helper()
	out, err := wfCLI(ctx, dataDir, "runs", name, "--limit", "1000", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var runs []workflow.Run
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		t.Fatalf("workflow runs --json: %v\n%s", err, out)
	}
	return runs
}

// waitRun follows run id to its end with `workflow status --wait --json`
// and returns it as it ended, and the text `workflow status` prints of it.
func waitRun(ctx context.Context, t *testing.T, dataDir, id string) (workflow.Run, string) {
	t.Helper()
	out, err := wfCLI(ctx, dataDir, "status", id, "--wait", "--json", "--timeout", "60s")
	var r workflow.Run
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
		t.Fatalf("workflow status %s --wait --json: %v (%v)\n%s", id, jerr, err, out)
	}
	text, err := wfCLI(ctx, dataDir, "status", id)
	if err != nil {
		t.Fatal(err)
	}
	return r, text
}

// exampleConfig is the example workflow: a build log fetched over
// HTTP, the model finding the commit (an output schema), a wait, a revert
// under a condition (exec, a line in lines.txt), a step whose condition is
// false, a notification per team to the console, and a child run that
// opens an incident (exec, a line); started by webhook, cron (every
// second) and an agentwork.cron.error event of the job nightly-tests.
func exampleConfig(dir, addr, ciURL, strongURL, defaultURL string) string {
	script := filepath.Join(dir, "append.sh")
	return fmt.Sprintf(`
bus:
  listen: 127.0.0.1:0
http:
  listen: %[1]s
model:
  provider: openai
  base_url: %[5]s
  model: gpt-fake
  api_key: ${OPENAI_KEY}
models:
  strong:
    provider: openai
    base_url: %[4]s
    model: strong-1
    api_key: ${OPENAI_KEY}
runner:
  max_attempts: 1
tools:
  http_fetch:
    allow:
      - prefix: %[3]s/builds/
        allow_loopback: true
  exec:
    allow:
      - [%[2]s]
webhook:
  tokens:
    - name: ci
      token: %[6]s
      sources: [workflow]
      names: [revert-broken-build]
cron:
  jobs:
    - id: nightly-tests
      schedule: "0 0 1 1 *"
      prompt: Run the nightly tests.
workflows:
  revert-broken-build:
    description: Find the commit that broke a build, revert it, tell the teams
    inputs:
      build: {type: string, default: b42}
      teams: {type: array, default: [ops, web]}
    on:
      - webhook: {}
      - cron: {schedule: "* * * * * *"}
      - event: {type: agentwork.cron.error, subject: nightly-tests}
    timeout: 2m
    targets: [console]
    steps:
      - id: log
        tool: http_fetch
        args: {url: "%[3]s/builds/${{ inputs.build }}/log"}
      - id: analyse
        agent:
          prompt: "Which commit broke build ${{ inputs.build }}? Log: ${{ steps.log.output }}"
          output: {type: object, properties: {commit: {type: string}, confidence: {type: number}}, required: [commit]}
          tools: [notify_user]
          model: strong
      - id: wait-a-bit
        wait: 1s
      - id: revert
        if: steps.analyse.output.confidence > 0.7
        tool: exec
        args: {argv: ["%[2]s", "revert ${{ steps.analyse.output.commit }} ${{ run.id }}"]}
        retry: {attempts: 3, backoff: 1s}
        timeout: 30s
      - id: page
        if: steps.analyse.output.confidence > 0.95
        notify: {text: "Paging about ${{ inputs.build }}", targets: [console]}
      - id: each-team
        foreach: inputs.teams
        concurrency: 2
        notify: {text: "Reverted ${{ steps.analyse.output.commit }} of ${{ run.id }} for ${{ item }}", targets: [console]}
      - id: followup
        workflow: open-incident
        with: {commit: "${{ steps.analyse.output.commit }}", parent: "${{ run.id }}"}
        on_failure: continue
  open-incident:
    inputs:
      commit: {type: string, required: true}
      parent: {type: string, required: true}
    steps:
      - id: open
        tool: exec
        args: {argv: ["%[2]s", "incident ${{ inputs.commit }} ${{ inputs.parent }}"]}
`, addr, script, ciURL, strongURL, defaultURL, wfToken)
}

// TestWorkflowExampleByWebhookCronAndEvent runs the example with
// the real serve: a run started by POST with a webhook credential, runs
// started by a per-second cron trigger, and a run started by the
// agentwork.cron.error event of a cron job whose model call fails (400).
// Each ends done with every step's output in `workflow status`; each side
// effect is in the file once per run.
func TestWorkflowExampleByWebhookCronAndEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs serve for several runs")
	}
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	appendScript(t, dir)
	ci := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "build log of %s: test TestPay failed after commit abc123\n", r.URL.Path)
	}))
	t.Cleanup(ci.Close)
	strong := openaifake.New(t)
	failing := openaifake.New(t)
	t.Setenv("OPENAI_KEY", openaifake.DefaultKey)
	// The model answers every analyse step alike; the runs are few (a
	// per-second cron trigger paused after its first run).
	for range 40 {
		strong.Enqueue(openaifake.Response{
			Check: func(r openaifake.Request) error {
				if p := lastUser(r); !strings.Contains(p, "Which commit broke build") || !strings.Contains(p, "TestPay failed") {
					return fmt.Errorf("the analyse prompt lacks the build or its log: %q", p)
				}
				return nil
			},
			Reply: model.Reply{Text: `{"commit": "abc123", "confidence": 0.9}`},
		})
	}
	// The cron job's model call fails for good.
	failing.Enqueue(openaifake.Error(http.StatusBadRequest, "Invalid value for 'model'."))

	addr := freeAddr(t)
	cfg := writeConfig(t, dir, exampleConfig(dir, addr, ci.URL, strong.URL, failing.URL))
	if err := run(t.Context(), []string{"config", "check", "--config", cfg}, io.Discard, io.Discard); err != nil {
		t.Fatalf("config check: %v", err)
	}
	consoleOut, stop := startServe(t, cfg, dataDir)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cli := cliOf(ctx, t, dataDir)
	const name = "revert-broken-build"

	// By cron: the trigger's job ticks every second; once a run it started
	// has ended, pause the job and let the runs in flight end.
	var cronRuns []workflow.Run
	waitFor(t, 60*time.Second, "a run started by cron to end", func() bool {
		for _, r := range runsOf(ctx, t, dataDir, name) {
			if r.Cause.Kind == workflow.CauseCron && r.Status.Ended() {
				return true
			}
		}
		return false
	}, &child{stderr: consoleOut})
	cli("cron", "pause", "wf-"+name+"-1")
	waitFor(t, 60*time.Second, "the cron runs to end", func() bool {
		cronRuns = cronRuns[:0]
		for _, r := range runsOf(ctx, t, dataDir, name) {
			if r.Cause.Kind != workflow.CauseCron {
				continue
			}
			if !r.Status.Ended() {
				return false
			}
			cronRuns = append(cronRuns, r)
		}
		return true
	}, &child{stderr: consoleOut})

	// By webhook: POST with the credential.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/workflows/"+name+"/runs", strings.NewReader(`{"inputs":{"build":"b7"}}`))
	req.Header.Set("Authorization", "Bearer "+wfToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var acc struct{ ID string }
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(body, &acc) != nil || acc.ID == "" {
		t.Fatalf("POST /v1/workflows/%s/runs = %d %s", name, resp.StatusCode, body)
	}

	// By event: the cron job nightly-tests fails (the model answers 400),
	// its agentwork.cron.error event starts a run.
	cli("cron", "run", "nightly-tests")
	var byEvent workflow.Run
	waitFor(t, 60*time.Second, "a run started by the cron job's error event", func() bool {
		for _, r := range runsOf(ctx, t, dataDir, name) {
			if r.Cause.Kind == workflow.CauseEvent {
				byEvent = r
				return true
			}
		}
		return false
	}, &child{stderr: consoleOut})

	check := func(id, cause string) workflow.Run {
		t.Helper()
		r, text := waitRun(ctx, t, dataDir, id)
		if r.Status != workflow.RunDone {
			t.Fatalf("run %s (%s) ended %s: %+v\n%s", id, cause, r.Status, r.Error, text)
		}
		for _, want := range []string{
			"log ", "HTTP 200 OK",
			"analyse", `{"commit":"abc123","confidence":0.9}`,
			"wait-a-bit", "waited_until",
			"revert", "appended revert abc123 " + id,
			"page", "skipped", "condition: false",
			"each-team", "2 items: 2 done",
			"followup", "appended incident abc123 " + id,
		} {
			if !strings.Contains(text, want) {
				t.Errorf("workflow status of the run by %s lacks %q:\n%s", cause, want, text)
			}
		}
		if r.Cause.Kind != cause {
			t.Errorf("run %s: cause %q, want %q", id, r.Cause.Kind, cause)
		}
		if st := r.Steps["page"]; st == nil || st.Status != workflow.StepSkipped || st.Condition != false {
			t.Errorf("step page = %+v, want skipped with the condition's value false", st)
		}
		for _, team := range []string{"ops", "web"} {
			consoleOut.waitContains(t, "Reverted abc123 of "+id+" for "+team, 20*time.Second)
		}
		return r
	}
	all := []workflow.Run{check(acc.ID, workflow.CauseWebhook), check(byEvent.ID, workflow.CauseEvent)}
	if len(cronRuns) == 0 {
		t.Fatal("no run by cron")
	}
	for _, r := range cronRuns {
		all = append(all, check(r.ID, workflow.CauseCron))
	}
	if ev := byEvent.Event; ev == nil || ev["type"] != "agentwork.cron.error" || ev["subject"] != "nightly-tests" {
		t.Errorf("the event run's event = %v, want agentwork.cron.error of nightly-tests", ev)
	}

	// Each run's side effects once: its revert and its child's incident.
	got := lines(t, dir)
	for _, r := range all {
		for _, want := range []string{"revert abc123 " + r.ID, "incident abc123 " + r.ID} {
			if n := count(got, want); n != 1 {
				t.Errorf("lines.txt holds %q %d times, want once", want, n)
			}
		}
	}
	if len(got) != 2*len(all) {
		t.Errorf("lines.txt holds %d lines, want 2 for each of the %d runs:\n%s", len(got), len(all), strings.Join(got, "\n"))
	}
	t.Logf("%d runs: %d by cron, 1 by webhook, 1 by event", len(all), len(cronRuns))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// lastUser is the text of the last user message of a model request.
func lastUser(r openaifake.Request) string {
	msgs := r.Conversation.Messages
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == model.RoleUser {
			return msgs[i].Content
		}
	}
	return ""
}

// sixConfig is a workflow of six exec steps, each appending "<n> s<k>" to
// lines.txt (not idempotent): a step whose call was in flight at a crash
// is recorded interrupted and, with on_failure: continue, the run goes on.
func sixConfig(dir, bus string) string {
	var steps strings.Builder
	for k := 1; k <= 6; k++ {
		fmt.Fprintf(&steps, "      - {id: s%d, tool: exec, args: {argv: [%q, \"${{ inputs.n }} s%d\"]}, on_failure: continue}\n", k, filepath.Join(dir, "append.sh"), k)
	}
	return bus + `
http:
  listen: "off"
runner:
  ack_wait: 2s
tools:
  exec:
    allow:
      - [` + filepath.Join(dir, "append.sh") + `]
workflows:
  six:
    inputs:
      n: {type: string, required: true}
    steps:
` + steps.String()
}

// checkSix checks the runs of six ended done and the file holds each
// step's line at most once per run, exactly once for a step recorded done.
func checkSix(t *testing.T, dir string, runs map[string]workflow.Run) {
	t.Helper()
	got := lines(t, dir)
	interrupted := 0
	for n, r := range runs {
		if r.Status != workflow.RunDone {
			t.Errorf("run %s ended %s (%+v), want done", n, r.Status, r.Error)
		}
		for k := 1; k <= 6; k++ {
			id := fmt.Sprintf("s%d", k)
			st, c := r.Steps[id], count(got, n+" "+id)
			switch {
			case st == nil:
				t.Errorf("run %s: step %s has no state", n, id)
			case c > 1:
				t.Errorf("run %s: the line of %s is in the file %d times, want at most once", n, id, c)
			case st.Status == workflow.StepDone && c != 1:
				t.Errorf("run %s: step %s is done but its line is in the file %d times", n, id, c)
			case st.Status == workflow.StepInterrupted:
				interrupted++
			case st.Status != workflow.StepDone:
				t.Errorf("run %s: step %s ended %s (%+v), want done or interrupted", n, id, st.Status, st.Error)
			}
		}
	}
	t.Logf("%d runs done, %d lines, %d steps recorded interrupted", len(runs), len(got), interrupted)
}

// killer is a set of serve processes that a test kills with SIGKILL and
// starts again.
type killer struct {
	t       *testing.T
	servers []*child
	start   func(i int) *child
	// runs lists the runs of six (from a client of the servers now up).
	runs func() ([]workflow.Run, error)
}

func (k *killer) kill9(i int) {
	k.t.Helper()
	if err := k.servers[i].cmd.Process.Kill(); err != nil {
		k.t.Fatal(err)
	}
	_ = k.servers[i].cmd.Wait()
	k.servers[i] = k.start(i)
}

// startSix starts 20 runs of six through the server's NATS service, then
// kills a random server with SIGKILL three times, each after a random
// number of side effects, and starts it again; it waits for every run to
// end and checks them (checkSix).
func startSix(ctx context.Context, t *testing.T, dir string, b *bus.Bus, k *killer) {
	t.Helper()
	c := workflow.NewClient(b)
	defer b.Close()
	const runs = 20
	for i := range runs {
		if _, err := c.Start(ctx, "six", map[string]any{"n": fmt.Sprintf("r%d", i)}, fmt.Sprintf("r%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	kills := 0
	for range 3 {
		target := len(lines(t, dir)) + 2 + rand.IntN(15)
		if target >= runs*6 {
			break
		}
		i := rand.IntN(len(k.servers))
		// A step interrupted by an earlier kill writes no line (its run
		// goes on past it), so the lines may stop short of target: the
		// wait also ends when every run has.
		ended := false
		waitFor(t, 30*time.Second, fmt.Sprintf("%d lines or every run to end", target), func() bool {
			if len(lines(t, dir)) >= target {
				return true
			}
			all, err := k.runs()
			if err != nil || len(all) < runs {
				return false
			}
			for _, r := range all {
				if !r.Status.Ended() {
					return false
				}
			}
			ended = true
			return true
		}, k.servers[i])
		if ended {
			break
		}
		k.kill9(i)
		kills++
	}
	final := map[string]workflow.Run{}
	// The runs in flight at a kill go on within the ack wait (2 s).
	waitFor(t, 20*time.Second, "every run to end", func() bool {
		all, err := k.runs()
		if err != nil {
			return false
		}
		for _, r := range all {
			if !r.Status.Ended() {
				return false
			}
			final[r.Inputs["n"].(string)] = r
		}
		return len(all) == runs
	}, k.servers[0])
	t.Logf("killed %d times", kills)
	checkSix(t, dir, final)
}

// TestWorkflowKilledAtRandomFinishesEveryRun kills serve with SIGKILL at
// random instants (after a random number of side effects) during 20 runs
// of a 6-step workflow, restarting it on the same data dir each time:
// every run ends done, and no step's side effect happens twice.
func TestWorkflowKilledAtRandomFinishesEveryRun(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts serve")
	}
	dir := t.TempDir()
	appendScript(t, dir)
	srv := startCrashServer(t, sixConfig(dir, "bus:\n  listen: 127.0.0.1:0\n"))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	k := &killer{t: t, servers: []*child{srv.child}, start: func(int) *child {
		srv.restart()
		return srv.child
	}, runs: func() ([]workflow.Run, error) {
		b := srv.dial(ctx)
		defer b.Close()
		return workflow.NewClient(b).Runs(ctx, workflow.Filter{Workflow: "six", Limit: 1000})
	}}
	srv.stderr.waitContains(t, "agentwork is running", 30*time.Second)
	startSix(ctx, t, dir, srv.dial(ctx), k)
}

// TestWorkflowTwoInstancesKilledAtRandom is the same with two serve
// processes on one external NATS server: the one killed is started again
// while the other takes its runs over.
func TestWorkflowTwoInstancesKilledAtRandom(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts serve")
	}
	url := bustest.ExternalServer(t, 0)
	dir := t.TempDir()
	appendScript(t, dir)
	cfg := writeConfig(t, dir, sixConfig(dir, "bus:\n  url: "+url+"\n"))
	start := func(i int) *child {
		c := &child{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
		args := []string{"serve", "--config", cfg, "--data-dir", filepath.Join(dir, fmt.Sprintf("data%d", i))}
		c.cmd = exec.Command(os.Args[0], "-test.run=^$")
		c.cmd.Env = append(os.Environ(), childEnv+"=1", childEnv+"_ARGS="+strings.Join(args, " "))
		c.cmd.Stdout, c.cmd.Stderr = c.stdout, c.stderr
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() })
		c.stderr.waitContains(t, "agentwork is running", 30*time.Second)
		return c
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	k := &killer{t: t, servers: []*child{start(0), start(1)}, start: start, runs: func() ([]workflow.Run, error) {
		return workflow.NewClient(b).Runs(ctx, workflow.Filter{Workflow: "six", Limit: 1000})
	}}
	startSix(ctx, t, dir, b, k)
}

// TestWorkflowWaitAcrossAStop stops serve (SIGTERM) while a run waits on a
// `wait: 5s` step and keeps it stopped past the deadline: after the
// restart the step ends once, the run goes on to its next step and ends
// done, and nothing is left waiting.
func TestWorkflowWaitAcrossAStop(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and restarts serve")
	}
	dir := t.TempDir()
	script := appendScript(t, dir)
	srv := startCrashServer(t, `
bus:
  listen: 127.0.0.1:0
http:
  listen: "off"
tools:
  exec:
    allow:
      - [`+script+`]
workflows:
  pause:
    steps:
      - {id: before, tool: exec, args: {argv: [`+script+`, "before ${{ run.id }}"]}}
      - {id: nap, wait: 5s}
      - {id: after, tool: exec, args: {argv: [`+script+`, "after ${{ run.id }}"]}}
`)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	srv.stderr.waitContains(t, "agentwork is running", 30*time.Second)
	b := srv.dial(ctx)
	c := workflow.NewClient(b)
	started, err := c.Start(ctx, "pause", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	var waiting workflow.Run
	waitFor(t, 20*time.Second, "the run to wait", func() bool {
		waiting, err = c.Get(ctx, started.ID)
		return err == nil && waiting.Status == workflow.RunWaiting
	}, srv.child)
	b.Close()
	until := waiting.Steps["nap"].WaitUntil
	if until.IsZero() || len(waiting.Timers) != 1 {
		t.Fatalf("the waiting run: nap %+v, timers %v; want a wait until a time and one timer", waiting.Steps["nap"], waiting.Timers)
	}

	// Stop it cleanly, and keep it stopped past the wait's deadline.
	stopped := srv.child
	if err := stopped.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := stopped.cmd.Wait(); err != nil {
		t.Fatalf("serve exited with %v after SIGTERM\n%s", err, stopped.stderr.String())
	}
	time.Sleep(time.Until(until) + 500*time.Millisecond) // the downtime under test: the deadline passes while nothing runs
	if got := lines(t, dir); !slices.Equal(got, []string{"before " + started.ID}) {
		t.Fatalf("lines.txt while stopped = %q, want only the step before the wait", got)
	}

	srv.restart()
	srv.stderr.waitContains(t, "agentwork is running", 30*time.Second)
	r, text := waitRun(ctx, t, srv.dataDir, started.ID)
	if r.Status != workflow.RunDone {
		t.Fatalf("run ended %s (%+v)\n%s", r.Status, r.Error, text)
	}
	nap := r.Steps["nap"]
	if nap.Status != workflow.StepDone || nap.EndedAt.Before(until) {
		t.Errorf("step nap = %s ended %s, want done after %s", nap.Status, nap.EndedAt, until)
	}
	if got := lines(t, dir); !slices.Equal(got, []string{"before " + started.ID, "after " + started.ID}) {
		t.Errorf("lines.txt = %q, want each step's line once", got)
	}
	if len(r.Timers) != 0 {
		t.Errorf("timers left on the ended run: %v", r.Timers)
	}
	if out, err := wfCLI(ctx, srv.dataDir, "runs", "--status", "waiting"); err != nil || strings.Contains(out, started.ID) {
		t.Errorf("workflow runs --status waiting = %q, %v; want the run not there", out, err)
	}
	// The wait's step ended once: one step_finished event of nap.
	b2 := srv.dial(ctx)
	defer b2.Close()
	oc, err := b2.JetStream().OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{b2.Subjects.Event(bus.SourceWorkflow, "*")}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := oc.FetchNoWait(1000)
	if err != nil {
		t.Fatal(err)
	}
	finished := 0
	for m := range batch.Messages() {
		ev, err := bus.DecodeEvent(m.Data())
		var d struct{ Step string }
		if err == nil && ev.RunID == started.ID && ev.Type == "agentwork.workflow.step_finished" && ev.DecodeData(&d) == nil && d.Step == "nap" {
			finished++
		}
	}
	if finished != 1 {
		t.Errorf("%d step_finished events of nap, want 1", finished)
	}
}

// TestWorkflowForeachCapAndSkip runs a foreach of 50 items with
// concurrency 5 whose exec script counts the items in flight under a lock
// (flock): never more than 5. A step whose condition is false after it is
// skipped, with the condition's value in its status.
func TestWorkflowForeachCapAndSkip(t *testing.T) {
	if testing.Short() {
		t.Skip("runs serve")
	}
	dir := t.TempDir()
	track := filepath.Join(dir, "track.sh")
	script := `#!/bin/sh
d=$(dirname "$0")
exec 9>"$d/lock"
flock 9
n=$(cat "$d/inflight" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$d/inflight"
m=$(cat "$d/max" 2>/dev/null || echo 0); if [ $n -gt $m ]; then echo $n > "$d/max"; fi
flock -u 9
sleep 0.1
flock 9
n=$(cat "$d/inflight"); echo $((n-1)) > "$d/inflight"
echo "$1" >> "$d/items"
flock -u 9
echo "item $1"
`
	if err := os.WriteFile(track, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, `
bus:
  listen: 127.0.0.1:0
http:
  listen: "off"
tools:
  exec:
    allow:
      - [`+track+`]
workflows:
  fan:
    steps:
      - id: many
        foreach: 1..50
        concurrency: 5
        tool: exec
        args: {argv: [`+track+`, "i${{ item }}"]}
      - id: big
        if: len(steps.many.output) > 50
        tool: exec
        args: {argv: [`+track+`, "never"]}
`)
	dataDir := filepath.Join(dir, "data")
	startServe(t, cfg, dataDir)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := wfCLI(ctx, dataDir, "run", "fan", "--wait")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"50 items: 50 done", "big", "skipped", "condition: false"} {
		if !strings.Contains(out, want) {
			t.Errorf("workflow run --wait printed\n%s\nlacking %q", out, want)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "items"))
	if err != nil {
		t.Fatal(err)
	}
	items := strings.Fields(string(raw))
	slices.Sort(items)
	items = slices.Compact(items)
	if len(items) != 50 || slices.Contains(items, "never") {
		t.Errorf("the script ran for %d distinct items (%v), want 50 and not the skipped step", len(items), items)
	}
	rawMax, err := os.ReadFile(filepath.Join(dir, "max"))
	if err != nil {
		t.Fatal(err)
	}
	peak, _ := strconv.Atoi(strings.TrimSpace(string(rawMax)))
	if peak < 1 || peak > 5 {
		t.Errorf("at most %d items were in flight at once, want 1 to 5 (concurrency: 5)", peak)
	}
	t.Logf("peak items in flight: %d", peak)
}
