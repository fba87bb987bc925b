package webhook_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/console"
	"github.com/agentwork/agentwork/connectors/nats"
	"github.com/agentwork/agentwork/triggers/webhook"
)

func TestGrantAllowsTarget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		targets []string
		allow   []string
		refuse  []string
	}{
		// The default: connectors alone, no destination.
		{nil, []string{"console", "mail", "alerts"}, []string{"mail:anyone@example.org", "alerts:agentwork.api.heartbeat.pause", "phone:-100123"}},
		{[]string{"console", "phone", "team:#ops", "mail:*@example.com"},
			[]string{"console", "phone", "team:#ops", "mail:a@example.com", "mail:a.b+c@example.com"},
			[]string{"team", "mail", "alerts", "team:#ops2", "team:#OPS", "mail:a@example.com.evil.org", "mail:a@example.org", "phone:-100123", "console:x"}},
		{[]string{"alerts:team.?"}, []string{"alerts:team.x"}, []string{"alerts:team.xy", "alerts:team.", "alerts"}},
		{[]string{"*"}, []string{"console", "mail"}, []string{"mail:a@example.com"}},
		{[]string{"*", "*:*"}, []string{"console", "mail:a@example.com"}, nil},
		{[]string{"t*:#ops-*"}, []string{"team:#ops-1", "tg:#ops-"}, []string{"team:#dev", "mail:#ops-1", "team"}},
	} {
		g := webhook.Grant{Targets: tc.targets}
		for _, a := range tc.allow {
			if !g.AllowsTarget(a) {
				t.Errorf("Grant{Targets: %q}.AllowsTarget(%q) = false, want true", tc.targets, a)
			}
		}
		for _, r := range tc.refuse {
			if g.AllowsTarget(r) {
				t.Errorf("Grant{Targets: %q}.AllowsTarget(%q) = true, want false", tc.targets, r)
			}
		}
	}
}

func TestGrantTargetsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ target, want string }{
		{"Console", `webhook.tokens[0].targets[0]: "Console": want a connector name`},
		{"mail:", `webhook.tokens[0].targets[0]: "mail:": the destination pattern after ':' must be 1-256 printable characters`},
		{"mail:a b", `the destination pattern after ':' must be`},
		{":x", `want a connector name`},
	} {
		cfg := webhook.Config{Tokens: []webhook.Token{{Name: "ci", Token: tokCI, Grant: webhook.Grant{Targets: []string{tc.target}}}}}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(targets [%q]) = %v, want %q", tc.target, err, tc.want)
		}
	}
	cfg := webhook.Config{Tokens: []webhook.Token{{Name: "ci", Token: tokCI, Grant: webhook.Grant{Targets: []string{"console", "mail:*@example.com", "t*", "*:*"}}}}}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate = %v, want nil", err)
	}
}

// TestTargetsRefused: a task naming a destination its credential's grant
// does not list is refused with 403 that names the target and the field
// to change, one naming agentwork's own subjects with 400 whatever the
// grant; nothing is queued for either.
func TestTargetsRefused(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Tokens[2].Targets = []string{"console", "alerts:team.*"}
	f := newFixture(t, cfg, webhook.WithConnectors("console", "alerts"),
		webhook.WithDestinations(connectors.Configs{"console": console.Config{}, "alerts": nats.Config{Subject: "alerts.agentwork"}}))
	for _, tc := range []struct {
		name   string
		header http.Header
		body   string
		status int
		says   []string
	}{
		{"own subject", bearer(tokCI), `{"prompt":"x","targets":["alerts:agentwork.api.heartbeat.pause"]}`, 400, []string{"targets[0]", "agentwork's own subjects"}},
		{"own subject, granted pattern", bearer(tokAny), `{"prompt":"x","targets":["alerts:team.x","alerts:agentwork.event.task.done"]}`, 400, []string{"targets[1]", "agentwork's own subjects"}},
		{"console destination", bearer(tokCI), `{"prompt":"x","targets":["console:x"]}`, 400, []string{"takes no destination"}},
		{"default grant", bearer(tokCI), `{"prompt":"x","targets":["console","alerts:team.x"]}`, 403,
			[]string{`targets[1]: credential "ci" may not send to "alerts:team.x"`, "lists no targets", `add "alerts:team.x" (or a pattern such as "alerts:*") to webhook.tokens[0].targets`}},
		{"signed, default grant", signedBy("g1", now, `{"prompt":"x","targets":["alerts:team.x"]}`, newSecret), `{"prompt":"x","targets":["alerts:team.x"]}`, 403,
			[]string{`credential "new"`, "webhook.secrets[1].targets"}},
		{"listed grant", bearer(tokAny), `{"prompt":"x","targets":["alerts:ops.x"]}`, 403,
			[]string{`credential "any" may not send to "alerts:ops.x"`, "(console, alerts:team.*) do not include it", "webhook.tokens[2].targets"}},
		{"listed grant, bare", bearer(tokAny), `{"prompt":"x","targets":["alerts"]}`, 403, []string{`may not send to "alerts"`}},
	} {
		r := f.do(t, call{body: tc.body, header: tc.header})
		if r.status != tc.status {
			t.Errorf("%s: status = %d, want %d; body %s", tc.name, r.status, tc.status, r.body)
			continue
		}
		d := r.problem(t)
		text := d.Detail
		for _, e := range d.Errors {
			text += " " + e.Field + ": " + e.Detail
		}
		for _, s := range tc.says {
			if !strings.Contains(text, s) {
				t.Errorf("%s: problem = %s, want it to say %q", tc.name, text, s)
			}
		}
	}
	if n := f.published(t); n != 0 {
		t.Errorf("refused requests published %d messages, want 0", n)
	}
	f.do(t, call{body: `{"prompt":"x","targets":["console","alerts"]}`, header: bearer(tokCI)}).accepted(t)
	f.do(t, call{body: `{"prompt":"x","source":"ops","targets":["console","alerts:team.x"]}`, header: bearer(tokAny)}).accepted(t)
}

