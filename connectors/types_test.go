package connectors_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/invopop/jsonschema"
	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/console"
	"github.com/agentwork/agentwork/connectors/nats"
	"github.com/agentwork/agentwork/internal/yamlstrict"
)

var types = connectors.Types{console.Type, nats.Type}

func decode(t testing.TB, src string) (connectors.Configs, error) {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatalf("yaml %q: %v", src, err)
	}
	return types.Decode(&n)
}

func TestDecode(t *testing.T) {
	t.Parallel()
	cs, err := decode(t, "console: {type: console}\nalerts:\n  type: nats\n  subject: alerts.agentwork\n  jetstream: true\n")
	if err != nil {
		t.Fatalf("Decode = %v", err)
	}
	want := connectors.Configs{
		"console": console.Config{Format: console.FormatText}, // the type's defaults
		"alerts":  nats.Config{Subject: "alerts.agentwork", JetStream: true},
	}
	if !reflect.DeepEqual(cs, want) {
		t.Errorf("Decode = %#v, want %#v", cs, want)
	}
	for _, src := range []string{"", "~\n", "{}\n"} {
		if cs, err := decode(t, src); err != nil || len(cs) != 0 {
			t.Errorf("Decode(%q) = %v, %v; want no connectors", src, cs, err)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src string
		want      []string // each error, line first; in order
	}{
		{"unknown type", "console: {type: console}\nx:\n  type: carrier-pigeon\n",
			[]string{`line 3: connectors.x.type: "carrier-pigeon" is not a connector type of this build (known: console, nats)`}},
		{"planned type", "tg: {type: telegram, token: t}\n",
			[]string{`line 1: connectors.tg.type: "telegram" is not a connector type of this build (known: console, nats)`}},
		{"no type", "x:\n  format: json\n", []string{"line 2: connectors.x.type: required (one of console, nats)"}},
		{"empty entry", "x:\n", []string{"line 1: connectors.x: want a mapping with the connector's type (one of console, nats), e.g. {type: console}"}},
		{"not a mapping", "[console]\n", []string{"line 1: connectors: want a mapping of connector name to its config"}},
		{"key of another type", "c:\n  type: console\n  subject: a.b\n",
			[]string{`line 3: unknown key "connectors.c.subject" (known: format;`}},
		{"misspelt key", "alerts:\n  type: nats\n  subjet: a.b\n",
			[]string{`line 3: unknown key "connectors.alerts.subjet" (known: jetstream, subject;`}},
		{"wrong value type", "alerts:\n  type: nats\n  subject: a.b\n  jetstream: [yes]\n", []string{"line 4: cannot unmarshal !!seq into bool"}},
		{"type not a string", "x: {type: [1]}\n", []string{"line 1: cannot unmarshal !!seq into string"}},
		{"defined twice", "c: {type: console}\nc: {type: console}\n", []string{"line 2: connectors.c: defined twice (first at line 1)"}},
		{"every error", "a: {type: nats, subjet: x}\nb: {type: slack}\nc: {}\n", []string{
			`line 1: unknown key "connectors.a.subjet"`,
			`line 2: connectors.b.type: "slack" is not a connector type`,
			"line 3: connectors.c.type: required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := decode(t, tc.src)
			if err == nil {
				t.Fatalf("Decode(%q) = nil, want %q", tc.src, tc.want)
			}
			errs := []error{err}
			if many, ok := err.(interface{ Unwrap() []error }); ok {
				errs = many.Unwrap()
			}
			if len(errs) != len(tc.want) {
				t.Fatalf("Decode(%q) = %q, want %d errors: %q", tc.src, err, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if _, ok := errors.AsType[*yamlstrict.Error](errs[i]); !ok || !strings.HasPrefix(errs[i].Error(), w) {
					t.Errorf("Decode(%q) error %d = %q, want a line error starting %q", tc.src, i, errs[i], w)
				}
			}
		})
	}
}

func TestConfigsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cs   connectors.Configs
		want []string // substrings of the error; none for valid
	}{
		{"valid", connectors.Configs{"console": console.Config{}, "alerts": nats.Config{Subject: "a.b"}}, nil},
		{"field", connectors.Configs{"alerts": nats.Config{}}, []string{"connectors.alerts.subject: required for type nats"}},
		{"console format", connectors.Configs{"c": console.Config{Format: "yaml"}}, []string{`connectors.c.format: "yaml": want text or json`}},
		{"bad name", connectors.Configs{"My Alerts": console.Config{}}, []string{"connectors.My Alerts: the name must be 1-64 characters of a-z, 0-9, _ and -"}},
		{"dot in name", connectors.Configs{"a.b": console.Config{}}, []string{"connectors.a.b: the name must be"}},
		{"no config", connectors.Configs{"x": nil}, []string{"connectors.x: no config"}},
		{"every error", connectors.Configs{"a": nats.Config{}, "b": console.Config{Format: "x"}}, []string{"connectors.a.subject", "connectors.b.format"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cs.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// otherConfig is a Config of no type in the build.
type otherConfig struct{}

func (otherConfig) Validate() error { return nil }

func TestBuild(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	var out bytes.Buffer
	deps := connectors.BuildDeps{Stdout: &out, Bus: b}

	reg, err := types.BuildAll(connectors.Configs{
		"console": console.Config{},
		"alerts":  nats.Config{Subject: "alerts.agentwork"},
	}, deps)
	if err != nil {
		t.Fatalf("BuildAll = %v", err)
	}
	if _, ok := reg["console"].(*console.Connector); !ok {
		t.Errorf("console is %T, want *console.Connector", reg["console"])
	}
	if n, ok := reg["alerts"].(*nats.Connector); !ok || n.Subject() != "alerts.agentwork" {
		t.Errorf("alerts is %T, want *nats.Connector on alerts.agentwork", reg["alerts"])
	}
	if _, err := reg["console"].Send(t.Context(), connectortest.Notification("hello")); err != nil || !strings.Contains(out.String(), "hello") {
		t.Errorf("built console: Send = %v, wrote %q; want hello in BuildDeps.Stdout", err, out.String())
	}

	for _, tc := range []struct {
		name  string
		c     connectors.Config
		types connectors.Types
		want  string
	}{
		{"alerts", nats.Config{}, types, "connectors.alerts.subject: required for type nats"},
		{"loop", nats.Config{Subject: "agentwork.request.task.x"}, types, "connectors.loop: subject:"},
		{"Bad", console.Config{}, types, "connectors.Bad: the name must be"},
		{"x", otherConfig{}, types, "connectors.x: connectors_test.otherConfig is not the config of a connector type of this build (known: console, nats)"},
		{"x", &nats.Config{Subject: "a"}, types, "connectors.x: *nats.Config is not the config of a connector type"},
		{"alerts", nats.Config{Subject: "a"}, connectors.Types{console.Type}, "(known: console)"},
		{"c", console.Config{}, nil, "(known: none in this build)"},
	} {
		if _, err := tc.types.Build(tc.name, tc.c, deps); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build(%q, %#v) = %v, want an error with %q", tc.name, tc.c, err, tc.want)
		}
	}
	if _, err := types.BuildAll(connectors.Configs{"a": nats.Config{}, "b": otherConfig{}}, deps); err == nil ||
		!strings.Contains(err.Error(), "connectors.a.") || !strings.Contains(err.Error(), "connectors.b:") {
		t.Errorf("BuildAll with two bad connectors = %v, want both named", err)
	}
}

func TestTypes(t *testing.T) {
	t.Parallel()
	if got, want := types.Names(), []string{"console", "nats"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	if ty, ok := types.Lookup("nats"); !ok || ty.Name() != "nats" {
		t.Errorf("Lookup(nats) = %v, %v; want the nats type", ty.Name(), ok)
	}
	if _, ok := types.Lookup("telegram"); ok {
		t.Error("Lookup(telegram) found a type this build does not have")
	}
}

type typeKey struct {
	Type string `yaml:"type"`
}

func (typeKey) Validate() error { return nil }

type notStruct string

func (notStruct) Validate() error { return nil }

func TestDefineRefusesSpecsThatCannotWork(t *testing.T) {
	t.Parallel()
	build := func(string, console.Config, connectors.BuildDeps) (connectors.Connector, error) { return nil, nil }
	for name, define := range map[string]func(){
		"bad name": func() { connectors.Define(connectors.Spec[console.Config]{Name: "Con sole", New: build}) },
		"no New":   func() { connectors.Define(connectors.Spec[console.Config]{Name: "c"}) },
		"a key type": func() {
			connectors.Define(connectors.Spec[typeKey]{Name: "c", New: func(string, typeKey, connectors.BuildDeps) (connectors.Connector, error) { return nil, nil }})
		},
		"not a struct": func() {
			connectors.Define(connectors.Spec[notStruct]{Name: "c", New: func(string, notStruct, connectors.BuildDeps) (connectors.Connector, error) { return nil, nil }})
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Define with %s did not panic", name)
				}
			}()
			define()
		}()
	}
}

// TestSchema: the schema of an entry names every type and, per type, its
// keys and no others.
func TestSchema(t *testing.T) {
	t.Parallel()
	s := types.Schema(&jsonschema.Reflector{FieldNameTag: "yaml", RequiredFromJSONSchemaTags: true})
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Required   []string
		Properties struct {
			Type struct{ Enum []string }
		}
		AllOf []struct {
			If struct {
				Properties struct{ Type struct{ Const string } }
			}
			Then struct {
				Properties           map[string]json.RawMessage
				AdditionalProperties bool `json:"additionalProperties"`
			}
		} `json:"allOf"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Required, []string{"type"}) || !reflect.DeepEqual(got.Properties.Type.Enum, []string{"console", "nats"}) {
		t.Errorf("schema %s: want type required, one of console, nats", raw)
	}
	keys := map[string][]string{}
	for _, b := range got.AllOf {
		if b.Then.AdditionalProperties {
			t.Errorf("schema of type %s allows other keys", b.If.Properties.Type.Const)
		}
		for k := range b.Then.Properties {
			keys[b.If.Properties.Type.Const] = append(keys[b.If.Properties.Type.Const], k)
		}
	}
	for typ, want := range map[string][]string{"console": {"format", "type"}, "nats": {"jetstream", "subject", "type"}} {
		got := keys[typ]
		slices.Sort(got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("schema keys of type %s = %v, want %v", typ, got, want)
		}
	}
}

// FuzzDecode: whatever YAML a user writes under connectors, Decode and
// Validate do not panic, and what they accept Build can construct.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		"c: {type: console}", "c: {type: console, format: json}", "a: {type: nats, subject: a.b}", "a: {type: nats, subject: a.>}",
		"a: {type: nats, subject: a.b, jetstream: true}", "t: {type: telegram}", "{}", "c: {type: [1]}", "c: &x {type: console}\nd: *x",
		"c: {<<: {type: console}, format: json}",
	} {
		f.Add(s)
	}
	b := bustest.New(f)
	f.Fuzz(func(t *testing.T, src string) {
		var n yaml.Node
		if yaml.Unmarshal([]byte(src), &n) != nil {
			return
		}
		cs, err := types.Decode(&n)
		if err != nil || cs.Validate() != nil {
			return
		}
		for name, c := range cs {
			_, err := types.Build(name, c, connectors.BuildDeps{Stdout: &bytes.Buffer{}, Bus: b})
			if err != nil && !strings.Contains(err.Error(), "pick a subject of your own") {
				// Only Build knows the bus prefix, so only Build can refuse
				// agentwork's own subjects.
				t.Fatalf("Decode and Validate accepted %q, but Build(%s) = %v", src, name, err)
			}
		}
	})
}
