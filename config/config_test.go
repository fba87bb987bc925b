package config_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/config"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/console"
	"github.com/agentwork/agentwork/connectors/nats"
)

// types are the connector types of the build.
var types = connectors.Types{console.Type, nats.Type}

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
		{"unknown connector type", "connectors:\n  console: {type: console}\n  ops:\n    type: telegram\n",
			[]string{`agentwork.yaml:4: connectors.ops.type: "telegram" is not a connector type of this build (known: console, nats)`}},
		{"connector without a type", "connectors:\n  ops: {subject: a.b}\n", []string{"agentwork.yaml:2: connectors.ops.type: required (one of console, nats)"}},
		{"unknown connector key", "connectors:\n  alerts:\n    type: nats\n    subjct: a.b\n", []string{"agentwork.yaml:4:", `unknown key "connectors.alerts.subjct" (known: jetstream, subject;`}},
		{"connectors twice", "connectors: {}\nconnectors: {}\n", []string{"agentwork.yaml:2: connectors: defined twice (first at line 1)"}},
		{"unset env in a connector", "connectors:\n  alerts:\n    type: nats\n    subject: ${NOPE_SUBJECT}\n", []string{"agentwork.yaml:4:", "NOPE_SUBJECT is not set"}},
		{"errors in file order", "connectors:\n  x: {type: pigeon}\nmodle: {}\n", []string{"agentwork.yaml:2: connectors.x.type", "\nagentwork.yaml:3: unknown key \"modle\""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse("agentwork.yaml", []byte(tt.yaml), env(nil), types)
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
	f, err := config.Parse("a.yaml", []byte("model:\n  provider: openai\n  model: gpt-4o-mini\n  api_key: ${KEY}\n  timeout: 45s\n"), env(map[string]string{"KEY": "sk-secret"}), types)
	if err != nil {
		t.Fatal(err)
	}
	if f.Model.APIKey != "sk-secret" || f.Model.Timeout.Seconds() != 45 {
		t.Fatalf("model = %+v, want api_key expanded and timeout 45s", f.Model.Config)
	}
	// Hints name the variable the key came from, whatever it is called.
	if f.Model.APIKeyEnv != "KEY" || !strings.Contains(f.Model.KeyHint(""), "${KEY}") {
		t.Errorf("APIKeyEnv = %q, hint %q; want KEY and a hint naming ${KEY}", f.Model.APIKeyEnv, f.Model.KeyHint(""))
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLoadValidates(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "agentwork.yaml")
	os.WriteFile(p, []byte("model:\n  provider: gemini\n"), 0o600)
	_, err := config.Load(p, types)
	if err == nil || !strings.Contains(err.Error(), "model.provider") {
		t.Fatalf("Load = %v, want a model.provider error", err)
	}
}

func TestEmptyFileIsDefaults(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("e.yaml", nil, env(nil), types)
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
		cfg, err := config.Parse("f.yaml", raw, env(map[string]string{"K": "v"}), types)
		if err == nil {
			_ = cfg.Validate()
		}
	})
}

func TestSchemaNamesSections(t *testing.T) {
	t.Parallel()
	raw, err := config.Schema(types)
	if err != nil {
		t.Fatal(err)
	}
	// Keys of every section: each package's Config has a definition of its own.
	for _, want := range []string{`"bus"`, `"model"`, `"runner"`, `"api_key"`, `"data_dir"`, `"checklist"`, `"schedule"`, `"tokens"`, `"max_steps"`, `"max_tool_calls"`, `"tasks"`, `"mcp"`, `"idempotent_tools"`,
		`"jetstream"`, `"subject"`, `"format"`} { // the connector types' keys
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

func TestConnectors(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("a.yaml", []byte("connectors:\n  console: {type: console, format: json}\n  alerts:\n    type: nats\n    subject: ${SUBJECT}\nheartbeat:\n  targets: [alerts]\n"),
		env(map[string]string{"SUBJECT": "ops.alerts"}), types)
	if err != nil {
		t.Fatal(err)
	}
	want := connectors.Configs{"console": console.Config{Format: "json"}, "alerts": nats.Config{Subject: "ops.alerts"}}
	if !reflect.DeepEqual(f.Connectors, want) {
		t.Errorf("connectors = %#v, want %#v", f.Connectors, want)
	}
	if err := f.Validate(); err != nil {
		t.Errorf("Validate = %v", err)
	}

	// Validate names the field of a connector as it does any other.
	f, err = config.Parse("a.yaml", []byte("connectors:\n  alerts: {type: nats}\n"), env(nil), types)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "connectors.alerts.subject: required for type nats (e.g. alerts.agentwork)") {
		t.Errorf("Validate without a subject = %v, want connectors.alerts.subject named", err)
	}
}

// With no connectors section there is one console connector named console,
// if the build has the console type.
func TestDefaultConnector(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		src   string
		types connectors.Types
		want  connectors.Configs
	}{
		{"", types, connectors.Configs{"console": console.Config{Format: "text"}}},
		{"log: {level: debug}\n", types, connectors.Configs{"console": console.Config{Format: "text"}}},
		{"connectors: {}\n", types, connectors.Configs{"console": console.Config{Format: "text"}}},
		{"connectors:\n  ops: {type: console}\n", types, connectors.Configs{"ops": console.Config{Format: "text"}}},
		{"", connectors.Types{nats.Type}, nil},
	} {
		f, err := config.Parse("a.yaml", []byte(tc.src), env(nil), tc.types)
		if err != nil {
			t.Fatalf("Parse(%q) = %v", tc.src, err)
		}
		if len(f.Connectors) != len(tc.want) || (len(tc.want) > 0 && !reflect.DeepEqual(f.Connectors, tc.want)) {
			t.Errorf("Parse(%q) with types %v: connectors = %#v, want %#v", tc.src, tc.types.Names(), f.Connectors, tc.want)
		}
	}
	f, err := config.Load("", types)
	if err != nil || !reflect.DeepEqual(f.Connectors, connectors.Configs{"console": console.Config{Format: "text"}}) {
		t.Errorf(`Load("") = %v, %v; want the console connector`, f, err)
	}
}

