package connectors

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
)

// Connector types, the values of Config.Type.
const (
	TypeConsole  = "console"
	TypeNATS     = "nats"
	TypeTelegram = "telegram"
	TypeSlack    = "slack"
	TypeDiscord  = "discord"
	TypeNtfy     = "ntfy"
	TypeWebhook  = "webhook"
)

// allTypes are the connector types, built or planned; available are those
// this build can construct.
var (
	allTypes  = []string{TypeConsole, TypeNATS, TypeTelegram, TypeSlack, TypeDiscord, TypeNtfy, TypeWebhook}
	available = []string{TypeConsole, TypeNATS}
)

// Config is one connector instance, the value under its name in the
// connectors section of agentwork.yaml:
//
//	connectors:
//	  console: {type: console}
//	  alerts:  {type: nats, subject: alerts.agentwork}
//
// The name is what runs list as targets; it must be a subject token
// ([a-z0-9_-], 1-64 characters), since deliveries are queued on
// <prefix>.delivery.<name>.
type Config struct {
	// Type is the kind of destination. Required.
	Type string `yaml:"type" json:"type" jsonschema:"enum=console,enum=nats,enum=telegram,enum=slack,enum=discord,enum=ntfy,enum=webhook"`

	// Format (console): "text" (default), one readable line per
	// notification, or "json", the notification as one JSON line.
	Format string `yaml:"format,omitempty" json:"format,omitempty" jsonschema:"enum=text,enum=json"`

	// Subject (nats): where notifications are published, e.g.
	// "alerts.agentwork". Required for type nats; no wildcards.
	Subject string `yaml:"subject,omitempty" json:"subject,omitempty"`
	// JetStream (nats): publish with JetStream and wait for the ack of the
	// stream that captures Subject (which you create). Default false: core
	// NATS publish and flush.
	JetStream bool `yaml:"jetstream,omitempty" json:"jetstream,omitempty"`
}

// Validate checks c. Errors name the field relative to the connector
// ("subject: required for type nats"); Configs.Validate and Build prefix
// them with connectors.<name>.
func (c Config) Validate() error {
	var errs []error
	notFor := func(field string, set bool, owner string) {
		if set && c.Type != owner {
			errs = append(errs, fmt.Errorf("%s: only for type %s, not %s", field, owner, c.Type))
		}
	}
	switch c.Type {
	case "":
		return fmt.Errorf("type: required (one of %v)", available)
	case TypeConsole:
		switch c.Format {
		case "", FormatText, FormatJSON:
		default:
			errs = append(errs, fmt.Errorf("format: %q: want text or json", c.Format))
		}
	case TypeNATS:
		if c.Subject == "" {
			errs = append(errs, errors.New("subject: required for type nats (e.g. alerts.agentwork)"))
		} else if err := CheckSubject(c.Subject); err != nil {
			errs = append(errs, fmt.Errorf("subject: %w", err))
		}
	default:
		if slices.Contains(allTypes, c.Type) {
			return fmt.Errorf("type: %s is not available in this build yet (available: %v)", c.Type, available)
		}
		return fmt.Errorf("type: %q is not a connector type (want one of %v)", c.Type, available)
	}
	notFor("format", c.Format != "", TypeConsole)
	notFor("subject", c.Subject != "", TypeNATS)
	notFor("jetstream", c.JetStream, TypeNATS)
	return errors.Join(errs...)
}

// Configs is the connectors section: connector name → its config.
type Configs map[string]Config

// Validate checks every connector and its name. Errors read
// "connectors.<name>.<field>: ...".
func (cs Configs) Validate() error {
	var errs []error
	for _, name := range cs.names() {
		if err := validate(name, cs[name]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (cs Configs) names() []string {
	return slices.Sorted(maps.Keys(cs))
}

func validate(name string, c Config) error {
	if !bus.ValidToken(name) {
		return fmt.Errorf("connectors.%s: the name must be 1-64 characters of a-z, 0-9, _ and - (it is a NATS subject token)", name)
	}
	if err := c.Validate(); err != nil {
		return prefixErrors("connectors."+name+".", err)
	}
	return nil
}

// prefixErrors prefixes each joined error's message with p.
func prefixErrors(p string, err error) error {
	if many, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range many.Unwrap() {
			out = append(out, prefixErrors(p, e))
		}
		return errors.Join(out...)
	}
	return &fieldError{prefix: p, err: err}
}

type fieldError struct {
	prefix string
	err    error
}

func (e *fieldError) Error() string { return e.prefix + e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

// BuildDeps is what Build needs from the runtime.
type BuildDeps struct {
	// Stdout receives the console connector's lines. Default os.Stdout.
	Stdout io.Writer
	// Bus is the connection the nats connector publishes on. Required for
	// type nats.
	Bus *bus.Bus
	// Logger is scoped per connector. Default zap.NewNop().
	Logger *zap.Logger
}

// Build validates c and constructs the connector named name. It does no I/O.
func Build(name string, c Config, deps BuildDeps) (Connector, error) {
	if err := validate(name, c); err != nil {
		return nil, err
	}
	if deps.Stdout == nil {
		deps.Stdout = os.Stdout
	}
	switch c.Type {
	case TypeConsole:
		return NewConsole(deps.Stdout, ConsoleOptions{Format: c.Format})
	case TypeNATS:
		if deps.Bus == nil {
			return nil, fmt.Errorf("connectors.%s: type nats needs the bus (BuildDeps.Bus is nil)", name)
		}
		if err := checkNotOwn(deps.Bus.Subjects, c.Subject); err != nil {
			return nil, fmt.Errorf("connectors.%s.subject: %w", name, err)
		}
		return NewNATS(deps.Bus, name, NATSOptions{Subject: c.Subject, JetStream: c.JetStream})
	}
	// validate accepts only the available types.
	return nil, fmt.Errorf("connectors.%s.type: %s is not available in this build yet", name, c.Type)
}

// BuildAll builds every connector in cs into a Registry.
func BuildAll(cs Configs, deps BuildDeps) (Registry, error) {
	reg := Registry{}
	var errs []error
	for _, name := range cs.names() {
		c, err := Build(name, cs[name], deps)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		reg[name] = c
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return reg, nil
}
