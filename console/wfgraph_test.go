package console_test

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/workflow"
)

const fanWorkflow = `
fan:
  steps:
    - id: split
      parallel:
        right:
          - {id: r1, wait: 1h}
          - {id: r2, wait: 1h}
        left:
          - {id: l1, wait: 1h}
    - id: after
      wait: 1h
`

var graphNode = regexp.MustCompile(`(?s)<g class="node st-([a-z_0-9]+)" data-step="([^"]+)">.*?<rect x="(\d+)" y="(\d+)"`)

// A workflow run's page draws its steps as an SVG graph on the server:
// boxes top to bottom in their order, the branches of a parallel step side
// by side under it (by name), each box's status as its class; what the
// record says is escaped and a class stays one word.
func TestWorkflowRunGraph(t *testing.T) {
	t.Parallel()
	f, e := workflowFixtureOf(t, fanWorkflow)
	run, _, err := e.Start(t.Context(), "fan", nil, workflow.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, f, run.ID, workflow.RunWaiting)
	b := f.browser(t).login(viewerToken)
	p := b.do("GET", "/workflow-runs/"+run.ID, nil)
	if p.status != 200 || !strings.Contains(p.body, `<svg viewBox=`) || !strings.Contains(p.body, `id="step-graph"`) {
		t.Fatalf("the run's page = %d, no step graph:\n%s", p.status, p.body)
	}
	type box struct {
		status string
		x, y   int
	}
	got := map[string]box{}
	var order []string
	for _, m := range graphNode.FindAllStringSubmatch(p.body, -1) {
		x, _ := strconv.Atoi(m[3])
		y, _ := strconv.Atoi(m[4])
		got[m[2]] = box{m[1], x, y}
		order = append(order, m[2])
	}
	if strings.Join(order, ",") != "split,l1,r1,r2,after" {
		t.Fatalf("the graph's boxes = %v, want split, its branches left (l1) and right (r1, r2), then after:\n%s", order, p.body)
	}
	split, l1, r1, r2, after := got["split"], got["l1"], got["r1"], got["r2"], got["after"]
	if l1.y != r1.y || l1.x >= r1.x || l1.y <= split.y {
		t.Errorf("the branches' first steps l1 %+v and r1 %+v are not side by side under split %+v", l1, r1, split)
	}
	if r2.x != r1.x || r2.y <= r1.y || after.y <= r2.y {
		t.Errorf("r2 %+v is not under r1 %+v, or after %+v not under the longest branch", r2, r1, after)
	}
	if split.status != "running" && split.status != "waiting" || l1.status != "waiting" || r2.status != "pending" || after.status != "pending" {
		t.Errorf("statuses: split %s, l1 %s, r2 %s, after %s; want split running or waiting, l1 waiting, r2 and after pending", split.status, l1.status, r2.status, after.status)
	}
	if strings.Contains(p.body, " style=") || strings.Contains(p.body, "<script>") {
		t.Error("the page has an inline style or script")
	}

	// A record that says something odd is shown as text.
	ent, err := f.b.WorkflowRuns.Get(t.Context(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(ent.Value(), &raw); err != nil {
		t.Fatal(err)
	}
	raw["steps"].(map[string]any)["l1"].(map[string]any)["status"] = `"><script>alert(1)</script>`
	val, _ := json.Marshal(raw)
	if _, err := f.b.WorkflowRuns.Update(t.Context(), run.ID, val, ent.Revision()); err != nil {
		t.Fatal(err)
	}
	p = b.do("GET", "/workflow-runs/"+run.ID, nil)
	if strings.Contains(p.body, "<script>alert") || !strings.Contains(p.body, `class="node st-scriptalert1script" data-step="l1"`) {
		t.Errorf("an odd status is not escaped, or its class is not one word:\n%s", p.body)
	}
}
