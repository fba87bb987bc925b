package workflow_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/internal/yamlstrict"
	"github.com/agentwork/agentwork/triggers/cron"
	"github.com/agentwork/agentwork/workflow"
)

// example is the example, the contract of what a user writes.
const example = `description: Find the commit that broke a build, ask, revert it
inputs:
  build: {type: string, required: true}
  teams: {type: array, default: [ops]}
on:
  - webhook: {}
  - cron: {schedule: "0 9 * * mon", timezone: Europe/Berlin}
  - event: {type: agentwork.cron.error, subject: nightly-tests}
concurrency: {limit: 1, overlap: queue}
timeout: 48h
targets: [ops]
steps:
  - id: log
    tool: http_fetch
    args: {url: "https://ci.example.com/builds/${{ inputs.build }}/log"}
  - id: analyse
    agent:
      prompt: "Which commit broke build ${{ inputs.build }}? Log: ${{ steps.log.output }}"
      output: {type: object, properties: {commit: {type: string}, confidence: {type: number}}, required: [commit]}
      tools: [notify_user, "github__*"]
      model: strong
  - id: wait-a-bit
    wait: 10m
  - id: revert
    if: steps.analyse.output.confidence > 0.7
    tool: github__revert_commit
    args: {sha: "${{ steps.analyse.output.commit }}"}
    retry: {attempts: 3, backoff: 30s}
    timeout: 2m
  - id: each-team
    foreach: inputs.teams
    notify: {text: "Reverted ${{ steps.analyse.output.commit }}", targets: ["${{ item }}"]}
  - id: followup
    workflow: open-incident
    with: {commit: "${{ steps.analyse.output.commit }}"}
    on_failure: continue
`

const child = `inputs:
  commit: {type: string}
steps:
  - id: tell
    notify: {text: "incident for ${{ inputs.commit }}"}
`

func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func opts() workflow.Options {
	return workflow.Options{Schedule: func(expr string, loc *time.Location) error {
		_, err := cron.ParseSchedule(expr, loc)
		return err
	}}
}

func TestLoadExample(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, map[string]string{"revert-broken-build.yaml": example, "open-incident.yml": child, "notes.txt": "not a workflow"})
	set, err := workflow.Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if err := set.Validate(opts()); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	w := set["revert-broken-build"]
	if w == nil || len(set) != 2 {
		t.Fatalf("Load = %v, want the two workflows", set)
	}
	if got := w.Steps[3].Retry.Attempts; got != 3 {
		t.Errorf("revert retry attempts = %d, want 3", got)
	}
	if w.Steps[2].Wait != 10*time.Minute || w.Timeout != 48*time.Hour {
		t.Errorf("wait, timeout = %s, %s, want 10m, 48h", w.Steps[2].Wait, w.Timeout)
	}
	if w.On[1].Cron == nil || w.On[1].Cron.Timezone != "Europe/Berlin" || w.On[2].Event.Subject != "nightly-tests" {
		t.Errorf("on = %+v", w.On)
	}
	if k, _ := w.Steps[4].Kind(); k != workflow.KindNotify || w.Steps[4].Foreach != "inputs.teams" {
		t.Errorf("each-team kind = %s, foreach %q", k, w.Steps[4].Foreach)
	}
}

