package config_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/config"
)

// The models section and every model and fallback list: decoded, each
// named model checked under its own name, and every name checked against
// the models there are.
func TestModelsConfig(t *testing.T) {
	t.Parallel()
	const good = `
model:
  provider: openai
  model: gpt-4o
  api_key: ${OPENAI_API_KEY}
models:
  cheap:
    provider: openai
    model: gpt-4o-mini
    api_key: ${OPENAI_API_KEY}
  claude:
    provider: anthropic
    model: claude-sonnet-4-5
    api_key: ${ANTHROPIC_API_KEY}
runner:
  fallback: [claude]
heartbeat:
  model: cheap
  fallback: [default]
  max_steps: 3
cron:
  jobs:
    - id: report
      schedule: "0 9 * * mon"
      prompt: analyse last week's sales
      model: claude
      fallback: [default, cheap]
      max_steps: 12
      timeout: 10m
tasks:
  triage:
    model: cheap
    max_steps: 4
    timeout: 1m
`
	f, err := config.Parse("agentwork.yaml", []byte(good), env(map[string]string{"OPENAI_API_KEY": "sk-0123456789", "ANTHROPIC_API_KEY": "sk-ant-0123456789"}), types)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	if got := f.ModelNames(); !slices.Equal(got, []string{"cheap", "claude", "default"}) {
		t.Errorf("ModelNames() = %v", got)
	}
	if m := f.Models["claude"]; m.Provider != "anthropic" || m.APIKey != "sk-ant-0123456789" || m.APIKeyEnv != "ANTHROPIC_API_KEY" || m.Section != "models.claude" {
		t.Errorf("models.claude = %+v, want its own provider and key, from ${ANTHROPIC_API_KEY}", m.Config)
	}
	if j := f.Cron.Jobs[0]; j.Model != "claude" || !slices.Equal(j.Fallback, []string{"default", "cheap"}) || j.MaxSteps != 12 || time.Duration(j.Timeout) != 10*time.Minute {
		t.Errorf("cron.jobs[0] = %+v", j)
	}
	if tc := f.Tasks["triage"]; tc.Model != "cheap" || tc.MaxSteps != 4 || tc.Timeout != time.Minute {
		t.Errorf("tasks.triage = %+v", tc)
	}

	for _, tt := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown job model", strings.Replace(good, "      timeout: 10m\n", "      timeout: 10m\n    - id: b\n      schedule: \"@daily\"\n      prompt: x\n      model: strnog\n", 1),
			[]string{`cron.jobs[1].model: "strnog": no such model (models: cheap, claude, default)`}},
		{"unknown fallback", strings.Replace(good, "fallback: [claude]", "fallback: [claude, gpt5]", 1),
			[]string{`runner.fallback[1]: "gpt5": no such model (models: cheap, claude, default)`}},
		{"unknown heartbeat and task models", strings.Replace(strings.Replace(good, "model: cheap\n  fallback", "model: chaep\n  fallback", 1), "triage:\n    model: cheap", "triage:\n    model: x", 1),
			[]string{`heartbeat.model: "chaep": no such model`, `tasks.triage.model: "x": no such model`}},
		{"a model named default", strings.Replace(good, "  cheap:\n", "  default:\n", 1), []string{"models.default: the model section is the model named default"}},
		{"a named model's own field", strings.Replace(good, "model: claude-sonnet-4-5", "model: claude-sonnet-4-5\n    temperature: 1.5", 1),
			[]string{"models.claude.temperature: 1.5 is out of range for Anthropic"}},
	} {
		f, err := config.Parse("agentwork.yaml", []byte(tt.yaml), env(map[string]string{"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}), types)
		if err == nil {
			err = f.Validate()
		}
		for _, w := range tt.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: Validate = %v, want an error containing %q", tt.name, err, w)
			}
		}
	}
	f, err = config.Parse("agentwork.yaml", []byte("models:\n  cheap:\n    model: gpt-4o-mini\n"), env(nil), types)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "models.cheap.provider: required") {
		t.Errorf("Validate(a named model without a provider) = %v, want provider required", err)
	}
}
