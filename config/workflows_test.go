package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/config"
)

// Workflows in the config file and in workflows_dir: decoded, merged and
// validated together (a child in the other source is found), with the
// cross-checks of tools, targets, models and cron schedules, each error at
// its file:line.
func TestWorkflowsConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "flows"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("flows/child.yaml", "steps:\n  - id: a\n    tool: memory_read\n    args: {name: notes}\n")
	good := `
models:
  strong: {provider: script}
workflows_dir: flows
workflows:
  parent:
    on:
      - cron: {schedule: "0 9 * * mon", timezone: Europe/Berlin}
    targets: [console]
    steps:
      - id: ask
        agent: {prompt: hi, model: strong, tools: [notify_user]}
      - id: tell
        notify: {text: "${{ steps.ask.output }}", targets: [console]}
      - id: sub
        workflow: child
`
	write("agentwork.yaml", good)
	f, err := config.Load(filepath.Join(dir, "agentwork.yaml"), types)
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	if len(f.Workflows) != 2 || f.Workflows["child"] == nil || f.Workflows["parent"] == nil {
		t.Fatalf("workflows = %v, want parent and child", f.Workflows)
	}

	bad := `
workflows_dir: flows
workflows:
  parent:
    on:
      - cron: {schedule: "61 * * * *"}
    targets: [pager]
    steps:
      - id: ask
        agent: {prompt: hi, model: nope, tools: [gh__*]}
      - id: call
        tool: http_fetch
        args: {url: x}
      - id: tell
        notify: {text: hi, targets: [slack]}
      - id: sub
        workflow: missing
      - id: gate
        approval: {message: ok, targets: [phone]}
  child:
    steps:
      - id: x
        wait: 1s
`
	write("agentwork.yaml", bad)
	_, err = config.Load(filepath.Join(dir, "agentwork.yaml"), types)
	if err == nil {
		t.Fatal("Load accepted bad workflows")
	}
	cfgFile := filepath.Join(dir, "agentwork.yaml")
	childFile := filepath.Join(dir, "flows", "child.yaml")
	for _, want := range []string{
		childFile + ":1: workflow child: defined twice (also at " + cfgFile + ":20)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\nlacks %q", err, want)
		}
	}

	// The clash aside, every other problem is placed at its line.
	write("flows/child.yaml", "steps:\n  - id: a\n    wait: 1s\n")
	write("agentwork.yaml", strings.Replace(bad, "  child:\n    steps:\n      - id: x\n        wait: 1s\n", "", 1))
	_, err = config.Load(cfgFile, types)
	if err == nil {
		t.Fatal("Load accepted bad workflows")
	}
	for _, want := range []string{
		cfgFile + ":6: workflow parent: workflows.parent.on[0].cron.schedule:",
		cfgFile + ":7: workflow parent: workflows.parent.targets[0]: \"pager\" is not a connector",
		cfgFile + ":10: workflow parent: step ask: workflows.parent.steps[0].agent.model: \"nope\": no such model",
		cfgFile + ":10: workflow parent: step ask: workflows.parent.steps[0].agent.tools[0]: \"gh__*\" matches no tool: no MCP server is called \"gh\"",
		cfgFile + ":12: workflow parent: step call: workflows.parent.steps[1].tool: \"http_fetch\" matches no tool: the built-in http_fetch is off",
		cfgFile + ":15: workflow parent: step tell: workflows.parent.steps[2].notify.targets[0]: \"slack\" is not a connector",
		cfgFile + ":17: workflow parent: step sub:",
		cfgFile + ":19: workflow parent: step gate: workflows.parent.steps[4].approval.targets[0]: \"phone\" is not a connector",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%s\nlacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), cfgFile+": "+cfgFile) {
		t.Errorf("a file named twice:\n%s", err)
	}

	// A decode error of the section (an unknown key) and a missing
	// directory, both at their lines.
	write("agentwork.yaml", "workflows_dir: nowhere\nworkflows:\n  w:\n    stepz: []\n")
	_, err = config.Load(cfgFile, types)
	for _, want := range []string{cfgFile + ":1: workflows_dir:", cfgFile + ":4:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}
