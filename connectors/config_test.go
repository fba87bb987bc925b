package connectors_test

import (
	"bytes"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cs   connectors.Configs
		want []string // substrings of the error; none for valid
	}{
		{"console", connectors.Configs{"console": {Type: "console"}}, nil},
		{"console json", connectors.Configs{"console": {Type: "console", Format: "json"}}, nil},
		{"nats", connectors.Configs{"alerts": {Type: "nats", Subject: "alerts.agentwork", JetStream: true}}, nil},
		{"no type", connectors.Configs{"x": {}}, []string{"connectors.x.type: required"}},
		{"nats without subject", connectors.Configs{"alerts": {Type: "nats"}}, []string{"connectors.alerts.subject: required for type nats"}},
		{"nats wildcard", connectors.Configs{"alerts": {Type: "nats", Subject: "alerts.>"}}, []string{"connectors.alerts.subject:", "wildcard"}},
		{"console format", connectors.Configs{"c": {Type: "console", Format: "yaml"}}, []string{`connectors.c.format: "yaml": want text or json`}},
		{"field of another type", connectors.Configs{"c": {Type: "console", Subject: "a.b", JetStream: true}}, []string{
			"connectors.c.subject: only for type nats, not console", "connectors.c.jetstream: only for type nats, not console"}},
		{"format on nats", connectors.Configs{"n": {Type: "nats", Subject: "a", Format: "json"}}, []string{"connectors.n.format: only for type console, not nats"}},
		{"planned type", connectors.Configs{"tg": {Type: "telegram"}}, []string{"connectors.tg.type: telegram is not available in this build yet"}},
		{"unknown type", connectors.Configs{"x": {Type: "carrier-pigeon"}}, []string{`connectors.x.type: "carrier-pigeon" is not a connector type`}},
		{"bad name", connectors.Configs{"My Alerts": {Type: "console"}}, []string{"connectors.My Alerts: the name must be 1-64 characters of a-z, 0-9, _ and -"}},
		{"dot in name", connectors.Configs{"a.b": {Type: "console"}}, []string{"connectors.a.b: the name must be"}},
		{"every error reported", connectors.Configs{"a": {Type: "nats"}, "b": {Type: "slack"}}, []string{"connectors.a.subject", "connectors.b.type"}},
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

func TestConfigYAML(t *testing.T) {
	t.Parallel()
	src := `
console: {type: console}
alerts:
  type: nats
  subject: alerts.agentwork
  jetstream: true
`
	var cs connectors.Configs
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&cs); err != nil {
		t.Fatalf("decode: %v", err)
	}
	want := connectors.Configs{"console": {Type: "console"}, "alerts": {Type: "nats", Subject: "alerts.agentwork", JetStream: true}}
	if len(cs) != 2 || cs["console"] != want["console"] || cs["alerts"] != want["alerts"] {
		t.Errorf("decoded %+v, want %+v", cs, want)
	}
	dec = yaml.NewDecoder(strings.NewReader("x: {type: console, colour: red}\n"))
	dec.KnownFields(true)
	if err := dec.Decode(&cs); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Errorf("decode with an unknown key = %v, want an error naming colour", err)
	}
}

func TestBuild(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	var out bytes.Buffer
	deps := connectors.BuildDeps{Stdout: &out, Bus: b}

	reg, err := connectors.BuildAll(connectors.Configs{
		"console": {Type: "console"},
		"alerts":  {Type: "nats", Subject: "alerts.agentwork"},
	}, deps)
	if err != nil {
		t.Fatalf("BuildAll = %v", err)
	}
	if _, ok := reg["console"].(*connectors.Console); !ok {
		t.Errorf("console is %T, want *connectors.Console", reg["console"])
	}
	if n, ok := reg["alerts"].(*connectors.NATS); !ok || n.Subject() != "alerts.agentwork" {
		t.Errorf("alerts is %T, want *connectors.NATS on alerts.agentwork", reg["alerts"])
	}
	if err := reg["console"].Send(t.Context(), connectortest.Notification("hello")); err != nil || !strings.Contains(out.String(), "hello") {
		t.Errorf("built console: Send = %v, wrote %q; want hello in BuildDeps.Stdout", err, out.String())
	}

	for _, tc := range []struct {
		name string
		c    connectors.Config
		deps connectors.BuildDeps
		want string
	}{
		{"tg", connectors.Config{Type: "telegram"}, deps, "connectors.tg.type: telegram is not available in this build yet"},
		{"alerts", connectors.Config{Type: "nats"}, deps, "connectors.alerts.subject: required for type nats"},
		{"alerts", connectors.Config{Type: "nats", Subject: "a.b"}, connectors.BuildDeps{}, "connectors.alerts: type nats needs the bus"},
		{"loop", connectors.Config{Type: "nats", Subject: "agentwork.request.task.x"}, deps, "connectors.loop.subject:"},
		{"Bad", connectors.Config{Type: "console"}, deps, "connectors.Bad: the name must be"},
	} {
		if _, err := connectors.Build(tc.name, tc.c, tc.deps); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build(%q, %+v) = %v, want an error with %q", tc.name, tc.c, err, tc.want)
		}
	}
	if _, err := connectors.BuildAll(connectors.Configs{"a": {Type: "nats"}, "b": {Type: "ntfy"}}, deps); err == nil ||
		!strings.Contains(err.Error(), "connectors.a.") || !strings.Contains(err.Error(), "connectors.b.") {
		t.Errorf("BuildAll with two bad connectors = %v, want both named", err)
	}
}

// FuzzConfig: whatever YAML a user writes, Validate does not panic, and a
// config Validate accepts is one Build can construct.
func FuzzConfig(f *testing.F) {
	for _, s := range []string{
		"type: console", "type: console\nformat: json", "type: nats\nsubject: a.b", "type: nats\nsubject: a.>",
		"type: nats\nsubject: a.b\njetstream: true", "type: telegram", "{}", "type: [1]",
	} {
		f.Add(s)
	}
	b := bustest.New(f)
	f.Fuzz(func(t *testing.T, src string) {
		var c connectors.Config
		dec := yaml.NewDecoder(strings.NewReader(src))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil {
			return
		}
		if c.Validate() != nil {
			return
		}
		deps := connectors.BuildDeps{Stdout: &bytes.Buffer{}, Bus: b}
		_, err := connectors.Build("fuzz", c, deps)
		if err != nil && !strings.Contains(err.Error(), "pick a subject of your own") {
			// Only Build knows the bus prefix, so only Build can refuse
			// agentwork's own subjects.
			t.Fatalf("Validate() = nil for %+v, but Build = %v", c, err)
		}
	})
}
