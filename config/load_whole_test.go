package config_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/config"
)

// The whole text of Load's errors, in order, for files with errors of
// many kinds at many places: field paths into lists (cron.jobs[3].),
// maps and nested sections, the cross-checks of jobs against connectors,
// tools and models. The paths are written only when there is an error,
// so that a file of 100,000 good jobs does not pay for them; this pins
// what the errors say and their order.
func TestLoadErrorsWhole(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		want       []string // the lines of the error
	}{
		{"unknown keys", `
model:
  script:
    rules:
      - match: {source: x}
        notify: hi
      - mach: {source: y}
mcp:
  servers:
    fs: {command: [fs], cwdd: x}
tasks:
  report: {toolz: [x]}
cron:
  timeout: soon
  jobs:
    - {id: a, schedule: "@daily", prompt: p}
    - {id: b, schedule: "@daily", prompt: p, nmae: x, retry: {attempts: 1, backof: 1m}}
    - {id: c, schedule: "@daily", prompt: p, budget: {daily: 3}}
    - {id: d, at: soon, prompt: p}
webhook:
  tokens:
    - {name: ci, token: t0123456789abcdef, sources: [ci], scopes: [x]}
`, []string{
			"agentwork.yaml:7: unknown key \"model.script.rules[1].mach\" (known: delay, error, match, notify, text, tool_calls; see `agentwork config schema`)",
			"agentwork.yaml:10: unknown key \"mcp.servers.fs.cwdd\" (known: args, command, cwd, env, headers, idempotent_tools, max_output, timeout, url; see `agentwork config schema`)",
			"agentwork.yaml:12: unknown key \"tasks.report.toolz\" (known: approval, fallback, max_steps, memory, memory_flush, model, timeout, tools; see `agentwork config schema`)",
			"agentwork.yaml:14: cron.timeout: \"soon\" is not a duration, e.g. 30s, 5m or 1h30m",
			"agentwork.yaml:17: unknown key \"cron.jobs[1].nmae\" (known: alert_after, approval, at, budget, catchup, dedup_window, delete_after_run, deliver, enabled, expires_at, fallback, id, jitter, max_runs, max_steps, memory, memory_flush, metadata, model, name, overlap, pause_after, prompt, retry, schedule, targets, timeout, timezone, tools; see `agentwork config schema`)",
			"agentwork.yaml:17: unknown key \"cron.jobs[1].retry.backof\" (known: attempts, backoff; see `agentwork config schema`)",
			"agentwork.yaml:18: unknown key \"cron.jobs[2].budget.daily\" (known: daily_tokens; see `agentwork config schema`)",
			"agentwork.yaml:19: cron.jobs[3].at: \"soon\" is not a time in RFC 3339, e.g. 2026-12-01T09:00:00+01:00",
			"agentwork.yaml:22: unknown key \"webhook.tokens[0].scopes\" (known: console, mcp, name, names, sources, targets, token; see `agentwork config schema`)",
		}},
		{"invalid jobs", `
connectors:
  ops: {type: console}
models:
  cheap: {provider: script}
cron:
  jobs:
    - {id: ok, schedule: "@daily", prompt: p, targets: [ops], tools: [notify_user], model: cheap}
    - {id: "Bad Id", schedule: "61 * * * *", prompt: " ", deliver: email, overlap: wait, catchup: all, timezone: Mars/Olympus}
    - {id: ok, schedule: "@daily", at: "2030-01-01T00:00:00Z", prompt: p, delete_after_run: true, max_runs: -1}
    - {id: d, prompt: p, targets: ["Tele gram", "pigeon:42", "ops:"], tools: ["fs/read", "gh__*"], approval: ["", "x*"], memory: all}
    - {id: e, schedule: "@daily", prompt: p, budget: {daily_tokens: -1}, retry: {attempts: 99, backoff: -1s}, jitter: -1s, dedup_window: 1000h, timeout: -1s, max_steps: -1}
    - {id: f, schedule: "@daily", prompt: p, model: strnog, fallback: [cheap, nope], catchup: {policy: skip, max: 3}, metadata: {"": x}}
`, []string{
			"agentwork.yaml: cron.jobs[1].id: \"Bad Id\": want 1-64 characters of a-z, 0-9, _ and -",
			"agentwork.yaml: cron.jobs[1].timezone: \"Mars/Olympus\" is not an IANA time zone (e.g. America/New_York, Europe/Berlin, UTC)",
			"agentwork.yaml: cron.jobs[1].schedule: \"61 * * * *\": end of range (61) above maximum (59): 61",
			"agentwork.yaml: cron.jobs[1].prompt: missing: say what the model should do",
			"agentwork.yaml: cron.jobs[1].deliver: \"email\": want auto, reply, notify or none",
			"agentwork.yaml: cron.jobs[1].overlap: \"wait\": want skip, queue or allow",
			"agentwork.yaml: cron.jobs[1].catchup: \"all\": want run_once, skip or run_all",
			"agentwork.yaml: cron.jobs[2].at: set either schedule or at, not both",
			"agentwork.yaml: cron.jobs[2].max_runs: -1: must not be negative (0: no limit)",
			"agentwork.yaml: cron.jobs[2].delete_after_run: a config job cannot delete itself (the file defines it); remove it from the file instead",
			"agentwork.yaml: cron.jobs[2].id: \"ok\" is already the id of cron.jobs[0]",
			"agentwork.yaml: cron.jobs[3].schedule: missing: set schedule (e.g. \"0 9 * * mon\") or at (RFC 3339)",
			"agentwork.yaml: cron.jobs[3].targets[0]: \"Tele gram\": want a connector name (1-64 characters of a-z, 0-9, _ and -), optionally followed by :<destination>, e.g. ops or ops:-1001234567890",
			"agentwork.yaml: cron.jobs[3].targets[2]: \"ops:\": the destination after ':' is empty; leave out the ':' to use the connector's own destination",
			"agentwork.yaml: cron.jobs[3].tools[0]: \"fs/read\": want a tool name or a glob of a-z, A-Z, 0-9, _ and - with * ? [ ] (e.g. fs__*)",
			"agentwork.yaml: cron.jobs[3].approval[0]: empty; want a tool name such as notify_user or a glob such as fs__*",
			"agentwork.yaml: cron.jobs[3].memory: \"all\": want none, light (long-term memory) or full (long-term memory, today's and yesterday's log)",
			"agentwork.yaml: cron.jobs[4].budget.daily_tokens: -1: must not be negative (0: no cap)",
			"agentwork.yaml: cron.jobs[4].dedup_window: 1000h0m0s: want 0 (cron.dedup_window) to 720h",
			"agentwork.yaml: cron.jobs[4].jitter: -1s: must not be negative",
			"agentwork.yaml: cron.jobs[4].retry.attempts: 99: want 0-10",
			"agentwork.yaml: cron.jobs[4].retry.backoff: -1s: must not be negative",
			"agentwork.yaml: cron.jobs[4].max_steps: -1: must not be negative (0: runner.max_steps)",
			"agentwork.yaml: cron.jobs[4].timeout: -1s: must not be negative (0: cron.timeout)",
			"agentwork.yaml: cron.jobs[5].catchup.max: only applies to policy run_all",
			"agentwork.yaml: cron.jobs[5].metadata: empty key",
			"agentwork.yaml: cron.jobs[3].targets[0]: \"Tele gram\" is not a connector (configured: ops)",
			"agentwork.yaml: cron.jobs[3].targets[1]: \"pigeon\" is not a connector (configured: ops)",
			"agentwork.yaml: cron.jobs[3].tools[1]: \"gh__*\" matches no tool: no MCP server is called \"gh\" (mcp.servers has none)",
			"agentwork.yaml: cron.jobs[3].approval[1]: \"x*\" matches no tool: want notify_user, memory_* (the memory tools), schedule_*, a built-in tool that is on (tools section: http_fetch, exec), or <server>__<tool> for a tool of an MCP server (mcp.servers has none); a glob without \"__\" matches only built-in tools",
			"agentwork.yaml: cron.jobs[5].model: \"strnog\": no such model (models: cheap, default)",
			"agentwork.yaml: cron.jobs[5].fallback[1]: \"nope\": no such model (models: cheap, default)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "agentwork.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := config.Load(path, types)
			if err == nil {
				t.Fatalf("Load = nil error, want\n%s", strings.Join(tt.want, "\n"))
			}
			// The file's name without its temporary directory.
			got := strings.Split(strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), ""), "\n")
			if !slices.Equal(got, tt.want) {
				t.Errorf("Load error =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// Secrets holds the file's secrets in the order they come: the ${VAR}
// values in the order of the file, then the secret fields' in the order
// of the file, each once.
func TestSecretsInOrder(t *testing.T) {
	t.Parallel()
	const yaml = `
bus:
  url: nats://agent:nats-pass-literal@nats.example:4222,nats://b:${NATS_PASS}@nats2.example:4222
  password: bus-pass-literal
model:
  provider: openai
  api_key: ${MODEL_KEY}
  headers: {X-Api-Key: model-header-literal, Accept: text/plain, Cookie: "${COOKIE}"}
models:
  small: {provider: openai, model: m, api_key: "${SMALL_KEY}", base_url: "https://u:base-pass-literal@api.example"}
http:
  admin_token: admin-token-literal-0123
webhook:
  tokens:
    - {name: ci, token: webhook-token-literal-0123}
    - {name: cd, token: "${MODEL_KEY}"}
  secrets:
    - {name: gh, secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}
connectors:
  alerts: {type: nats, subject: ops.alerts}
cron:
  jobs:
    - {id: a, schedule: "@daily", prompt: "token ${SMALL_KEY}", metadata: {token: meta-token-literal, secret: meta-secret-literal}}
    - {id: b, schedule: "@daily", prompt: p, metadata: {"${KEY_NAME}": key-named-by-env-literal}}
`
	f, err := config.Parse("agentwork.yaml", []byte(yaml), env(map[string]string{
		"NATS_PASS": "nats-pass-env", "MODEL_KEY": "sk-model-env-0123", "COOKIE": "sid=cookie-env", "SMALL_KEY": "hunter2", "KEY_NAME": "token",
	}), types)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		// ${VAR} values
		"nats-pass-env", "sk-model-env-0123", "sid=cookie-env", "hunter2",
		// secret fields written as they are
		"nats-pass-literal", "bus-pass-literal", "model-header-literal", "base-pass-literal", "admin-token-literal-0123",
		"webhook-token-literal-0123", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "meta-token-literal", "meta-secret-literal",
		"key-named-by-env-literal", // a secret key from the environment (token)
	}
	if got := f.Secrets(); !slices.Equal(got, want) {
		t.Errorf("Secrets() =\n%q\nwant\n%q", got, want)
	}
}
