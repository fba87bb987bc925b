// Package config loads agentwork.yaml: one YAML file whose sections are the
// Config types of the packages they configure. Unknown keys are errors with
// file:line, secrets are written as ${ENV} references and expanded at load,
// and Schema returns the file's JSON Schema.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/triggers/cron"
	"github.com/agentwork/agentwork/triggers/heartbeat"
	"github.com/agentwork/agentwork/triggers/webhook"
)

// File is agentwork.yaml.
type File struct {
	// Bus: the embedded NATS server or an external cluster.
	Bus bus.Config `yaml:"bus" json:"bus,omitempty"`
	// Model: the model provider.
	Model Model `yaml:"model" json:"model,omitempty"`
	// Runner: concurrency, retries, timeouts of runs.
	Runner agentwork.Config `yaml:"runner" json:"runner,omitempty"`
	// Connectors: where notifications go, by name (the targets elsewhere).
	// Default: one console connector named "console".
	Connectors connectors.Configs `yaml:"connectors" json:"connectors,omitempty"`
	// Delivery: retries of notifications per connector.
	Delivery connectors.DispatcherConfig `yaml:"delivery" json:"delivery,omitempty"`
	// Heartbeat: the periodic checklist run.
	Heartbeat heartbeat.Config `yaml:"heartbeat" json:"heartbeat,omitempty"`
	// Cron: scheduled jobs.
	Cron cron.Config `yaml:"cron" json:"cron,omitempty"`
	// Webhook: who may request tasks through POST /v1/tasks.
	Webhook webhook.Config `yaml:"webhook" json:"webhook,omitempty"`
	// HTTP: the API server.
	HTTP api.Config `yaml:"http" json:"http,omitempty"`
	// Log: level and format of the service's own log.
	Log Log `yaml:"log" json:"log,omitempty"`

	// path and dir of the file, for relative paths (checklists).
	path string
}

// Model is the model section: the shared provider fields plus the script
// provider's rules.
type Model struct {
	model.Config `yaml:",inline"`
	// Script holds the rules of the script provider.
	Script script.Config `yaml:"script" json:"script,omitempty"`
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string `yaml:"level" json:"level,omitempty" jsonschema:"enum=debug,enum=info,enum=warn,enum=error"`
	// Format is console or json. Default: console on a terminal, json otherwise.
	Format string `yaml:"format" json:"format,omitempty" jsonschema:"enum=console,enum=json"`
}

// Path is the file the config was loaded from ("" for defaults).
func (f *File) Path() string { return f.path }

// Dir is the directory relative paths in the file are resolved against.
func (f *File) Dir() string {
	if f.path == "" {
		return "."
	}
	return filepath.Dir(f.path)
}

// Resolve returns p relative to the config file's directory (absolute p as is).
func (f *File) Resolve(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(f.Dir(), p)
}

// Validate checks every section.
func (f *File) Validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(f.Bus.Validate())
	add(f.Model.Config.Validate())
	add(f.Model.Script.Validate())
	add(f.Runner.Validate())
	switch f.Log.Level {
	case "", "debug", "info", "warn", "error":
	default:
		add(fmt.Errorf("log.level: %q: want debug, info, warn or error", f.Log.Level))
	}
	switch f.Log.Format {
	case "", "console", "json":
	default:
		add(fmt.Errorf("log.format: %q: want console or json", f.Log.Format))
	}
	add(f.Connectors.Validate())
	add(f.Delivery.Validate())
	add(f.Heartbeat.Validate())
	add(f.Cron.Validate())
	add(f.Webhook.Validate())
	add(f.HTTP.Validate())
	add(f.validateTargets())
	add(f.validateWebhookSources())
	return errors.Join(errs...)
}

