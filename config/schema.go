package config

import (
	"encoding/json"
	"path"
	"reflect"
	"strings"
	"time"

	"github.com/invopop/jsonschema"
)

// Schema returns the JSON Schema of agentwork.yaml.
func Schema() ([]byte, error) {
	r := &jsonschema.Reflector{
		FieldNameTag: "yaml",
		// Every key has a default; the few a section needs are checked by
		// its Validate, with a message that says what to do.
		RequiredFromJSONSchemaTags: true,
		Namer:                      defName,
		Mapper: func(t reflect.Type) *jsonschema.Schema {
			if t == reflect.TypeFor[time.Duration]() {
				return &jsonschema.Schema{Type: "string", Pattern: `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`, Description: "a Go duration, e.g. 30s, 5m, 1h30m"}
			}
			return nil
		},
	}
	s := r.Reflect(&File{})
	s.ID = "https://agentwork.dev/schemas/agentwork.yaml.json"
	s.Title = "agentwork.yaml"
	return json.MarshalIndent(s, "", "  ")
}

// defName names a type's $defs entry after its package too: bus.Config and
// heartbeat.Config are different sections, BusConfig and HeartbeatConfig.
func defName(t reflect.Type) string {
	pkg := path.Base(t.PkgPath())
	if t.Name() == "" || pkg == "config" || pkg == "." {
		return ""
	}
	return strings.ToUpper(pkg[:1]) + pkg[1:] + t.Name()
}