// TestCheckTargets: what the cron scheduler asks at each fire of a job a
// credential's task created: the credential's grant as configured now.
func TestCheckTargets(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Tokens[2].Targets = []string{"console", "alerts:team.*"}
	h, err := webhook.New(bustest.New(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		credential string
		targets    []string
		want       string // "" for allowed
	}{
		{"any", []string{"console", "alerts:team.x"}, ""},
		{"any", []string{"alerts:ops.x"}, `its grant no longer allows the target "alerts:ops.x" (webhook.tokens[2].targets)`},
		{"ci", []string{"console", "alerts"}, ""},
		{"ci", []string{"alerts:team.x"}, `"alerts:team.x" (webhook.tokens[0].targets)`},
		{"new", []string{"alerts:team.x"}, `(webhook.secrets[1].targets)`},
		{"gone", nil, `credential "gone" is no longer configured`},
	} {
		err := h.CheckTargets(tc.credential, tc.targets)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckTargets(%q, %q) = %v, want %q", tc.credential, tc.targets, err, tc.want)
		}
	}
}

func TestMCPGrant(t *testing.T) {
	t.Parallel()
	tok := func(mcp *webhook.MCPGrant) webhook.Config {
		return webhook.Config{Tokens: []webhook.Token{{Name: "claude", Token: "0123456789abcdef0123", MCP: mcp}}}
	}
	if err := tok(&webhook.MCPGrant{Kinds: []string{"jobs", "cron"}}).Validate(); err == nil || !strings.Contains(err.Error(), `webhook.tokens[0].mcp.kinds[1]: "cron"`) {
		t.Errorf("Validate(kinds [jobs cron]) = %v, want an error naming kinds[1]", err)
	}
	if err := tok(&webhook.MCPGrant{ReadOnly: true, Kinds: []string{"approvals"}, Tools: []string{"notify_user"}}).Validate(); err != nil {
		t.Errorf("Validate(a good mcp grant) = %v", err)
	}
	for _, tc := range []struct {
		mcp     *webhook.MCPGrant
		token   string
		wantErr error
	}{
		{&webhook.MCPGrant{ReadOnly: true}, "0123456789abcdef0123", nil},
		{nil, "0123456789abcdef0123", webhook.ErrNoMCPGrant},
		{&webhook.MCPGrant{}, "wrong-0123456789abcdef", nil},
	} {
		h, err := webhook.New(bustest.New(t), tok(tc.mcp))
		if err != nil {
			t.Fatal(err)
		}
		c, err := h.MCP(tc.token)
		switch {
		case tc.token != "0123456789abcdef0123":
			if err == nil || errors.Is(err, webhook.ErrNoMCPGrant) {
				t.Errorf("MCP(wrong token) = %v, want an unknown token", err)
			}
		case tc.wantErr != nil:
			if !errors.Is(err, tc.wantErr) || c.Name != "claude" {
				t.Errorf("MCP(token without mcp) = %+v, %v, want ErrNoMCPGrant naming claude", c, err)
			}
		case err != nil || c.Name != "claude" || !c.MCP.ReadOnly:
			t.Errorf("MCP(token) = %+v, %v, want claude, read-only", c, err)
		}
	}
}

// Credential finds a token credential by name, with its grant: the
// console's user starts a workflow held to it.
func TestCredentialByName(t *testing.T) {
	t.Parallel()
	h, err := webhook.New(bustest.New(t), webhook.Config{Tokens: []webhook.Token{
		{Name: "ops", Token: "0123456789abcdef0123", Grant: webhook.Grant{Sources: []string{"console", "workflow"}, Names: []string{"deploy"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	c, ok := h.Credential("ops")
	if !ok || c.Name != "ops" || c.Allows == nil || !c.Allows("workflow", "deploy") || c.Allows("workflow", "other") || c.Allows("task", "deploy") {
		t.Errorf("Credential(ops) = %+v, %v, want ops allowed workflow deploy only", c, ok)
	}
	if _, ok := h.Credential("nobody"); ok {
		t.Error("Credential(nobody) found one")
	}
}