// A bad definition is refused with its file and line, the workflow, the
// step and the field, and what to do.
func TestValidateErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, text string
		want       []string // substrings of one error, the first being "file:line"
	}{
		{"unknown key", "steps:\n  - id: a\n    tool: x\n    arg: {}\n", []string{"w.yaml:4:", `unknown key "steps[0].arg"`}},
		{"unknown kind", "steps:\n  - id: a\n    shell: ls\n", []string{"w.yaml:3:", `unknown key "steps[0].shell"`}},
		{"no kind", "steps:\n  - id: a\n    if: true\n", []string{"w.yaml:2:", "step a:", "no step kind"}},
		{"two kinds", "steps:\n  - id: a\n    tool: x\n    wait: 1m\n", []string{"w.yaml:2:", "step a:", "more than one kind (tool and wait)"}},
		{"duplicate id", "steps:\n  - id: a\n    wait: 1m\n  - id: a\n    wait: 1m\n", []string{"w.yaml:4:", "steps[1].id", "also used by steps[0]"}},
		{"missing ref", "steps:\n  - id: a\n    tool: x\n    args: {u: \"${{ steps.nope.output }}\"}\n", []string{"w.yaml:4:", "step a:", "steps[0].args.u", `no step "nope"`}},
		{"later ref", "steps:\n  - id: a\n    if: steps.b.status == 'done'\n    wait: 1m\n  - id: b\n    wait: 1m\n", []string{"w.yaml:3:", "steps.b comes later"}},
		{"self ref", "steps:\n  - id: a\n    if: steps.a.output\n    wait: 1m\n", []string{"w.yaml:3:", "this step itself"}},
		{"sibling branch", "steps:\n  - id: p\n    parallel:\n      x:\n        - id: a\n          wait: 1m\n      y:\n        - id: b\n          if: steps.a.output\n          wait: 1m\n", []string{"w.yaml:9:", "step b:", "parallel branch p.x"}},
		{"bad template", "steps:\n  - id: a\n    notify: {text: \"hi ${{ inputs.x + }}\"}\n", []string{"w.yaml:3:", "notify.text", "${{ inputs.x + }}"}},
		{"unclosed template", "steps:\n  - id: a\n    notify: {text: \"hi ${{ inputs.x\"}\n", []string{"w.yaml:3:", "not closed"}},
		{"unknown name", "steps:\n  - id: a\n    if: input.x\n    wait: 1m\n", []string{"w.yaml:3:", "unknown name input"}},
		{"item outside foreach", "steps:\n  - id: a\n    notify: {text: \"${{ item }}\"}\n", []string{"w.yaml:3:", "only in a foreach"}},
		{"bad duration", "steps:\n  - id: a\n    wait: soon\n", []string{"w.yaml:3:", `"soon" is not a duration`}},
		{"bad cron", "on:\n  - cron: {schedule: \"61 * * * *\"}\nsteps:\n  - id: a\n    wait: 1m\n", []string{"w.yaml:2:", "on[0].cron.schedule"}},
		{"bad timezone", "on:\n  - cron: {schedule: \"@daily\", timezone: Mars/Olympus}\nsteps:\n  - id: a\n    wait: 1m\n", []string{"w.yaml:2:", "not an IANA time zone"}},
		{"two triggers in one", "on:\n  - webhook: {}\n    cron: {schedule: \"@daily\"}\nsteps:\n  - id: a\n    wait: 1m\n", []string{"w.yaml:2:", "more than one trigger"}},
		{"unknown child", "steps:\n  - id: a\n    workflow: ghost\n", []string{"w.yaml:3:", `no workflow "ghost"`}},
		{"retry attempts", "steps:\n  - id: a\n    tool: x\n    retry: {attempts: 0}\n", []string{"w.yaml:4:", "retry.attempts", "want 1 to"}},
		{"bad schema", "steps:\n  - id: a\n    agent: {prompt: hi, output: {type: 12}}\n", []string{"w.yaml:3:", "agent.output", "not a JSON Schema"}},
		{"approval no message", "steps:\n  - id: a\n    approval: {targets: [ops]}\n", []string{"w.yaml:3:", "approval.message", "empty"}},
		{"approval bad message", "steps:\n  - id: a\n    approval: {message: \"ok ${{ inputs.x + }}?\", targets: [ops]}\n", []string{"w.yaml:3:", "approval.message", "${{ inputs.x + }}"}},
		{"approval later ref", "steps:\n  - id: a\n    approval: {message: \"${{ steps.b.output }}\", targets: [ops]}\n  - id: b\n    wait: 1m\n", []string{"w.yaml:3:", "steps.b comes later"}},
		{"approval no targets", "steps:\n  - id: a\n    approval: {message: \"ok?\"}\n", []string{"w.yaml:3:", "approval.targets", "no targets"}},
		{"approval approvers", "steps:\n  - id: a\n    approval: {message: \"ok?\", targets: [ops], approvers: [\"123456789\", \"telegram:\"]}\n", []string{"w.yaml:3:", "approvers[0]", `"123456789": want connector:user-id`}},
		{"approval on_timeout", "steps:\n  - id: a\n    approval: {message: \"ok?\", targets: [ops], on_timeout: ignore}\n", []string{"w.yaml:3:", "approval.on_timeout", `"ignore": want reject`}},
		{"approval reminder", "steps:\n  - id: a\n    approval: {message: \"ok?\", targets: [ops], timeout: 1h, reminder: 2h}\n", []string{"w.yaml:3:", "approval.reminder", "shorter than the timeout"}},
		{"approval foreach", "steps:\n  - id: a\n    foreach: '[1, 2]'\n    approval: {message: \"ok?\", targets: [ops]}\n", []string{"w.yaml:", "cannot be a foreach"}},
		{"approval retry", "steps:\n  - id: a\n    timeout: 1m\n    approval: {message: \"ok?\", targets: [ops]}\n", []string{"w.yaml:", "set approval.timeout"}},
		{"approval unknown key", "steps:\n  - id: a\n    approval: {message: \"ok?\", targets: [ops], approver: [x]}\n", []string{"w.yaml:3:", "approver"}},
		{"input default type", "inputs:\n  n: {type: integer, default: 1.5}\nsteps:\n  - id: a\n    wait: 1m\n", []string{"w.yaml:2:", "inputs.n.default", "not an integer"}},
		{"foreach parallel", "steps:\n  - id: a\n    foreach: '[1]'\n    parallel:\n      x:\n        - id: b\n          wait: 1m\n", []string{"w.yaml:3:", "cannot be a foreach"}},
		{"parallel timeout", "steps:\n  - id: p\n    timeout: 1m\n    parallel:\n      x:\n        - id: b\n          wait: 1m\n", []string{"w.yaml:2:", "not to a parallel step"}},
		{"computed step name", "steps:\n  - id: a\n    wait: 1m\n  - id: b\n    if: steps['a' + '']\n    wait: 1m\n", []string{"w.yaml:5:", "by its id"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := writeDir(t, map[string]string{"w.yaml": tc.text})
			set, err := workflow.Load(dir)
			if err == nil {
				err = set.Validate(opts())
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				ok := strings.HasPrefix(line, filepath.Join(dir, tc.want[0]))
				for _, w := range tc.want[1:] {
					ok = ok && strings.Contains(line, w)
				}
				if ok {
					return
				}
			}
			t.Errorf("error:\n%v\nwant a line at %s with %q", err, tc.want[0], tc.want[1:])
		})
	}
}

