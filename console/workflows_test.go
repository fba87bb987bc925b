package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/workflow"
)

// workflowFixture is a fixture whose server runs a workflow engine with
// the workflow "deploy" (two steps that wait an hour each).
func workflowFixture(t *testing.T) (*fixture, *workflow.Engine) {
	t.Helper()
	return workflowFixtureOf(t, deployWorkflow)
}

const deployWorkflow = `
deploy:
  description: ship <it>
  inputs:
    build: {type: string, required: true}
  steps:
    - id: a
      wait: 1h
    - id: b
      wait: 1h
`

// workflowFixtureOf is a fixture whose server runs a workflow engine with
// the workflows of src (YAML, as under workflows: in agentwork.yaml).
func workflowFixtureOf(t *testing.T, src string, opts ...func(*api.Deps)) (*fixture, *workflow.Engine) {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatal(err)
	}
	set, err := workflow.Decode(&n, "workflows")
	if err == nil {
		err = set.Validate(workflow.Options{})
	}
	if err != nil {
		t.Fatal(err)
	}
	var e *workflow.Engine
	f := newFixture(t, append([]func(*api.Deps){func(d *api.Deps) {
		e = workflow.NewEngine(d.Bus, workflow.Config{Definitions: set})
		d.Workflows = e
	}}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return f, e
}

// waitStatus waits until run id has status st, watching its record.
func waitStatus(t *testing.T, f *fixture, id string, st workflow.RunStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	w, err := f.b.WorkflowRuns.Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	last := "no record"
	for {
		select {
		case ent := <-w.Updates():
			if ent == nil {
				continue // the initial values are all delivered
			}
			var run workflow.Run
			if json.Unmarshal(ent.Value(), &run) == nil {
				if run.Status == st {
					return
				}
				last = string(run.Status)
			}
		case <-ctx.Done():
			t.Fatalf("run %s is %s, want %s", id, last, st)
		}
	}
}

// The workflows page lists the definitions and the runs; a run's page
// shows the step timeline; cancel and retry from a step go through the
// API; everything is escaped.
func TestWorkflowPages(t *testing.T) {
	t.Parallel()
	f, e := workflowFixture(t)
	viewer := f.browser(t).login(viewerToken)
	p := viewer.do("GET", "/workflows", nil)
	if p.status != 200 || !strings.Contains(p.body, `href="/workflows?workflow=deploy"`) || !strings.Contains(p.body, "ship &lt;it&gt;") || !strings.Contains(p.body, "No workflow runs yet") {
		t.Fatalf("GET /workflows = %d, want the definition and the empty runs list:\n%s", p.status, p.body)
	}

	run, _, err := e.Start(t.Context(), "deploy", map[string]any{"build": "<script>alert(1)</script>"}, workflow.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, f, run.ID, workflow.RunWaiting)
	p = viewer.do("GET", "/workflows?workflow=deploy", nil)
	if !strings.Contains(p.body, `href="/workflow-runs/`+run.ID+`"`) || !strings.Contains(p.body, "waiting") {
		t.Errorf("the runs list lacks the run:\n%s", p.body)
	}
	if p := viewer.do("GET", "/workflows?status=done", nil); strings.Contains(p.body, run.ID) || !strings.Contains(p.body, "No runs match") {
		t.Errorf("the status filter does not filter:\n%s", p.body)
	}
	p = viewer.do("GET", "/workflow-runs/"+run.ID, nil)
	for _, want := range []string{`id="step-a"`, `id="step-b"`, "&lt;script&gt;alert(1)&lt;/script&gt;"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the run's page lacks %q:\n%s", want, p.body)
		}
	}
	if strings.Contains(p.body, "<script>alert") || strings.Contains(p.body, "Cancel the run") {
		t.Errorf("the run's page is not escaped, or offers a read-only session to cancel:\n%s", p.body)
	}
	if got := viewer.do("POST", "/workflow-runs/"+run.ID+"/cancel", url.Values{"csrf": {viewer.csrf}}); got.status != http.StatusForbidden {
		t.Errorf("cancel, read-only = %d, want 403", got.status)
	}

	op := f.browser(t).login(opToken)
	if got := op.do("POST", "/workflow-runs/"+run.ID+"/cancel", url.Values{"reason": {"wrong build"}}); got.status != http.StatusForbidden {
		t.Errorf("cancel without the CSRF token = %d, want 403", got.status)
	}
	got := op.do("POST", "/workflow-runs/"+run.ID+"/cancel", url.Values{"csrf": {op.csrf}, "reason": {"wrong build"}})
	if got.status != http.StatusSeeOther || got.header.Get("Location") != "/workflow-runs/"+run.ID {
		t.Fatalf("cancel = %d to %q", got.status, got.header.Get("Location"))
	}
	waitStatus(t, f, run.ID, workflow.RunCancelled)
	p = op.do("GET", "/workflow-runs/"+run.ID, nil)
	if !strings.Contains(p.body, "Cancelling the run") || !strings.Contains(p.body, `action="/workflow-runs/`+run.ID+`/retry"`) {
		t.Errorf("the cancelled run's page lacks the outcome or the retry form:\n%s", p.body)
	}
	// A step it does not have: the API's answer is shown.
	op.do("POST", "/workflow-runs/"+run.ID+"/retry", url.Values{"csrf": {op.csrf}, "from": {"zz"}})
	if p := op.do("GET", "/workflow-runs/"+run.ID, nil); !strings.Contains(p.body, "Refused:") || !strings.Contains(p.body, "no top-level step") {
		t.Errorf("a refused retry is not shown:\n%s", p.body)
	}
	op.do("POST", "/workflow-runs/"+run.ID+"/retry", url.Values{"csrf": {op.csrf}, "from": {"a"}})
	if p := op.do("GET", "/workflow-runs/"+run.ID, nil); !strings.Contains(p.body, "Retrying the run from the step a.") {
		t.Fatalf("the retry is not confirmed:\n%s", p.body)
	}
	waitStatus(t, f, run.ID, workflow.RunWaiting)
	after, _ := e.Get(t.Context(), run.ID)
	if after.Gen != 1 || after.Steps["a"] == nil || after.Steps["a"].Status != workflow.StepWaiting {
		t.Errorf("after Retry from a: gen %d, steps %+v; want a waiting again", after.Gen, after.Steps)
	}
	if p := op.do("GET", "/workflow-runs/no-such-run", nil); p.status != http.StatusNotFound {
		t.Errorf("an unknown run = %d, want 404", p.status)
	}
}

// Without a workflow engine the page says how to add a workflow.
func TestWorkflowsOff(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if p := f.browser(t).login(viewerToken).do("GET", "/workflows", nil); p.status != 200 || !strings.Contains(p.body, "No workflows in this server") {
		t.Errorf("GET /workflows without workflows = %d:\n%s", p.status, p.body)
	}
}
