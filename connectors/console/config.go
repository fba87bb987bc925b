package console

import (
	"fmt"

	"github.com/agentwork/agentwork/connectors"
)

// Config is a console connector's entry in agentwork.yaml:
//
//	connectors:
//	  console: {type: console, format: json}
type Config struct {
	// Format is "text" (default), one readable line per notification, or
	// "json", the notification as one JSON line.
	Format string `yaml:"format,omitempty" json:"format,omitempty" jsonschema:"enum=text,enum=json,default=text"`
}

// Validate checks c.
func (c Config) Validate() error {
	switch c.Format {
	case "", FormatText, FormatJSON:
		return nil
	}
	return fmt.Errorf("format: %q: want text or json", c.Format)
}

// Type is the console connector type, for the connectors.Types of a build.
// It writes to BuildDeps.Stdout.
var Type = connectors.Define(connectors.Spec[Config]{
	Name:     "console",
	Defaults: Config{Format: FormatText},
	New: func(_ string, c Config, deps connectors.BuildDeps) (connectors.Connector, error) {
		return New(deps.Stdout, Options{Format: c.Format})
	},
})