// Error is a load error at a place in the file.
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Load reads, expands and validates the file at path. An empty path loads
// the defaults (an embedded bus, the script provider, the console connector).
func Load(path string) (*File, error) {
	if path == "" {
		f := &File{}
		f.applyDefaults()
		return f, f.Validate()
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	f, err := Parse(path, raw, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// LoadClient reads what a client command needs to reach the server: the
// bus section of the file at path (or of the defaults when path is empty).
// Nothing else is expanded or checked, so the secrets only the server uses
// (model.api_key: ${OPENAI_API_KEY}) need not be set where the client runs.
// Relative paths resolve against the file's directory, as with Load.
func LoadClient(path string) (*File, error) {
	f := &File{path: path}
	if path == "" {
		return f, f.Bus.Validate()
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(raw)).Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return f, nil
		}
		return nil, yamlError(path, err)
	}
	busNode := lookupNode(&root, "bus")
	if busNode == nil {
		return f, nil
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: "bus"}, busNode}}
	if err := expandEnv(path, doc, os.LookupEnv); err != nil {
		return nil, err
	}
	if errs := unknownKeys(path, doc, reflect.TypeFor[File](), ""); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := doc.Decode(f); err != nil {
		return nil, yamlError(path, err)
	}
	if err := f.Bus.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Parse decodes raw (named name in errors), expanding ${VAR} references with
// lookup. It does not validate.
func Parse(name string, raw []byte, lookup func(string) (string, bool)) (*File, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) { // an empty file: the defaults
			f := &File{path: name}
			f.applyDefaults()
			return f, nil
		}
		return nil, yamlError(name, err)
	}
	keyEnv := envName(lookupNode(&root, "model", "api_key"))
	if err := expandEnv(name, &root, lookup); err != nil {
		return nil, err
	}
	// Unknown keys are found on the original text (Node.Decode does not
	// report them); values are decoded from the expanded tree.
	f := &File{path: name}
	if errs := unknownKeys(name, &root, reflect.TypeFor[File](), ""); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := root.Decode(f); err != nil {
		return nil, yamlError(name, err)
	}
	f.path = name
	f.Model.APIKeyEnv = keyEnv
	f.applyDefaults()
	return f, nil
}

// lookupNode returns the scalar at path in the document root, or nil.
func lookupNode(root *yaml.Node, path ...string) *yaml.Node {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, key := range path {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// envName is VAR when n is exactly one ${VAR} reference, else "".
func envName(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	if m := envRef.FindStringSubmatch(n.Value); m != nil && m[0] == strings.TrimSpace(n.Value) {
		return m[1]
	}
	return ""
}

var lineRE = regexp.MustCompile(`line (\d+): (.*)`)

func yamlError(name string, err error) error {
	var te *yaml.TypeError
	var msgs []string
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var errs []error
	for _, m := range msgs {
		line := 0
		if sm := lineRE.FindStringSubmatch(m); sm != nil {
			fmt.Sscan(sm[1], &line)
			m = sm[2]
		}
		errs = append(errs, &Error{File: name, Line: line, Msg: m})
	}
	return errors.Join(errs...)
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces ${VAR} in every scalar. A reference to an unset
// variable is an error naming the line: a secret must never silently be "".
func expandEnv(name string, n *yaml.Node, lookup func(string) (string, bool)) error {
	var errs []error
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
			n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
				v := envRef.FindStringSubmatch(ref)[1]
				val, ok := lookup(v)
				if !ok {
					errs = append(errs, &Error{File: name, Line: n.Line, Msg: fmt.Sprintf("environment variable %s is not set (referenced as ${%s})", v, v)})
				}
				return val
			})
			if n.Tag == "!!null" || n.Tag == "" {
				n.Tag = "!!str"
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(n)
	return errors.Join(errs...)
}

func (f *File) applyDefaults() {
	if f.Model.Provider == "" {
		f.Model.Provider = "script"
	}
	if len(f.Connectors) == 0 {
		f.Connectors = connectors.Configs{"console": {Type: connectors.TypeConsole}}
	}
}
