package config_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/config"
)

// The mcp and tasks sections and every tool scope: decoded, checked with
// the line of an unknown key, a cwd relative to the file, and the globs
// checked against the servers.
func TestToolsConfig(t *testing.T) {
	t.Parallel()
	const good = `
runner:
  tools: [notify_user]
  max_tool_calls: 30
heartbeat:
  tools: [fs__read_text_file, "fs__list_*"]
cron:
  jobs:
    - id: sales
      schedule: "0 9 * * mon"
      prompt: analyse last week's sales
      tools: ["*__read_*"]
tasks:
  report:
    tools: [search__*, notify_user]
mcp:
  servers:
    fs:
      command: npx
      args: ["-y", "@modelcontextprotocol/server-filesystem", "."]
      cwd: reports
      env: {FS_TOKEN: "${FS_TOKEN}"}
    search:
      url: https://mcp.example.com/mcp
      headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}
`
	dir := t.TempDir()
	name := filepath.Join(dir, "agentwork.yaml")
	f, err := config.Parse(name, []byte(good), env(map[string]string{"FS_TOKEN": "fs-token-0123456789", "SEARCH_TOKEN": "short"}), types)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	if got, want := f.MCP.Servers["fs"].Cwd, filepath.Join(dir, "reports"); got != want {
		t.Errorf("mcp.servers.fs.cwd = %q, want %q (relative to the config file)", got, want)
	}
	if got := f.Tasks["report"].Tools; !slices.Equal(got, []string{"search__*", "notify_user"}) {
		t.Errorf("tasks.report.tools = %v", got)
	}
	if got := f.Secrets(); !slices.Equal(got, []string{"fs-token-0123456789", "Bearer short"}) {
		t.Errorf("Secrets() = %v, want the env value of secret.Min bytes or more and the Authorization header (not its token alone: too short)", got)
	}

	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"unknown mcp key", "mcp:\n  servers:\n    fs:\n      comand: npx\n", `agentwork.yaml:4: unknown key "mcp.servers.fs.comand"`},
		{"unknown task key", "tasks:\n  report:\n    tols: [x]\n", `agentwork.yaml:3: unknown key "tasks.report.tols"`},
	} {
		if _, err := config.Parse("agentwork.yaml", []byte(tt.yaml), env(nil), types); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Parse = %v, want %q", tt.name, err, tt.want)
		}
	}

	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"no such server", "heartbeat:\n  tools: [fss__read]\nmcp:\n  servers:\n    fs: {command: npx}\n",
			`heartbeat.tools[0]: "fss__read" matches no tool: no MCP server is called "fss" (mcp.servers has fs)`},
		{"no servers", "runner:\n  tools: [fs__*]\n", `runner.tools[0]: "fs__*" matches no tool: no MCP server is called "fs" (mcp.servers has none)`},
		{"no tool", "tasks:\n  report:\n    tools: [notfy_user]\n", `tasks.report.tools[0]: "notfy_user" matches no tool: want notify_user, memory_* (the memory tools), schedule_*, a built-in tool that is on (tools section: http_fetch, exec), or <server>__<tool>`},
		{"agent jobs' tools", "cron:\n  agent:\n    tools: [sched_create]\n", `cron.agent.tools[0]: "sched_create" matches no tool`},
		{"agent quota", "cron:\n  agent:\n    max_jobs: -1\n", "cron.agent.max_jobs: -1: want 1-10000"},
		{"agent total quota", "cron:\n  agent:\n    max_jobs_total: -1\n", "cron.agent.max_jobs_total: -1: want 1-100000 (default 100)"},
		{"memory level", "cron:\n  jobs:\n    - {id: a, schedule: '@daily', prompt: p, memory: all}\n", `cron.jobs[0].memory: "all": want none, light`},
		{"memory level of a task", "tasks:\n  report:\n    memory: lots\n", `tasks.report.memory: "lots": want none`},
		{"memory zone", "memory:\n  timezone: Mars/Olympus\n", `memory.timezone: "Mars/Olympus" is not an IANA time zone`},
		{"job", "cron:\n  jobs:\n    - {id: a, schedule: '@daily', prompt: p, tools: ['gh__*']}\n", `cron.jobs[0].tools[0]: "gh__*" matches no tool`},
		{"bad glob", "runner:\n  tools: ['fs__[x']\n", `runner.tools[0]: "fs__[x" is not a well-formed glob`},
		{"max calls", "runner:\n  max_tool_calls: 5000\n", "runner.max_tool_calls: 5000: want 1-1000"},
		{"checklist in a file", "heartbeat:\n  tools: [memory_*, checklist_update]\n", `heartbeat.tools[1]: "checklist_update": the heartbeat reads its checklist from a file`},
		{"server", "mcp:\n  servers:\n    fs: {}\n", "mcp.servers.fs.command: required"},
		{"glob without __ for a server", "runner:\n  tools: ['f*']\nmcp:\n  servers:\n    fs: {command: npx}\n",
			`runner.tools[0]: "f*" matches no tool: want notify_user, memory_* (the memory tools), schedule_*, a built-in tool that is on (tools section: http_fetch, exec), or <server>__<tool> for a tool of an MCP server (mcp.servers has fs); a glob without "__" matches only built-in tools`},
		{"server named like the memory tools", "mcp:\n  servers:\n    memory: {command: npx}\nheartbeat:\n  tools: [memory_*]\n",
			`mcp.servers.memory: "memory" is taken by the built-in tools memory_read, memory_append, memory_replace, memory_list: rename the server, e.g. to memory-mcp`},
		{"server named like a built-in tool", "mcp:\n  servers:\n    exec: {command: npx}\n", `mcp.servers.exec: "exec" is taken by the built-in tool exec: rename the server, e.g. to exec-mcp`},
		{"server named like a built-in family", "mcp:\n  servers:\n    http_fetch: {command: npx}\n", `mcp.servers.http_fetch: "http_fetch" starts with "http_", as the built-in tool http_fetch does: rename the server, e.g. to http-fetch`},
		{"approval glob", "runner:\n  approval: [exce]\n", `runner.approval[0]: "exce" matches no tool`},
		{"heartbeat approval glob", "heartbeat:\n  approval: ['gh__merge_*']\n", `heartbeat.approval[0]: "gh__merge_*" matches no tool: no MCP server is called "gh"`},
		{"task approval glob", "tasks:\n  report:\n    approval: [exec]\n", `tasks.report.approval[0]: "exec" matches no tool: the built-in exec is off`},
		{"job approval glob", "cron:\n  jobs:\n    - {id: a, schedule: '@daily', prompt: p, approval: ['gh__*']}\n", `cron.jobs[0].approval[0]: "gh__*" matches no tool`},
		{"approval on_timeout", "runner:\n  approvals: {on_timeout: later}\n", `runner.approvals.on_timeout: "later": want reject, approve or fail`},
		{"approval wait", "runner:\n  approvals: {timeout: 200h}\n", `runner.approvals.timeout: 200h0m0s: want a duration up to 144h0m0s`},
		{"approval wait inherited", "runner:\n  approval: [notify_user]\napprovals: {timeout: 200h}\n", `approvals.timeout: 200h0m0s: a gated tool call's run waits at most 144h0m0s; set runner.approvals.timeout`},
		{"approval target", "runner:\n  approvals: {targets: [pigeon]}\n", `runner.approvals.targets[0]: "pigeon" is not a connector`},
		{"job target's connector", "cron:\n  jobs:\n    - {id: a, schedule: '@daily', prompt: p, targets: ['pigeon:42']}\n", `cron.jobs[0].targets[0]: "pigeon" is not a connector`},
	} {
		f, err := config.Parse("agentwork.yaml", []byte(tt.yaml), env(nil), types)
		if err != nil {
			t.Fatalf("%s: Parse = %v", tt.name, err)
		}
		if err := f.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate = %v, want %q", tt.name, err, tt.want)
		}
	}
	// Every built-in family is taken, alone or with more after a "_".
	for _, name := range []string{"notify", "memory", "checklist", "schedule", "http", "exec", "memory_graph", "schedule_x", "notify_user"} {
		f, err := config.Parse("agentwork.yaml", []byte("mcp:\n  servers:\n    "+name+": {command: npx}\n"), env(nil), types)
		if err != nil {
			t.Fatalf("%s: Parse = %v", name, err)
		}
		if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "mcp.servers."+name+": ") || !strings.Contains(err.Error(), "rename the server") {
			t.Errorf("Validate(mcp.servers.%s) = %v, want an error that names the server and says to rename it", name, err)
		}
	}
	for _, ok := range []string{
		"runner:\n  tools: ['*']\n",
		"runner:\n  tools: ['notify_*']\n",
		"tasks:\n  planner:\n    tools: [schedule_*]\ncron:\n  agent: {max_jobs: 5, min_interval: 10m, tools: [notify_user, schedule_list]}\n",
		"runner:\n  memory: light\nheartbeat:\n  tools: [memory_*]\n  memory: full\ntasks:\n  report:\n    tools: [memory_read]\n",
		"runner:\n  memory_flush: true\nheartbeat:\n  tools: [memory_*, checklist_update]\n  checklist_in_memory: true\n  memory_flush: false\ntasks:\n  report:\n    tools: [memory_append]\n    memory_flush: true\ncron:\n  jobs:\n    - {id: a, schedule: '@daily', prompt: p, memory_flush: true}\n",
		"runner:\n  tools: [memory_*, 'memory-graph__*', 'executor__*']\nmcp:\n  servers:\n    memory-graph: {command: npx}\n    executor: {command: npx}\n",
		"runner:\n  tools: ['f?__*']\nmcp:\n  servers:\n    fs: {command: npx}\n",
		"connectors:\n  alerts: {type: nats, subject: a.b}\ncron:\n  jobs:\n    - {id: a, schedule: '@daily', prompt: p, targets: ['alerts:ops.x']}\n",
	} {
		f, err := config.Parse("agentwork.yaml", []byte(ok), env(nil), types)
		if err == nil {
			err = f.Validate()
		}
		if err != nil {
			t.Errorf("Validate(%q) = %v, want nil", ok, err)
		}
	}
}

