package config_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/config"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown top-level key", "bus:\n  data_dir: x\nmodle:\n  provider: script\n", []string{"agentwork.yaml:3:", `unknown key "modle"`}},
		{"unknown nested key", "model:\n  provider: openai\n  modle: gpt\n", []string{"agentwork.yaml:3:", `unknown key "model.modle"`}},
		{"unknown key in a list", "model:\n  script:\n    rules:\n      - mach: {source: x}\n", []string{"agentwork.yaml:4:", `"model.script.rules[0].mach"`}},
		{"unset env", "model:\n  api_key: ${NOPE_KEY}\n", []string{"agentwork.yaml:2:", "NOPE_KEY is not set"}},
		{"bad type", "runner:\n  concurrency: lots\n", []string{"agentwork.yaml:2:", "lots"}},
		{"broken yaml", "bus: [\n", []string{"agentwork.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse("agentwork.yaml", []byte(tt.yaml), env(nil))
			if err == nil {
				t.Fatalf("Parse(%q) = nil error, want %v", tt.yaml, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse(%q) error = %q, want it to contain %q", tt.yaml, err, w)
				}
			}
		})
	}
}

func TestParseExpandsEnvAndKeepsSecretsOutOfErrors(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("a.yaml", []byte("model:\n  provider: openai\n  model: gpt-4o-mini\n  api_key: ${KEY}\n  timeout: 45s\n"), env(map[string]string{"KEY": "sk-secret"}))
	if err != nil {
		t.Fatal(err)
	}
	if f.Model.APIKey != "sk-secret" || f.Model.Timeout.Seconds() != 45 {
		t.Fatalf("model = %+v, want api_key expanded and timeout 45s", f.Model.Config)
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLoadValidates(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "agentwork.yaml")
	os.WriteFile(p, []byte("model:\n  provider: gemini\n"), 0o600)
	_, err := config.Load(p)
	if err == nil || !strings.Contains(err.Error(), "model.provider") {
		t.Fatalf("Load = %v, want a model.provider error", err)
	}
}

func TestEmptyFileIsDefaults(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("e.yaml", nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if f.Model.Provider != "script" {
		t.Errorf("default provider = %q, want script", f.Model.Provider)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("bus:\n  data_dir: x\n"))
	f.Add([]byte("model:\n  api_key: ${K}\n  script:\n    rules:\n      - match: {source: heartbeat}\n        notify: hi\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		cfg, err := config.Parse("f.yaml", raw, env(map[string]string{"K": "v"}))
		if err == nil {
			_ = cfg.Validate()
		}
	})
}

func TestSchemaNamesSections(t *testing.T) {
	t.Parallel()
	raw, err := config.Schema()
	if err != nil {
		t.Fatal(err)
	}
	// Keys of every section: each package's Config has a definition of its own.
	for _, want := range []string{`"bus"`, `"model"`, `"runner"`, `"api_key"`, `"data_dir"`, `"checklist"`, `"schedule"`, `"tokens"`, `"max_steps"`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("schema lacks %s", want)
		}
	}
	var s struct {
		Defs map[string]struct {
			Required []string `json:"required"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	if req := s.Defs["BusConfig"].Required; len(req) > 0 {
		t.Errorf("schema requires bus keys %v; every key has a default", req)
	}
}
