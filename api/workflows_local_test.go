package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/workflow"
)

// credentials finds the credentials of callers by name (api.Deps.Credentials).
func credentials(name string) (api.Caller, [sha256.Size]byte, bool) {
	tok := map[string]string{"ci": wfToken, "tasks": taskToken}[name]
	if tok == "" {
		return api.Caller{}, [sha256.Size]byte{}, false
	}
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	c, err := callers(r, nil)
	return c, sha256.Sum256([]byte(tok)), err == nil
}

// TestWorkflowStartLocal: the console starts a run through Local as its
// logged-in user (an Actor): the admin starts any workflow, a credential
// only those its grant allows and that have a webhook trigger, and its run
// acts for it (Cause.Credential: its grant holds the run's targets); an
// idempotency key starts one run.
func TestWorkflowStartLocal(t *testing.T) {
	t.Parallel()
	f, e := workflowFixtureEngine(t, credentials)
	start := func(a *api.Actor, name, body, key string) reply {
		ctx := context.Background()
		if a != nil {
			ctx = api.WithActor(ctx, *a)
		}
		req := httptest.NewRequestWithContext(ctx, "POST", "/v1/workflows/"+name+"/runs", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		f.s.Local().ServeHTTP(rec, req)
		return reply{rec.Code, rec.Header(), rec.Body.Bytes()}
	}
	id := func(r reply) (string, bool) {
		var acc struct {
			ID        string `json:"id"`
			Duplicate bool   `json:"duplicate"`
		}
		if r.status != http.StatusAccepted || json.Unmarshal(r.body, &acc) != nil || acc.ID == "" {
			t.Fatalf("start = %d %s, want 202 with an id", r.status, r.body)
		}
		return acc.ID, acc.Duplicate
	}
	admin := &api.Actor{Via: "console", Name: "admin"}
	ci := &api.Actor{Via: "console", Name: "ci", Credential: "ci"}

	// The admin: any workflow, a manual run.
	runID, dup := id(start(admin, "manual", "", "n1"))
	if dup {
		t.Error("the first start is a duplicate")
	}
	if again, dup := id(start(admin, "manual", "", "n1")); again != runID || !dup {
		t.Errorf("the same key again = %s (duplicate %v), want %s", again, dup, runID)
	}
	run, err := e.Get(t.Context(), runID)
	if err != nil || run.Cause.Kind != workflow.CauseManual || run.Cause.Credential != "" || run.Cause.ID != "n1" {
		t.Errorf("the admin's run: %+v %v", run.Cause, err)
	}
	if _, ok := id(start(nil, "manual", "", "")); ok {
		t.Error("a Local start without an actor (the admin's) is a duplicate")
	}

	// A credential: held to its grant, its run acts for it.
	ciRun, _ := id(start(ci, "deploy", `{"inputs":{"build":"b1"}}`, "n2"))
	run, err = e.Get(t.Context(), ciRun)
	if err != nil || run.Cause.Credential != "ci" || run.Cause.Kind != workflow.CauseManual || run.Inputs["build"] != "b1" {
		t.Errorf("the credential's run: cause %+v inputs %v %v", run.Cause, run.Inputs, err)
	}
	if again, dup := id(start(ci, "deploy", `{"inputs":{"build":"b1"}}`, "n2")); again != ciRun || !dup {
		t.Errorf("the credential's key again = %s, want %s", again, ciRun)
	}
	if r := start(ci, "manual", "", "n3"); r.status != 403 || !strings.Contains(r.problem(t).Detail, "no webhook trigger") {
		t.Errorf("a credential, a workflow without a webhook trigger = %d %s, want 403", r.status, r.body)
	}
	if r := start(&api.Actor{Via: "console", Name: "tasks", Credential: "tasks"}, "deploy", `{"inputs":{"build":"b1"}}`, "n4"); r.status != 403 || !strings.Contains(r.problem(t).Detail, "may not start") {
		t.Errorf("a credential not granted the workflow = %d %s, want 403", r.status, r.body)
	}
	if r := start(&api.Actor{Via: "console", Name: "gone", Credential: "gone"}, "deploy", `{"inputs":{"build":"b1"}}`, "n5"); r.status != 403 || !strings.Contains(r.problem(t).Detail, "no longer configured") {
		t.Errorf("a credential no longer configured = %d %s, want 403", r.status, r.body)
	}
	// Its inputs are checked as over HTTP: one error per field.
	r := start(ci, "deploy", `{"inputs":{"build":12,"x":1}}`, "n6")
	if d := r.problem(t); r.status != 400 || len(d.Errors) != 2 || d.Errors[0].Field != "inputs.build" || d.Errors[1].Field != "inputs.x" {
		t.Errorf("bad inputs = %d %s", r.status, r.body)
	}
}
