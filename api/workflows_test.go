package api_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"path"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/workflow"
)

const wfToken = "wf-token-0123456789abcdef"

// callers is a CallerAuth as the webhook's is: wfToken may start the
// workflow deploy, taskToken only tasks.
func callers(r *http.Request, _ []byte) (api.Caller, error) {
	grant := func(sources, names []string) func(kind, name string) bool {
		return func(kind, name string) bool {
			ok := func(ps []string, s string) bool {
				for _, p := range ps {
					if m, _ := path.Match(p, s); m {
						return true
					}
				}
				return false
			}
			return ok(sources, kind) && ok(names, name)
		}
	}
	switch r.Header.Get("Authorization") {
	case "Bearer " + wfToken:
		return api.Caller{Name: "ci", Allows: grant([]string{"workflow"}, []string{"deploy", "manual"})}, nil
	case "Bearer " + taskToken:
		return api.Caller{Name: "tasks", Allows: grant([]string{"task"}, []string{"*"})}, nil
	}
	return api.Caller{}, errors.New("the bearer token is not valid")
}

func workflowFixture(t *testing.T) *fixture {
	t.Helper()
	f, _ := workflowFixtureEngine(t)
	return f
}

// workflowFixtureEngine is workflowFixture and its engine.
func workflowFixtureEngine(t *testing.T, named ...api.CredentialLookup) (*fixture, *workflow.Engine) {
	t.Helper()
	var n yaml.Node
	src := `
deploy:
  description: ship it
  inputs:
    build: {type: string, required: true}
    n: {type: integer, default: 1}
  on: [{webhook: {}}]
  steps:
    - id: a
      wait: 1h
    - id: b
      wait: 1h
manual:
  steps:
    - id: a
      wait: 1h
`
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
	f := newFixture(t, func(_ *api.Config, d *api.Deps) {
		e = workflow.NewEngine(d.Bus, workflow.Config{Definitions: set})
		d.Workflows, d.Callers = e, callers
		if len(named) > 0 {
			d.Credentials = named[0]
		}
	})
	return f, e
}

