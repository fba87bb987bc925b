package console_test

import (
	"bytes"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/console"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c    console.Config
		want string // "" for valid
	}{
		{console.Config{}, ""},
		{console.Config{Format: "text"}, ""},
		{console.Config{Format: "json"}, ""},
		{console.Config{Format: "yaml"}, `format: "yaml": want text or json`},
	} {
		err := tc.c.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && err.Error() != tc.want) {
			t.Errorf("%+v.Validate() = %v, want %q", tc.c, err, tc.want)
		}
	}
}

// TestType: an entry of agentwork.yaml becomes a console writing to
// BuildDeps.Stdout, in the format it asks for.
func TestType(t *testing.T) {
	t.Parallel()
	types := connectors.Types{console.Type}
	for _, tc := range []struct {
		src, want string
	}{
		{"c: {type: console}", "[heartbeat/default] hello\n"},
		{"c: {type: console, format: json}", `"text":"hello"`},
	} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(tc.src), &n); err != nil {
			t.Fatal(err)
		}
		cs, err := types.Decode(&n)
		if err != nil {
			t.Fatalf("Decode(%q) = %v", tc.src, err)
		}
		if err := cs.Validate(); err != nil {
			t.Fatalf("Validate(%q) = %v", tc.src, err)
		}
		var out bytes.Buffer
		c, err := types.Build("c", cs["c"], connectors.BuildDeps{Stdout: &out})
		if err != nil {
			t.Fatalf("Build(%q) = %v", tc.src, err)
		}
		if _, err := c.Send(t.Context(), connectortest.Notification("hello")); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("%s wrote %q, want %q in it", tc.src, out.String(), tc.want)
		}
	}
	if got := console.Type.Default(); got != (console.Config{Format: console.FormatText}) {
		t.Errorf("Type.Default() = %+v, want format text", got)
	}
}