func TestChildCycle(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, map[string]string{
		"a.yaml": "steps:\n  - id: s\n    workflow: b\n",
		"b.yaml": "steps:\n  - id: first\n    wait: 1m\n  - id: s\n    workflow: a\n",
	})
	set, err := workflow.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = set.Validate(opts())
	if err == nil || !strings.Contains(err.Error(), "cycle (a → b → a)") || !strings.Contains(err.Error(), "b.yaml:5:") {
		t.Fatalf("Validate = %v, want the cycle a → b → a at b.yaml:5", err)
	}
}

// The config file's section decodes through Decode, and its errors unwrap
// to *yamlstrict.Error (line and message) for the config loader.
func TestDecodeSection(t *testing.T) {
	t.Parallel()
	var root yaml.Node
	text := "workflows:\n  one:\n    steps:\n      - id: a\n        wait: 1m\n  two:\n    steps:\n      - id: b\n        if: steps.zz.output\n        wait: 1m\n"
	if err := yaml.Unmarshal([]byte(text), &root); err != nil {
		t.Fatal(err)
	}
	section := root.Content[0].Content[1]
	set, err := workflow.Decode(section, "workflows")
	if err != nil {
		t.Fatal(err)
	}
	err = set.Validate(workflow.Options{})
	ye, ok := errors.AsType[*yamlstrict.Error](err)
	if !ok || ye.Line != 9 || !strings.Contains(ye.Msg, "workflow two: step b: workflows.two.steps[0].if: steps.zz") {
		t.Fatalf("Validate = %v (as yamlstrict: %+v), want line 9 naming workflows.two.steps[0].if", err, ye)
	}

	// An unknown key in the section.
	if err := yaml.Unmarshal([]byte("workflows:\n  one:\n    stepz: []\n"), &root); err != nil {
		t.Fatal(err)
	}
	_, err = workflow.Decode(root.Content[0].Content[1], "workflows")
	if ye, ok := errors.AsType[*yamlstrict.Error](err); !ok || ye.Line != 3 || !strings.Contains(ye.Msg, `"workflows.one.stepz"`) {
		t.Fatalf("Decode = %v, want line 3 naming workflows.one.stepz", err)
	}
}

func TestMergeDuplicate(t *testing.T) {
	t.Parallel()
	a, err := workflow.Load(writeDir(t, map[string]string{"x.yaml": "steps:\n  - id: a\n    wait: 1m\n"}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := workflow.Load(writeDir(t, map[string]string{"x.yaml": "steps:\n  - id: a\n    wait: 1m\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Merge(b); err == nil || !strings.Contains(err.Error(), "defined twice") {
		t.Fatalf("Merge = %v, want defined twice", err)
	}
}
