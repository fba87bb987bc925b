package config

import (
	"encoding/json"
	"reflect"
	"time"

	"github.com/invopop/jsonschema"
)

// Schema returns the JSON Schema of agentwork.yaml.
func Schema() ([]byte, error) {
	r := &jsonschema.Reflector{
		FieldNameTag:   "yaml",
		DoNotReference: false,
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