// TestExamplesAndDocs: every example config loads, and every connectors
// section the docs show parses and validates: what they tell users to
// write works.
func TestExamplesAndDocs(t *testing.T) {
	t.Parallel()
	examples, err := filepath.Glob("../examples/*/agentwork.yaml")
	if err != nil || len(examples) == 0 {
		t.Fatalf("no example configs (%v)", err)
	}
	for _, p := range examples {
		if _, err := config.Load(p, types); err != nil {
			t.Errorf("Load(%s) = %v", p, err)
		}
	}
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	fence := regexp.MustCompile("(?s)```yaml\n(.*?)```")
	sections := 0
	for _, p := range append(docs, "../README.md") {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fence.FindAllSubmatch(raw, -1) {
			if !regexp.MustCompile(`(?m)^connectors:`).Match(m[1]) {
				continue
			}
			sections++
			f, err := config.Parse(p, m[1], env(nil), types)
			if err == nil {
				err = f.Connectors.Validate()
			}
			if err != nil {
				t.Errorf("%s: the connectors section of a YAML block does not load: %v\n%s", p, err, m[1])
			}
		}
	}
	if sections == 0 {
		t.Error("no connectors section found in the docs")
	}
}

// TestLoadClientNeedsNoServerSecrets: a client command reads only the bus
// section, so secrets only the server uses need not be set for it, while
// the bus section is still checked as strictly as serve checks it.
func TestLoadClientNeedsNoServerSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "agentwork.yaml")
	body := "bus:\n  data_dir: data\n  prefix: team\nmodel:\n  provider: openai\n  model: m\n  api_key: ${AGENTWORK_TEST_SURELY_UNSET_KEY}\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(path, types); err == nil || !strings.Contains(err.Error(), "AGENTWORK_TEST_SURELY_UNSET_KEY") {
		t.Fatalf("Load = %v, want the unset variable reported (serve needs it)", err)
	}
	f, err := config.LoadClient(path)
	if err != nil {
		t.Fatalf("LoadClient = %v, want the bus section only", err)
	}
	if f.Bus.Prefix != "team" || f.Resolve(f.Bus.DataDir) != filepath.Join(dir, "data") {
		t.Errorf("LoadClient bus = %+v, want prefix team and data dir beside the file", f.Bus)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("bus:\n  prefx: team\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.LoadClient(bad); err == nil || !strings.Contains(err.Error(), "bad.yaml:2") {
		t.Errorf("LoadClient(unknown bus key) = %v, want an error at bad.yaml:2", err)
	}
}

