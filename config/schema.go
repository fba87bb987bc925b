package config

import (
	"encoding/json"
	"path"
	"reflect"
	"strings"
	"time"

	"github.com/invopop/jsonschema"

	"github.com/agentwork/agentwork/connectors"
)

// Schema returns the JSON Schema of agentwork.yaml, whose connectors are
// of types.
func Schema(types connectors.Types) ([]byte, error) {
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
	// A connector's keys are those of its type.
	durations := r.Mapper
	section := &jsonschema.Schema{
		Type:                 "object",
		Description:          "connectors by name; the names are the targets used elsewhere",
		PropertyNames:        &jsonschema.Schema{Pattern: `^[a-z0-9_-]{1,64}$`},
		AdditionalProperties: types.Schema(r),
	}
	r.Mapper = func(t reflect.Type) *jsonschema.Schema {
		if t == reflect.TypeFor[connectors.Configs]() {
			return section
		}
		return durations(t)
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
