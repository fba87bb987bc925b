package config_test

import (
	"strings"
	"testing"

	"github.com/agentwork/agentwork/config"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/console"
	"github.com/agentwork/agentwork/connectors/nats"
	"github.com/agentwork/agentwork/connectors/telegram"
)

// TestApproversMustBeAbleToAnswer: config check refuses an approver no
// channel can record: a person of a connector that receives no answers
// (only Telegram's buttons do), or of no connector. Such an approver
// could never decide (and naming approvers without link drops the links).
func TestApproversMustBeAbleToAnswer(t *testing.T) {
	t.Parallel()
	withTelegram := connectors.Types{console.Type, nats.Type, telegram.Type}
	const conns = "connectors:\n  console: {type: console}\n  alerts: {type: nats, subject: a.b}\n  phone: {type: telegram, bot_token: '123:abc', chat_id: '42'}\n"
	runner := func(approvers string) string {
		return conns + "runner:\n  approval: [notify_user]\n  approvals: {approvers: " + approvers + "}\n"
	}
	flow := func(approvers string) string {
		return conns + "workflows:\n  deploy:\n    steps:\n      - id: ask\n        approval: {message: go, targets: [phone], approvers: " + approvers + "}\n"
	}
	for _, tt := range []struct{ name, yaml, want string }{
		{"console", runner("['console:me']"), `runner.approvals.approvers[0]: "console:me": no connector receives the answers of console users`},
		{"slack", runner("[link, 'slack:U024BE7LH']"), `runner.approvals.approvers[1]: "slack:U024BE7LH": no connector receives the answers of slack users`},
		{"connector name", runner("['phone:123456789']"), `"phone:123456789": no connector receives the answers of phone users (these do: telegram)`},
		{"workflow step", flow("['slack:U1']"), `"slack:U1": no connector receives the answers of slack users`},
	} {
		f, err := config.Parse("agentwork.yaml", []byte(tt.yaml), env(nil), withTelegram)
		if err == nil {
			err = f.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "link") {
			t.Errorf("%s: Validate = %v, want %q and what to write instead", tt.name, err, tt.want)
		}
	}
	for _, ok := range []string{
		runner("['telegram:123456789']"),
		runner("[link]"),
		runner("[admin]"),
		runner("['telegram:1', link, admin]"),
		flow("['telegram:1', link]"),
	} {
		f, err := config.Parse("agentwork.yaml", []byte(ok), env(nil), withTelegram)
		if err == nil {
			err = f.Validate()
		}
		if err != nil {
			t.Errorf("Validate(%q) = %v, want nil", ok, err)
		}
	}
}