// Secrets holds the value of every field that is a secret, whether the
// file took it from the environment or wrote it as is, and each ${VAR}
// value of secret.Min bytes or more; not the values of other fields.
func TestSecretsIncludeLiteralSecretFields(t *testing.T) {
	t.Parallel()
	const yaml = `
bus:
  url: nats://agent:nats-pass-literal@nats.example:4222
  user: agent
  password: bus-pass-literal
model:
  provider: openai
  model: gpt-4o-mini
  api_key: sk-literal-0123456789
  headers: {X-Api-Key: model-header-literal, OpenAI-Organization: org-not-a-secret}
models:
  small: {provider: openai, model: gpt-4o-mini, api_key: "${SMALL_KEY}"}
http:
  admin_token: admin-token-literal-0123
webhook:
  tokens:
    - {name: ci, token: webhook-token-literal-0123}
  secrets:
    - {name: gh, secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}
tools:
  exec:
    allow: [[df, -h]]
    env: {LANG: C.UTF-8, DEPLOY_TOKEN: exec-token-literal}
  http_fetch:
    allow:
      - prefix: https://api.example.com/
        headers: {Authorization: Bearer fetch-token-literal, Accept: application/json}
connectors:
  alerts: {type: nats, subject: ops.alerts}
`
	f, err := config.Parse("agentwork.yaml", []byte(yaml), env(map[string]string{"SMALL_KEY": "hunter2"}), types)
	if err != nil {
		t.Fatal(err)
	}
	got := f.Secrets()
	for _, want := range []string{
		"hunter2", "nats-pass-literal", "bus-pass-literal", "sk-literal-0123456789", "model-header-literal",
		"admin-token-literal-0123", "webhook-token-literal-0123", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"exec-token-literal", "Bearer fetch-token-literal", "fetch-token-literal",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("Secrets() = %q, want it to hold %q", got, want)
		}
	}
	for _, not := range []string{"org-not-a-secret", "C.UTF-8", "application/json", "gpt-4o-mini", "ops.alerts", "agent", "Bearer"} {
		if slices.Contains(got, not) {
			t.Errorf("Secrets() = %q, want no %q (not a secret field)", got, not)
		}
	}
}

// A secret field whose value is an alias (*name) of a value anchored
// elsewhere holds that value: it is a secret as much as one written there,
// though the anchor's own field is not one (a job's metadata, an env entry
// whose name does not say so).
func TestSecretsThroughAliases(t *testing.T) {
	t.Parallel()
	const yaml = `
cron:
  jobs:
    - {id: a, schedule: "@daily", prompt: p, metadata: {k: &model_key sk-anchored-in-metadata-0123}}
    - {id: b, schedule: "@daily", prompt: p, metadata: &h {Authorization: Bearer-merged-0123456789}}
    - {id: c, schedule: "@daily", prompt: p, metadata: &t {GH_TOKEN: ghs-merged-in-a-list-0123}}
models:
  small: {provider: openai, model: m, api_key: *model_key}
mcp:
  servers:
    gh:
      command: gh-mcp
      env: {GH_HOST: github.example, GH_PAT: &pat ghp_anchored_literal_0123}
    api:
      url: https://mcp.example/
      headers: {Authorization: *pat}
    merged:
      url: https://mcp2.example/
      headers: {<<: *h, X-Trace: t}
    listed:
      command: other-mcp
      env: {<<: [*t, *h]}
`
	f, err := config.Parse("agentwork.yaml", []byte(yaml), env(nil), types)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Models["small"].APIKey; got != "sk-anchored-in-metadata-0123" {
		t.Fatalf("models.small.api_key = %q, want the anchored value", got)
	}
	got := f.Secrets()
	for _, want := range []string{"sk-anchored-in-metadata-0123", "ghp_anchored_literal_0123", "Bearer-merged-0123456789", "ghs-merged-in-a-list-0123"} {
		if !slices.Contains(got, want) {
			t.Errorf("Secrets() = %q, want it to hold %q (a secret field's value through an alias)", got, want)
		}
	}
}

