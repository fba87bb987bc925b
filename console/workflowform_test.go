package console_test

import (
	"crypto/sha256"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/workflow"
)

const runWorkflows = `
deploy:
  description: ship <it>
  inputs:
    build: {type: string, required: true, description: "the build to <ship>"}
    count: {type: integer, default: 2}
    dry: {type: boolean, default: true}
    tags: {type: array}
    meta: {type: object}
  on: [{webhook: {}}]
  steps:
    - id: a
      wait: 1h
quick:
  steps:
    - id: a
      wait: 1h
`

// shipToken logs in to the console with write, and may start workflows.
const shipToken = "ship-token-0123456789abcdef"

// runFixture serves runWorkflows; shipToken is the credential "ship",
// granted console write and every workflow; the operator's credential
// "oper" has no workflow in its grant.
func runFixture(t *testing.T) (*fixture, *workflow.Engine) {
	t.Helper()
	ship := api.Caller{Name: "ship", Allows: func(k, n string) bool {
		return k == api.KindConsole || k == "workflow"
	}}
	oper := api.Caller{Name: "oper", Allows: func(k, _ string) bool { return k == api.KindConsole }}
	return workflowFixtureOf(t, runWorkflows, func(d *api.Deps) {
		d.Callers = func(r *http.Request, body []byte) (api.Caller, error) {
			if r.Header.Get("Authorization") == "Bearer "+shipToken {
				return ship, nil
			}
			return callers(r, body)
		}
		d.Credentials = func(name string) (api.Caller, [sha256.Size]byte, bool) {
			switch name {
			case "ship":
				return ship, sha256.Sum256([]byte(shipToken)), true
			case "oper":
				_, sum, ok := credentials(name)
				return oper, sum, ok
			}
			return credentials(name)
		}
	})
}

var nonceField = regexp.MustCompile(`name="nonce" value="([^"]+)"`)

// runsOf is the runs of workflow name.
func runsOf(t *testing.T, e *workflow.Engine, name string) []workflow.Run {
	t.Helper()
	runs, err := e.List(t.Context(), workflow.Filter{Workflow: name})
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// A workflow's page has a run form with a typed field per input; it
// starts a run through the API as the user; the API's errors show under
// their fields with what was typed kept; the form's nonce starts one run
// however often it is sent; a read-only session has no form and is
// refused.
func TestWorkflowRunForm(t *testing.T) {
	t.Parallel()
	f, e := runFixture(t)

	viewer := f.browser(t).login(viewerToken)
	p := viewer.do("GET", "/workflows/deploy", nil)
	if p.status != 200 || strings.Contains(p.body, `id="run-form"`) || !strings.Contains(p.body, "<code>build</code>") || !strings.Contains(p.body, "the build to &lt;ship&gt;") {
		t.Fatalf("GET /workflows/deploy, read-only = %d, want the inputs and no form:\n%s", p.status, p.body)
	}
	if p := viewer.do("GET", "/workflows", nil); strings.Contains(p.body, `id="run-quick"`) || strings.Contains(p.body, "/run\"") {
		t.Errorf("the workflows page offers a read-only session to run:\n%s", p.body)
	}
	if got := viewer.do("POST", "/workflows/quick/run", url.Values{"csrf": {viewer.csrf}, "nonce": {strings.Repeat("n", 20)}}); got.status != http.StatusForbidden {
		t.Errorf("a read-only run = %d, want 403", got.status)
	}

	admin := f.browser(t).login(adminToken)
	p = admin.do("GET", "/workflows/deploy", nil)
	for _, want := range []string{`id="run-form"`, `name="in.build" value=""`, `name="in.count" value="2"`, `inputmode="numeric"`, `name="in.dry" value="true" checked`,
		`<textarea id="in-tags" name="in.tags"`, `<textarea id="in-meta" name="in.meta"`, "string, required", "integer, default <code>2</code>", `id="step-graph"`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the run form lacks %q:\n%s", want, p.body)
		}
	}
	m := nonceField.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("the run form has no nonce:\n%s", p.body)
	}
	nonce := m[1]
	if got := admin.do("POST", "/workflows/deploy/run", url.Values{"csrf": {admin.csrf}, "in.build": {"b1"}}); got.status != http.StatusBadRequest || !strings.Contains(got.body, "no valid nonce") {
		t.Errorf("a run without a nonce = %d:\n%s", got.status, got.body)
	}

	// Refused: each error under its field, what was typed kept.
	bad := url.Values{"csrf": {admin.csrf}, "nonce": {nonce}, "in.build": {""}, "in.count": {"many <b>"}, "in.tags": {"x\ny"}, "in.bogus": {"1"}}
	got := admin.do("POST", "/workflows/deploy/run", bad)
	if got.status != http.StatusBadRequest {
		t.Fatalf("bad inputs = %d, want 400:\n%s", got.status, got.body)
	}
	for _, want := range []string{`<span class="error-text" id="e-build">required; give it a value</span>`, `id="e-count">want an integer`, `value="many &lt;b&gt;"`,
		`aria-describedby="e-count"`, "x\ny</textarea>", `id="run-other">Refused: inputs.bogus: no such input`, `name="nonce" value="` + nonce + `"`} {
		if !strings.Contains(got.body, want) {
			t.Errorf("the refused form lacks %q:\n%s", want, got.body)
		}
	}
	if runs := runsOf(t, e, "deploy"); len(runs) != 0 {
		t.Fatalf("a refused form started %d runs", len(runs))
	}

	// Fixed: one run, however often the form is sent.
	good := url.Values{"csrf": {admin.csrf}, "nonce": {nonce}, "in.build": {"b1"}, "in.count": {"3"}, "in.tags": {"x\r\n\r\n y \r\n"}, "in.meta": {`{"k": 1}`}}
	got = admin.do("POST", "/workflows/deploy/run", good)
	loc := got.header.Get("Location")
	if got.status != http.StatusSeeOther || !strings.HasPrefix(loc, "/workflow-runs/") {
		t.Fatalf("start = %d to %q:\n%s", got.status, loc, got.body)
	}
	id := strings.TrimPrefix(loc, "/workflow-runs/")
	if p := admin.do("GET", loc, nil); !strings.Contains(p.body, "Started run "+id+" of deploy.") {
		t.Errorf("the run's page lacks the flash:\n%s", p.body)
	}
	again := admin.do("POST", "/workflows/deploy/run", good)
	if again.status != http.StatusSeeOther || again.header.Get("Location") != loc {
		t.Errorf("the same form again = %d to %q, want %s", again.status, again.header.Get("Location"), loc)
	}
	if p := admin.do("GET", loc, nil); !strings.Contains(p.body, "already started run "+id) {
		t.Errorf("the second send is not said to be the same run:\n%s", p.body)
	}
	runs := runsOf(t, e, "deploy")
	if len(runs) != 1 || runs[0].ID != id {
		t.Fatalf("after sending the form twice: %d runs, want 1 (%s)", len(runs), id)
	}
	in := runs[0].Inputs
	tags, _ := in["tags"].([]any)
	meta, _ := in["meta"].(map[string]any)
	if in["build"] != "b1" || in["count"] != 3.0 || in["dry"] != false || len(tags) != 2 || tags[0] != "x" || tags[1] != "y" || meta["k"] != 1.0 || runs[0].Cause.Kind != workflow.CauseManual || runs[0].Cause.Credential != "" {
		t.Errorf("the run's inputs %v, cause %+v", in, runs[0].Cause)
	}
	// The same nonce with other inputs: refused, the form renewed.
	other := url.Values{"csrf": {admin.csrf}, "nonce": {nonce}, "in.build": {"b2"}}
	if got := admin.do("POST", "/workflows/deploy/run", other); got.status != http.StatusUnprocessableEntity || !strings.Contains(got.body, "already started a run with other inputs") || strings.Contains(got.body, `value="`+nonce+`"`) {
		t.Errorf("the form's nonce with other inputs = %d:\n%s", got.status, got.body)
	}

	// A workflow without inputs: a one-button form on the list.
	p = admin.do("GET", "/workflows", nil)
	q := regexp.MustCompile(`action="/workflows/quick/run" class="inline"><input type="hidden" name="csrf" value="[^"]+"><input type="hidden" name="nonce" value="([^"]+)"><button type="submit" id="run-quick">Run</button>`).FindStringSubmatch(p.body)
	if q == nil || !strings.Contains(p.body, `href="/workflows/deploy#h-run"`) {
		t.Fatalf("the workflows page lacks the one-button form of quick or the link to deploy's form:\n%s", p.body)
	}
	if got := admin.do("POST", "/workflows/quick/run", url.Values{"csrf": {admin.csrf}, "nonce": {q[1]}}); got.status != http.StatusSeeOther || len(runsOf(t, e, "quick")) != 1 {
		t.Errorf("Run quick = %d:\n%s", got.status, got.body)
	}
	if p := admin.do("GET", "/workflows/quick", nil); !strings.Contains(p.body, `<button type="submit" id="run-start">Run quick</button>`) {
		t.Errorf("quick's page lacks its one-button form:\n%s", p.body)
	}
	if p := admin.do("GET", "/workflows/nope", nil); p.status != http.StatusNotFound {
		t.Errorf("GET /workflows/nope = %d, want 404", p.status)
	}
}