func TestWorkflowRoutes(t *testing.T) {
	t.Parallel()
	f := workflowFixture(t)

	// The admin routes: 401 without the admin token or with a webhook
	// credential.
	for _, p := range []string{"GET /v1/workflows", "GET /v1/workflows/deploy", "GET /v1/workflow-runs", "GET /v1/workflow-runs/x", "POST /v1/workflow-runs/x/cancel", "POST /v1/workflow-runs/x/retry"} {
		method, u, _ := strings.Cut(p, " ")
		for _, tok := range []string{"", "wrong-token-0123456789", wfToken} {
			if r := f.do(t, method, u, tok, ""); r.status != http.StatusUnauthorized {
				t.Errorf("%s with token %q = %d %s, want 401", p, tok, r.status, r.body)
			}
		}
	}

	r := f.do(t, "GET", "/v1/workflows", adminToken, "")
	var list []workflow.Summary
	if err := json.Unmarshal(r.body, &list); err != nil || r.status != 200 || len(list) != 2 || list[0].Name != "deploy" || list[0].Steps != 2 ||
		list[0].Description != "ship it" || len(list[0].Triggers) != 1 || list[0].Triggers[0] != "webhook" || list[0].Inputs["build"].Type != "string" {
		t.Fatalf("GET /v1/workflows = %d %s", r.status, r.body)
	}
	if r := f.do(t, "GET", "/v1/workflows/deploy", adminToken, ""); r.status != 200 || !strings.Contains(string(r.body), `"steps"`) {
		t.Fatalf("GET /v1/workflows/deploy = %d %s", r.status, r.body)
	}
	if r := f.do(t, "GET", "/v1/workflows/nope", adminToken, ""); r.status != 404 || r.problem(t).Code != "not_found" {
		t.Fatalf("GET /v1/workflows/nope = %d %s", r.status, r.body)
	}

	// Start: auth first.
	start := func(name, tok, body string, hdr ...string) reply {
		return f.do(t, "POST", "/v1/workflows/"+name+"/runs", tok, body, hdr...)
	}
	if r := start("deploy", "", `{"inputs":{"build":"b1"}}`); r.status != 401 {
		t.Errorf("no credentials = %d %s", r.status, r.body)
	}
	if r := start("deploy", "wrong-token-0123456789", `{"inputs":{"build":"b1"}}`); r.status != 401 || !strings.Contains(r.problem(t).Detail, "not valid") {
		t.Errorf("wrong token = %d %s", r.status, r.body)
	}
	if r := start("deploy", taskToken, `{"inputs":{"build":"b1"}}`); r.status != 403 {
		t.Errorf("a task-only credential = %d %s, want 403", r.status, r.body)
	}
	if r := start("nope", taskToken, `{}`); r.status != 403 {
		t.Errorf("a task-only credential, unknown workflow = %d %s, want 403 (it learns nothing)", r.status, r.body)
	}
	if r := start("manual", wfToken, `{}`); r.status != 403 || !strings.Contains(r.problem(t).Detail, "no webhook trigger") {
		t.Errorf("a workflow without a webhook trigger = %d %s, want 403", r.status, r.body)
	}
	if r := start("nope", adminToken, `{}`); r.status != 404 {
		t.Errorf("unknown workflow = %d %s, want 404", r.status, r.body)
	}
	// Bad inputs: 400 naming the field.
	r = start("deploy", wfToken, `{"inputs":{"build":12,"x":1}}`)
	if r.status != 400 {
		t.Fatalf("bad inputs = %d %s", r.status, r.body)
	}
	if d := r.problem(t); len(d.Errors) != 2 || d.Errors[0].Field != "inputs.build" || d.Errors[1].Field != "inputs.x" {
		t.Errorf("bad inputs: errors %+v", d.Errors)
	}
	if r := start("deploy", wfToken, `{"inputz":{}}`); r.status != 400 {
		t.Errorf("unknown body field = %d %s", r.status, r.body)
	}
	if r := start("deploy", wfToken, `{"inputs":{"build":"b1"}}`, "Content-Type", "text/plain"); r.status != 415 {
		t.Errorf("text/plain = %d %s", r.status, r.body)
	}

	// Started once per idempotency key (Idempotency-Key or webhook-id).
	r = start("deploy", wfToken, `{"inputs":{"build":"b1","n":2}}`, "Idempotency-Key", "k1")
	var acc struct {
		ID        string `json:"id"`
		Duplicate bool   `json:"duplicate"`
	}
	if err := json.Unmarshal(r.body, &acc); err != nil || r.status != 202 || acc.ID == "" || acc.Duplicate || r.header.Get("Location") != "/v1/workflow-runs/"+acc.ID {
		t.Fatalf("start = %d %s", r.status, r.body)
	}
	first := acc.ID
	r = start("deploy", wfToken, `{"inputs":{"build":"b1","n":2}}`, "Idempotency-Key", "k1")
	if err := json.Unmarshal(r.body, &acc); err != nil || r.status != 202 || acc.ID != first || !acc.Duplicate {
		t.Fatalf("start again = %d %s, want the same run %s", r.status, r.body, first)
	}
	if r := start("deploy", wfToken, `{"inputs":{"build":"b2"}}`, "Idempotency-Key", "k1"); r.status != 422 {
		t.Errorf("the key with other inputs = %d %s, want 422", r.status, r.body)
	}
	r = start("deploy", wfToken, `{"inputs":{"build":"b3"}}`, "webhook-id", "msg_1")
	_ = json.Unmarshal(r.body, &acc)
	second := acc.ID
	if r := start("deploy", wfToken, `{"inputs":{"build":"b3"}}`, "webhook-id", "msg_1"); !strings.Contains(string(r.body), second) {
		t.Errorf("webhook-id again = %d %s, want run %s", r.status, r.body, second)
	}
	// The admin's keys are not the credential's: the same key is another run.
	if r := start("deploy", adminToken, `{"inputs":{"build":"b3"}}`, "webhook-id", "msg_1"); r.status != 202 || strings.Contains(string(r.body), second) {
		t.Errorf("the credential's webhook-id sent by the admin = %d %s, want a run other than %s", r.status, r.body, second)
	}

	// Runs.
	r = f.do(t, "GET", "/v1/workflow-runs/"+first, adminToken, "")
	var run workflow.Run
	if err := json.Unmarshal(r.body, &run); err != nil || r.status != 200 || run.Workflow != "deploy" || run.Inputs["n"] != 2.0 || run.Cause.Kind != workflow.CauseWebhook {
		t.Fatalf("GET run = %d %s", r.status, r.body)
	}
	r = f.do(t, "GET", "/v1/workflow-runs?workflow=deploy&limit=10", adminToken, "")
	var runs []workflow.Run
	if err := json.Unmarshal(r.body, &runs); err != nil || len(runs) != 3 {
		t.Fatalf("GET runs = %d %s", r.status, r.body)
	}
	for _, q := range []string{"status=nope", "limit=0", "limit=x"} {
		if r := f.do(t, "GET", "/v1/workflow-runs?"+q, adminToken, ""); r.status != 400 {
			t.Errorf("GET runs?%s = %d %s, want 400", q, r.status, r.body)
		}
	}
	if r := f.do(t, "GET", "/v1/workflow-runs?workflow=manual", adminToken, ""); r.status != 200 || strings.TrimSpace(string(r.body)) != "[]" {
		t.Errorf("GET runs of manual = %d %s, want []", r.status, r.body)
	}
	for _, p := range []string{"GET /v1/workflow-runs/nope", "POST /v1/workflow-runs/nope/cancel", "POST /v1/workflow-runs/nope/retry", "GET /v1/workflow-runs/BAD%20ID"} {
		method, u, _ := strings.Cut(p, " ")
		if r := f.do(t, method, u, adminToken, ""); r.status != 404 {
			t.Errorf("%s = %d %s, want 404", p, r.status, r.body)
		}
	}
	// A pending run cannot be retried; from must be a top-level step.
	if r := f.do(t, "POST", "/v1/workflow-runs/"+first+"/retry", adminToken, `{"from":"zz"}`); r.status != 400 || !strings.Contains(r.problem(t).Detail, `no top-level step "zz"`) {
		t.Errorf("retry from zz = %d %s, want 400", r.status, r.body)
	}
	if r := f.do(t, "POST", "/v1/workflow-runs/"+first+"/retry", adminToken, `{"from":"a"}`); r.status != 409 {
		t.Errorf("retry of a pending run = %d %s, want 409", r.status, r.body)
	}
	if r := f.do(t, "POST", "/v1/workflow-runs/"+first+"/retry", adminToken, `{"frm":"a"}`); r.status != 400 {
		t.Errorf("retry with an unknown field = %d %s, want 400", r.status, r.body)
	}
	if r := f.do(t, "POST", "/v1/workflow-runs/"+first+"/cancel", adminToken, `{"reason":"test"}`); r.status != 202 {
		t.Errorf("cancel = %d %s", r.status, r.body)
	}
}