// TestSecretsThroughMergeKeys: what yaml.v3 decodes into a credential map
// through merge keys and aliases is a secret, however the merges nest;
// what it does not take for a merge (a key tagged !!merge that is not <<)
// is an ordinary entry; a name given by an alias counts by the name; and
// merges that fan out are walked once each, not once per path.
func TestSecretsThroughMergeKeys(t *testing.T) {
	t.Parallel()
	parse := func(t *testing.T, jobs, headers string) (map[string]string, []string) {
		t.Helper()
		y := "cron:\n  jobs:\n" + jobs + "mcp:\n  servers:\n    api:\n      url: https://mcp.example/\n      headers: " + headers + "\n"
		f, err := config.Parse("agentwork.yaml", []byte(y), env(nil), types)
		if err != nil {
			t.Fatalf("%v\n%s", err, y)
		}
		return f.MCP.Servers["api"].Headers, f.Secrets()
	}
	job := func(i int, rest string) string {
		return fmt.Sprintf("    - {id: a%d, schedule: \"@daily\", prompt: p, %s}\n", i, rest)
	}
	var deep strings.Builder
	deep.WriteString(job(0, "metadata: &a0 {Authorization: Bearer-deep-merge-0123456789}"))
	for i := 1; i < 12; i++ {
		deep.WriteString(job(i, fmt.Sprintf("metadata: &a%d {<<: *a%d}", i, i-1)))
	}
	var fan strings.Builder
	fan.WriteString(job(0, "metadata: &f0 {X-Api-Key: fan-out-key-0123456789}"))
	for i := 1; i <= 8; i++ {
		fan.WriteString(job(i, fmt.Sprintf("metadata: &f%d {<<: [%s]}", i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*f%d, ", i-1), 12), ", "))))
	}
	for _, tc := range []struct {
		name, jobs, headers, header, want string
	}{
		{"merges 12 deep", deep.String(), "{<<: *a11}", "Authorization", "Bearer-deep-merge-0123456789"},
		{"a key tagged !!merge is no merge", job(0, "metadata: {}"), "{!!merge Authorization: Bearer-tagged-key-0123456789}", "Authorization", "Bearer-tagged-key-0123456789"},
		{"a personal access token", job(0, "metadata: {}"), "{GH_PAT: ghp-pat-value-0123456789}", "GH_PAT", "ghp-pat-value-0123456789"},
		{"a personal access token, with hyphens", job(0, "metadata: {}"), "{X-GitHub-PAT: ghp-hyphen-pat-0123456789}", "X-GitHub-PAT", "ghp-hyphen-pat-0123456789"},
		{"a URL with a password", job(0, "metadata: {}"), "{X-Upstream: \"https://u:url-password-0123@up.example/\"}", "X-Upstream", "url-password-0123"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, got := parse(t, tc.jobs, tc.headers)
			if !strings.Contains(h[tc.header], tc.want) {
				t.Fatalf("decoded headers = %v, want %s holding %q", h, tc.header, tc.want)
			}
			if !slices.Contains(got, tc.want) {
				t.Errorf("Secrets() = %q misses %q, which the decoder put in header %s", got, tc.want, tc.header)
			}
		})
	}
	// 12^8 paths to one mapping: the secrets are read at once, and the
	// decoder refuses the document.
	t.Run("12 merges a level, 8 levels", func(t *testing.T) {
		y := "cron:\n  jobs:\n" + fan.String() + "mcp:\n  servers:\n    api:\n      url: https://mcp.example/\n      headers: {<<: *f8}\n"
		done := make(chan error, 1)
		go func() {
			_, err := config.Parse("agentwork.yaml", []byte(y), env(nil), types)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "excessive aliasing") {
				t.Errorf("Parse: %v, want yaml's excessive aliasing", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Parse of a config whose merges fan out did not return within a minute")
		}
	})
}

// TestRefusedYAMLForms: a key written as an alias and a !!binary value are
// refused with the line, not decoded into a field or a secret that the
// config's secrets (found by the text of the file) would miss.
func TestRefusedYAMLForms(t *testing.T) {
	t.Parallel()
	const jobs = "cron:\n  jobs:\n    - {id: a0, schedule: \"@daily\", prompt: p, name: &cwd env, metadata: {k: &args headers}}\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"an env map's key by alias", jobs + "mcp:\n  servers:\n    s:\n      command: node\n      *cwd : {GITHUB_TOKEN: ghp-alias-env-0123456789}\n", "agentwork.yaml:8: a key written as an alias (*cwd) is not taken"},
		{"a header map's key by alias", jobs + "mcp:\n  servers:\n    s:\n      url: https://mcp.example/\n      *args : {Authorization: Bearer-alias-hdr-0123456789}\n", "agentwork.yaml:8: a key written as an alias (*args) is not taken"},
		{"a header's name by alias", jobs + "mcp:\n  servers:\n    s:\n      url: https://mcp.example/\n      headers: {*cwd : Bearer-alias-key-0123456789}\n", "agentwork.yaml:8: a key written as an alias (*cwd) is not taken"},
		{"a !!binary header", "mcp:\n  servers:\n    s:\n      url: https://mcp.example/\n      headers: {Authorization: !!binary QmVhcmVyLWJpbmFyeS0wMTIzNDU2Nzg5}\n", "agentwork.yaml:5: a !!binary value is not taken"},
		{"a !!binary header name", "mcp:\n  servers:\n    s:\n      url: https://mcp.example/\n      headers: {!!binary QXV0aG9yaXphdGlvbg==: Bearer-binname-0123456789}\n", "agentwork.yaml:5: a !!binary value is not taken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("agentwork.yaml", []byte(tc.yaml), env(nil), types)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v, want an error with %q", err, tc.want)
			}
			for _, secret := range []string{"ghp-alias", "Bearer-"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the error shows the value: %v", err)
				}
			}
		})
	}
}