// The tools section: the built-ins it turns on may be named in scopes,
// one it does not is a config error, exec's cwd is relative to the file,
// and errors name the field.
func TestBuiltinToolsConfig(t *testing.T) {
	t.Parallel()
	const good = `
runner:
  tools: [http_fetch]
heartbeat:
  tools: [exec, "http_*"]
tools:
  http_fetch:
    allow:
      - prefix: https://api.github.com/repos/acme/
        headers: {Authorization: "Bearer ${GITHUB_TOKEN}"}
      - prefix: http://127.0.0.1:9100/metrics
        allow_loopback: true
    max_redirects: 0
  exec:
    allow:
      - [df, -h]
      - [systemctl, status]
    cwd: scripts
`
	dir := t.TempDir()
	f, err := config.Parse(filepath.Join(dir, "agentwork.yaml"), []byte(good), env(map[string]string{"GITHUB_TOKEN": "ghp_0123456789abcdef"}), types)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	if got, want := f.Tools.Exec.Cwd, filepath.Join(dir, "scripts"); got != want {
		t.Errorf("tools.exec.cwd = %q, want %q (relative to the config file)", got, want)
	}
	if n := f.Tools.HTTPFetch.MaxRedirects; n == nil || *n != 0 {
		t.Errorf("tools.http_fetch.max_redirects = %v, want 0 kept apart from unset", n)
	}
	if got := f.Secrets(); !slices.Equal(got, []string{"ghp_0123456789abcdef", "Bearer ghp_0123456789abcdef"}) {
		t.Errorf("Secrets() = %v, want the header's token and the header's value", got)
	}

	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"off", "runner:\n  tools: [exec]\n", `runner.tools[0]: "exec" matches no tool: the built-in exec is off (turn it on under tools.exec)`},
		{"off glob", "heartbeat:\n  tools: ['http_*']\ntools:\n  exec: {allow: [[df]]}\n", `heartbeat.tools[0]: "http_*" matches no tool: the built-in http_fetch is off`},
		{"prefix", "tools:\n  http_fetch:\n    allow:\n      - prefix: http://169.254.169.254/\n",
			"tools.http_fetch.allow[0].prefix: 169.254.169.254 is the cloud metadata service's address; set allow_private: true on this entry"},
		{"no allow", "tools:\n  exec: {}\n", "tools.exec.allow: required"},
		{"shell", "tools:\n  exec:\n    allow: [[sh, -c]]\n", `tools.exec.allow[0]: ["sh","-c"]: sh is a shell: it runs any command`},
	} {
		f, err := config.Parse("agentwork.yaml", []byte(tt.yaml), env(nil), types)
		if err != nil {
			t.Fatalf("%s: Parse = %v", tt.name, err)
		}
		if err := f.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate = %v, want %q", tt.name, err, tt.want)
		}
	}
	if _, err := config.Parse("agentwork.yaml", []byte("tools:\n  exec:\n    alow: [[df]]\n"), env(nil), types); err == nil || !strings.Contains(err.Error(), `agentwork.yaml:3: unknown key "tools.exec.alow"`) {
		t.Errorf("Parse(tools.exec.alow) = %v, want the unknown key and its line", err)
	}
}
