package config_test

import (
	"strings"
	"testing"

	"github.com/agentwork/agentwork/config"
)

// TestOwnSubjects: config check refuses a nats connector's subject and a
// target's destination under agentwork's prefix (or $..., _INBOX...), and
// says which and why: a notification there would drive agentwork itself.
func TestOwnSubjects(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"subject", "connectors:\n  alerts: {type: nats, subject: agentwork.api.heartbeat.pause}\n",
			`connectors.alerts.subject: "agentwork.api.heartbeat.pause" is under agentwork.>, agentwork's own subjects`},
		{"subject, case", "connectors:\n  alerts: {type: nats, subject: AgentWork.Event.x}\n", `connectors.alerts.subject: "AgentWork.Event.x" is under agentwork.>`},
		{"subject, prefix", "bus: {prefix: aw}\nconnectors:\n  alerts: {type: nats, subject: aw.timer.fired.x}\n", `connectors.alerts.subject: "aw.timer.fired.x" is under aw.>`},
		{"system subject", "connectors:\n  alerts: {type: nats, subject: $SYS.x}\n", `connectors.alerts.subject: "$SYS.x" is a NATS system subject`},
		{"destination", "connectors:\n  alerts: {type: nats, subject: a.b}\nheartbeat:\n  targets: ['alerts:agentwork.api.heartbeat.resume']\n",
			`heartbeat.targets[0]: "alerts:agentwork.api.heartbeat.resume": "agentwork.api.heartbeat.resume" is under agentwork.>`},
		{"inbox", "connectors:\n  alerts: {type: nats, subject: a.b}\ncron:\n  jobs:\n    - {id: a, schedule: '@daily', prompt: p, targets: ['alerts:_INBOX.x']}\n",
			`cron.jobs[0].targets[0]: "alerts:_INBOX.x": "_INBOX.x" is a NATS system subject`},
	} {
		f, err := config.Parse("agentwork.yaml", []byte(tt.yaml), env(nil), types)
		if err != nil {
			t.Fatalf("%s: Parse = %v", tt.name, err)
		}
		if err := f.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate = %v, want %q", tt.name, err, tt.want)
		}
	}
	for _, ok := range []string{
		"bus: {prefix: aw}\nconnectors:\n  alerts: {type: nats, subject: agentwork.alerts}\nheartbeat:\n  targets: ['alerts:agentwork.x']\n",
		"connectors:\n  alerts: {type: nats, subject: agentworks.alerts}\nheartbeat:\n  targets: ['alerts:ops.agentwork.x']\n",
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

// TestGrantTargets: config check says which of a webhook grant's targets
// is wrong: a connector that does not exist, a destination its type does
// not take, a pattern that is not one.
func TestGrantTargets(t *testing.T) {
	t.Parallel()
	const conns = "connectors:\n  console: {type: console}\n  alerts: {type: nats, subject: a.b}\n"
	tok := func(targets string) string {
		return conns + "webhook:\n  tokens:\n    - {name: ci, token: ci-token-0123456789abcdef, targets: " + targets + "}\n"
	}
	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"no connector", tok("[console, pigeon]"), `webhook.tokens[0].targets[1]: "pigeon": no connector is called "pigeon" (configured: alerts, console)`},
		{"no connector matches", tok("['pig*:x']"), `webhook.tokens[0].targets[0]: "pig*:x": no connector is called "pig*"`},
		{"no destination", tok("['console:x']"), `webhook.tokens[0].targets[0]: "console:x": connector console: this connector type takes no destination`},
		{"no destination pattern", tok("['console:*']"), `"console:*": connector console: this connector type takes no destination`},
		{"bad destination", tok("['alerts:a..b']"), `webhook.tokens[0].targets[0]: "alerts:a..b": connector alerts: destination: want a NATS subject`},
		{"own subject", tok("['alerts:agentwork.api.heartbeat.pause']"), `"alerts:agentwork.api.heartbeat.pause": connector alerts: "agentwork.api.heartbeat.pause" is under agentwork.>`},
		{"empty destination", tok("['alerts:']"), `webhook.tokens[0].targets[0]: "alerts:": the destination pattern after ':' must be 1-256 printable characters`},
		{"bad name", tok("['Alerts']"), `webhook.tokens[0].targets[0]: "Alerts": want a connector name`},
		{"secret", conns + "webhook:\n  secrets:\n    - {name: gh, secret: whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=, targets: [nope]}\n", `webhook.secrets[0].targets[0]: "nope": no connector`},
	} {
		f, err := config.Parse("agentwork.yaml", []byte(tt.yaml), env(nil), types)
		if err == nil {
			err = f.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate = %v, want %q", tt.name, err, tt.want)
		}
	}
	for _, ok := range []string{
		tok("[console, alerts, 'alerts:team.*', 'alerts:ops.x']"),
		tok("['*', '*:*']"),
		tok("[]"),
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

// TestGrantReachesTheApprovalQuestion: config check refuses a webhook
// credential whose grant lets it deliver to where the question of a gated
// tool call goes, when anyone reached there may decide: its holder would
// read the question and could approve its own calls.
func TestGrantReachesTheApprovalQuestion(t *testing.T) {
	t.Parallel()
	const conns = "connectors:\n  console: {type: console}\n  alerts: {type: nats, subject: a.b}\n"
	cfg := func(runner, targets string) string {
		return conns + "runner:\n" + runner + "webhook:\n  tokens:\n    - {name: ci, token: ci-token-0123456789abcdef, targets: " + targets + "}\n"
	}
	const gated = "  approval: [notify_user]\n"
	for _, tt := range []struct{ name, yaml, want string }{
		{"default targets", cfg(gated, "['alerts:*']"), `webhook.tokens[0] (ci): its grant's target "alerts:*" reaches "alerts", where the question of a gated tool call goes`},
		{"approvals targets", cfg(gated+"  approvals: {targets: ['alerts:ops.approvals']}\n", "['alerts:ops.*']"), `reaches "alerts:ops.approvals"`},
		{"link approver", cfg(gated+"  approvals: {approvers: [link]}\n", "['alerts:*']"), `webhook.tokens[0] (ci)`},
	} {
		f, err := config.Parse("agentwork.yaml", []byte(tt.yaml), env(nil), types)
		if err == nil {
			err = f.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate = %v, want %q", tt.name, err, tt.want)
		}
	}
	for _, ok := range []string{
		cfg(gated, "[console, alerts]"), // the connectors alone: their configured destination only
		cfg("", "['alerts:*']"),         // no gated calls
		cfg(gated+"  approvals: {targets: ['alerts:ops.approvals']}\n", "['alerts:team.*']"), // the grant misses the question
		cfg(gated+"  approvals: {approvers: [admin]}\n", "['alerts:*']"),                     // only the admin decides
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