// A credential's session starts what its grant allows, and its run acts
// for it; what its grant does not allow is refused with the API's reason.
func TestWorkflowRunFormCredential(t *testing.T) {
	t.Parallel()
	f, e := runFixture(t)
	ship := f.browser(t).login(shipToken)
	form := func(name string) string {
		m := nonceField.FindStringSubmatch(ship.do("GET", "/workflows/"+name, nil).body)
		if m == nil {
			t.Fatalf("no run form on %s", name)
		}
		return m[1]
	}
	got := ship.do("POST", "/workflows/deploy/run", url.Values{"csrf": {ship.csrf}, "nonce": {form("deploy")}, "in.build": {"b1"}})
	if got.status != http.StatusSeeOther {
		t.Fatalf("start as ship = %d:\n%s", got.status, got.body)
	}
	runs := runsOf(t, e, "deploy")
	if len(runs) != 1 || runs[0].Cause.Credential != "ship" {
		t.Fatalf("ship's run: %+v", runs)
	}
	if p := ship.do("GET", got.header.Get("Location"), nil); !strings.Contains(p.body, "for credential <code>ship</code>") {
		t.Errorf("the run's page does not say whom it acts for:\n%s", p.body)
	}
	got = ship.do("POST", "/workflows/quick/run", url.Values{"csrf": {ship.csrf}, "nonce": {form("quick")}})
	if got.status != http.StatusForbidden || !strings.Contains(got.body, "no webhook trigger") || len(runsOf(t, e, "quick")) != 0 {
		t.Errorf("ship starting quick (no webhook trigger) = %d:\n%s", got.status, got.body)
	}
	// The operator's grant has no workflow.
	op := f.browser(t).login(opToken)
	m := nonceField.FindStringSubmatch(op.do("GET", "/workflows/deploy", nil).body)
	if got := op.do("POST", "/workflows/deploy/run", url.Values{"csrf": {op.csrf}, "nonce": {m[1]}, "in.build": {"b1"}}); got.status != http.StatusForbidden || !strings.Contains(got.body, "may not start workflow") {
		t.Errorf("oper starting deploy = %d:\n%s", got.status, got.body)
	}
}
