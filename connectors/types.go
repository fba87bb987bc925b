package connectors

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/invopop/jsonschema"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/internal/yamlstrict"
)

// Config is the config of one connector: the config struct of its type,
// such as console.Config or nats.Config, whose yaml tags are the keys the
// connector's entry in agentwork.yaml may have beside type:
//
//	connectors:
//	  console: {type: console}
//	  alerts:  {type: nats, subject: alerts.agentwork}
//
// Validate checks it without I/O. Its errors name the field relative to
// the entry and say what to do ("subject: required (e.g.
// alerts.agentwork)"); Configs.Validate and Types.Build prefix them with
// connectors.<name>. They never quote a secret.
type Config interface {
	Validate() error
}

// Configs is the connectors section: connector name → its config. The name
// is what runs list as targets; it must be a subject token ([a-z0-9_-],
// 1-64 characters), since deliveries are queued on <prefix>.delivery.<name>.
type Configs map[string]Config

// Validate checks every connector and its name. Errors read
// "connectors.<name>.<field>: ...".
func (cs Configs) Validate() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(cs)) {
		if err := validate(name, cs[name]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func validate(name string, c Config) error {
	if !bus.ValidToken(name) {
		return fmt.Errorf("connectors.%s: the name must be 1-64 characters of a-z, 0-9, _ and - (it is a NATS subject token)", name)
	}
	if c == nil {
		return fmt.Errorf("connectors.%s: no config", name)
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

// BuildDeps is what connectors need from the runtime.
type BuildDeps struct {
	// Stdout receives the console connector's lines. Default os.Stdout.
	Stdout io.Writer
	// Bus is the connection of the runtime, which the nats connector
	// publishes on.
	Bus *bus.Bus
	// Logger is scoped per connector (connector=<name>). Default zap.NewNop().
	Logger *zap.Logger
}

// Spec describes a connector type to Define.
type Spec[C Config] struct {
	// Name is the type's value of type in agentwork.yaml ("console",
	// "telegram"): 1-64 characters of a-z, 0-9, _ and -.
	Name string
	// Defaults is the config the connector's keys are decoded over: a key
	// left out keeps its default. Maps and pointers in it would be shared
	// by every connector of the type: leave them nil.
	Defaults C
	// New builds the connector named name from c, which Validate accepted.
	// It does no I/O and starts no goroutines. Its errors say what is wrong
	// with the config or deps; Types.Build prefixes them with
	// connectors.<name>.
	New func(name string, c C, deps BuildDeps) (Connector, error)
}

// Type is a kind of connector: its name in config, its config struct and
// how to build one. A connector package exports its Type (console.Type,
// nats.Type) for the Types of a build.
type Type struct {
	name     string
	config   reflect.Type
	defaults Config
	build    func(name string, c Config, deps BuildDeps) (Connector, error)
}

// Define returns the connector type s describes. C is a struct with yaml
// tags (the connector's keys) and no key named type. Define panics on a
// spec that cannot work, as regexp.MustCompile does: a programming error
// that the type's first test finds.
func Define[C Config](s Spec[C]) Type {
	t := reflect.TypeFor[C]()
	switch {
	case !bus.ValidToken(s.Name):
		panic(fmt.Sprintf("connectors: Define: type name %q: want 1-64 characters of a-z, 0-9, _ and -", s.Name))
	case s.New == nil:
		panic(fmt.Sprintf("connectors: Define(%s): New is nil", s.Name))
	case t.Kind() != reflect.Struct:
		panic(fmt.Sprintf("connectors: Define(%s): the config %s is not a struct", s.Name, t))
	}
	if _, ok := yamlstrict.Fields(t)["type"]; ok {
		panic(fmt.Sprintf("connectors: Define(%s): the config %s has a key named type, which names the connector type", s.Name, t))
	}
	return Type{
		name:     s.Name,
		config:   t,
		defaults: s.Defaults,
		build: func(name string, c Config, deps BuildDeps) (Connector, error) {
			return s.New(name, c.(C), deps)
		},
	}
}

// Name is the type's name, the value of type in agentwork.yaml.
func (t Type) Name() string { return t.name }

// Default returns a config of the type with its defaults.
func (t Type) Default() Config { return t.defaults }

// decode decodes a connector's entry (a mapping, type included) over the
// type's defaults, rejecting keys the type does not have.
func (t Type) decode(n *yaml.Node, path string) (Config, error) {
	body := *n
	body.Content = nil
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != "type" {
			body.Content = append(body.Content, n.Content[i], n.Content[i+1])
		}
	}
	c := reflect.New(t.config)
	c.Elem().Set(reflect.ValueOf(t.defaults))
	if err := yamlstrict.Decode(&body, c.Interface(), path); err != nil {
		return nil, err
	}
	return c.Elem().Interface().(Config), nil
}

// Types are the connector types of a build, the values their packages
// export, listed in cmd:
//
//	types := connectors.Types{console.Type, nats.Type}
//
// The type of a connector in agentwork.yaml is one of these by name, so a
// new connector type is its package plus one entry in this list. Names
// are unique.
type Types []Type

// Names returns the type names, in order.
func (ts Types) Names() []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.name
	}
	return out
}

// Lookup returns the type named name.
func (ts Types) Lookup(name string) (Type, bool) {
	for _, t := range ts {
		if t.name == name {
			return t, true
		}
	}
	return Type{}, false
}

func (ts Types) of(c Config) (Type, bool) {
	for _, t := range ts {
		if reflect.TypeOf(c) == t.config {
			return t, true
		}
	}
	return Type{}, false
}

func (ts Types) known() string {
	if len(ts) == 0 {
		return "none in this build"
	}
	return strings.Join(ts.Names(), ", ")
}

// Decode decodes the connectors section of agentwork.yaml (a mapping of
// connector name to entry; null is no connectors). Each entry's type picks
// one of ts, whose config the other keys are decoded into over its
// defaults. Errors (a missing or unknown type, an unknown key, a wrong
// value type) are *yamlstrict.Error values with the line, one per problem,
// paths starting with connectors.<name>. Decode does not validate the
// configs: Configs.Validate does.
func (ts Types) Decode(section *yaml.Node) (Configs, error) {
	n := resolve(section)
	if n == nil || n.Kind == 0 || n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, &yamlstrict.Error{Line: n.Line, Msg: "connectors: want a mapping of connector name to its config, e.g. console: {type: console}"}
	}
	cs := Configs{}
	lines := map[string]int{}
	var errs []error
	fail := func(line int, format string, args ...any) {
		errs = append(errs, &yamlstrict.Error{Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		name, path := k.Value, "connectors."+k.Value
		if first, ok := lines[name]; ok {
			fail(k.Line, "%s: defined twice (first at line %d)", path, first)
			continue
		}
		lines[name] = k.Line
		if v.Kind != yaml.MappingNode {
			fail(k.Line, "%s: want a mapping with the connector's type (one of %s), e.g. {type: console}", path, ts.known())
			continue
		}
		var head struct {
			Type string `yaml:"type"`
		}
		if err := v.Decode(&head); err != nil {
			errs = append(errs, yamlstrict.Errors(err)...)
			continue
		}
		line := v.Line
		for j := 0; j+1 < len(v.Content); j += 2 {
			if v.Content[j].Value == "type" {
				line = v.Content[j+1].Line
			}
		}
		if head.Type == "" {
			fail(line, "%s.type: required (one of %s)", path, ts.known())
			continue
		}
		t, ok := ts.Lookup(head.Type)
		if !ok {
			fail(line, "%s.type: %q is not a connector type of this build (known: %s)", path, head.Type, ts.known())
			continue
		}
		c, err := t.decode(v, path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cs[name] = c
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return cs, nil
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && (n.Kind == yaml.DocumentNode || n.Kind == yaml.AliasNode) {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		} else if len(n.Content) > 0 {
			n = n.Content[0]
		} else {
			return nil
		}
	}
	return n
}

// Schema returns the JSON Schema of one entry of the connectors section:
// an object whose type is one of ts, and whose other keys are those of
// that type's config (reflected with r, so its Mapper and tags apply; a
// config type can add to its schema with a JSONSchemaExtend method).
func (ts Types) Schema(r *jsonschema.Reflector) *jsonschema.Schema {
	names := make([]any, len(ts))
	for i, t := range ts {
		names[i] = t.name
	}
	props := jsonschema.NewProperties()
	props.Set("type", &jsonschema.Schema{Type: "string", Enum: names, Description: "the connector type"})
	s := &jsonschema.Schema{
		Type:        "object",
		Description: "a connector: its type and that type's keys",
		Properties:  props,
		Required:    []string{"type"},
	}
	for _, t := range ts {
		rr := *r
		rr.DoNotReference, rr.ExpandedStruct, rr.Anonymous = true, true, true
		body := rr.ReflectFromType(t.config)
		// The type's keys, type first.
		keys := jsonschema.NewProperties()
		keys.Set("type", &jsonschema.Schema{Const: t.name})
		if body.Properties != nil {
			for p := body.Properties.Oldest(); p != nil; p = p.Next() {
				keys.Set(p.Key, p.Value)
			}
		}
		then := &jsonschema.Schema{
			Type:                 "object",
			Title:                t.name,
			Description:          body.Description,
			Properties:           keys,
			Required:             append([]string{"type"}, body.Required...),
			AdditionalProperties: jsonschema.FalseSchema,
		}
		cond := jsonschema.NewProperties()
		cond.Set("type", &jsonschema.Schema{Const: t.name})
		s.AllOf = append(s.AllOf, &jsonschema.Schema{If: &jsonschema.Schema{Properties: cond, Required: []string{"type"}}, Then: then})
	}
	return s
}

// Build validates c and constructs the connector named name with the type
// whose config c is. It does no I/O.
func (ts Types) Build(name string, c Config, deps BuildDeps) (Connector, error) {
	if err := validate(name, c); err != nil {
		return nil, err
	}
	t, ok := ts.of(c)
	if !ok {
		return nil, fmt.Errorf("connectors.%s: %T is not the config of a connector type of this build (known: %s)", name, c, ts.known())
	}
	if deps.Stdout == nil {
		deps.Stdout = os.Stdout
	}
	if deps.Logger == nil {
		deps.Logger = zap.NewNop()
	}
	deps.Logger = deps.Logger.With(zap.String("connector", name))
	conn, err := t.build(name, c, deps)
	if err != nil {
		return nil, fmt.Errorf("connectors.%s: %w", name, err)
	}
	return conn, nil
}

// BuildAll builds every connector in cs into a Registry, reporting every
// connector that cannot be built.
func (ts Types) BuildAll(cs Configs, deps BuildDeps) (Registry, error) {
	reg := Registry{}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(cs)) {
		c, err := ts.Build(name, cs[name], deps)
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