// TestWorkflowKeyCannotSquatTrigger: a credential that sends the
// idempotency key of a cron tick (predictable: <job>:<tick>) or of an
// event trigger gets a run of its own; the tick's run is still the tick's.
func TestWorkflowKeyCannotSquatTrigger(t *testing.T) {
	t.Parallel()
	f, engine := workflowFixtureEngine(t)
	for _, c := range []struct {
		key   string
		cause workflow.Cause
	}{
		{"wf-deploy-0:2026-06-01T09:00:00Z", workflow.Cause{Kind: workflow.CauseCron, ID: "wf-deploy-0@2026-06-01T09:00:00Z"}},
		{"wf-deploy-0.ev1", workflow.Cause{Kind: workflow.CauseEvent, ID: "ev1"}},
		{"k-admin", workflow.Cause{Kind: workflow.CauseManual, ID: "k-admin"}},
	} {
		r := f.do(t, "POST", "/v1/workflows/deploy/runs", wfToken, `{"inputs":{"build":"evil"}}`, "Idempotency-Key", c.key)
		var acc struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(r.body, &acc); err != nil || r.status != 202 {
			t.Fatalf("start with key %q = %d %s", c.key, r.status, r.body)
		}
		run, created, err := engine.Start(t.Context(), "deploy", map[string]any{"build": "b1"}, workflow.StartOptions{IdempotencyKey: c.key, Cause: c.cause})
		if err != nil || !created || run.ID == acc.ID || run.Inputs["build"] != "b1" {
			t.Errorf("Start(%s, key %q) after a credential sent the key = run %s (created %v, inputs %v), %v; want a new run, not the credential's %s",
				c.cause.Kind, c.key, run.ID, created, run.Inputs, err, acc.ID)
		}
		again, created, err := engine.Start(t.Context(), "deploy", map[string]any{"build": "b1"}, workflow.StartOptions{IdempotencyKey: c.key, Cause: c.cause})
		if err != nil || created || again.ID != run.ID {
			t.Errorf("Start(%s, key %q) again = %s, %v, %v; want run %s, not created", c.cause.Kind, c.key, again.ID, created, err, run.ID)
		}
	}
}
