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
	"iter"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	webconsole "github.com/agentwork/agentwork/console"
	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/internal/yamlstrict"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools/builtin"
	"github.com/agentwork/agentwork/tools/mcp"
	"github.com/agentwork/agentwork/tools/memory"
	"github.com/agentwork/agentwork/triggers/cron"
	"github.com/agentwork/agentwork/triggers/heartbeat"
	"github.com/agentwork/agentwork/triggers/webhook"
	"github.com/agentwork/agentwork/workflow"
)

// File is agentwork.yaml.
type File struct {
	// Bus: the embedded NATS server or an external cluster.
	Bus bus.Config `yaml:"bus" json:"bus,omitempty"`
	// Model: the model provider; the model named "default".
	Model Model `yaml:"model" json:"model,omitempty"`
	// Models: more models by name, each with the fields of the model
	// section (its own provider, base_url, model, api_key, ...), for
	// runner.model, heartbeat.model, a cron job's model,
	// tasks.<name>.model and their fallback lists. "default" is the model
	// section's name and not one of these.
	Models map[string]Model `yaml:"models" json:"models,omitempty"`
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
	// Tasks: the settings of the tasks of a name (their tools), by name.
	Tasks webhook.Tasks `yaml:"tasks" json:"tasks,omitempty"`
	// Tools: the built-in tools (http_fetch, exec), each off unless set.
	Tools builtin.Config `yaml:"tools" json:"tools,omitempty"`
	// MCP: the Model Context Protocol servers whose tools runs may use.
	MCP mcp.Config `yaml:"mcp" json:"mcp,omitempty"`
	// Memory: the agent's memory on the bus (its time zone, how long daily
	// logs are kept). The memory tools are offered where the tools scope
	// names them (memory_*); runner.memory and the like put it in prompts.
	Memory memory.Config `yaml:"memory" json:"memory,omitempty"`
	// HTTP: the API server.
	HTTP api.Config `yaml:"http" json:"http,omitempty"`
	// Approvals: the base of the approvals' signed links, their default
	// timeout.
	Approvals approval.Config `yaml:"approvals" json:"approvals,omitempty"`
	// Console: how long the web console's sessions last.
	Console webconsole.Config `yaml:"console" json:"console,omitempty"`
	// Log: level and format of the service's own log.
	Log Log `yaml:"log" json:"log,omitempty"`
	// Workflows: multi-step work by name (steps of agents, tools,
	// notifications, waits and child workflows); see docs/workflows.md.
	Workflows workflow.Set `yaml:"workflows" json:"workflows,omitempty"`
	// WorkflowsDir: a directory of workflow files, one workflow per
	// *.yaml file named by the file (relative to this file). Its
	// workflows join those of the workflows section; a name in both is an
	// error.
	WorkflowsDir string `yaml:"workflows_dir" json:"workflows_dir,omitempty"`

	// path and dir of the file, for relative paths (checklists).
	path string
	// secrets are the values of the file's ${VAR} references.
	secrets []string
}

// Model is the model section: the shared provider fields plus the script
// provider's rules.
type Model struct {
	model.Config `yaml:",inline"`
	// Script holds the rules of the script provider.
	Script script.Config `yaml:"script" json:"script,omitempty"`
}

// ModelNames returns the names of the models, sorted: "default" (the
// model section) and those of the models section.
func (f *File) ModelNames() []string {
	names := []string{model.DefaultName}
	for n := range f.Models {
		if n != model.DefaultName {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
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

// Secrets returns the values that must not show in what agentwork
// records, sends or hands the model (tool results, notifications,
// events): every value the file took from the environment (its ${VAR}
// references), and the value of every field that is a secret however it
// was written (see secretFields), each split by secret.Words (so of
// secret.Min bytes or more).
func (f *File) Secrets() []string { return slices.Clone(f.secrets) }

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
	for _, name := range slices.Sorted(maps.Keys(f.Models)) {
		m := f.Models[name]
		switch {
		case name == model.DefaultName:
			add(fmt.Errorf("models.%s: the model section is the model named %s; give this one another name", name, name))
		case !bus.ValidToken(name):
			add(fmt.Errorf("models.%s: a model name is 1-64 characters of a-z, 0-9, _ and -", name))
		case m.Provider == "":
			// Not script by default, as the model section is: a named
			// model inherits nothing, and a forgotten provider would
			// answer every run with a script's canned text.
			add(fmt.Errorf("models.%s.provider: required (openai, anthropic or script)", name))
		}
		m.Section = "models." + name
		add(m.Config.Validate())
		add(m.Script.Validate())
	}
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
	add(f.Tasks.Validate())
	add(f.Tools.Validate())
	add(f.MCP.Validate())
	add(f.Memory.Validate())
	add(f.HTTP.Validate())
	add(f.Approvals.Validate())
	add(f.Console.Validate())
	add(f.validateTargets())
	add(f.validateWebhookSources())
	add(f.validateServerNames())
	add(f.validateTools())
	add(f.validateModels())
	add(f.validateWorkflows())
	add(f.validateApprovalWait())
	add(f.validateApprovalReach())
	add(f.validateApprovers())
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

// Load reads, expands and validates the file at path; types are the
// connector types of the build, which the connectors section is decoded
// with. An empty path loads the defaults (an embedded bus, the script
// provider, the console connector).
func Load(path string, types connectors.Types) (*File, error) {
	if path == "" {
		f := &File{}
		f.applyDefaults(types)
		return f, f.Validate()
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	f, err := Parse(path, raw, os.LookupEnv, types)
	if err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, place(path, err)
	}
	return f, nil
}

// place puts the file name in front of each of err's joined errors that
// does not name its file already (the workflows' errors name theirs).
func place(name string, err error) error {
	var out []error
	for _, e := range flatten(err) {
		if we, ok := errors.AsType[*workflow.Error](e); ok && we.File != "" {
			out = append(out, e)
			continue
		}
		out = append(out, fmt.Errorf("%s: %w", name, e))
	}
	return errors.Join(out...)
}

// Parse decodes raw (named name in errors), expanding ${VAR} references with
// lookup; each connector is decoded by its type, one of types. It does not
// validate.
func Parse(name string, raw []byte, lookup func(string) (string, bool), types connectors.Types) (*File, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) { // an empty file: the defaults
			f := &File{path: name}
			f.applyDefaults(types)
			return f, nil
		}
		return nil, inFile(name, errors.Join(yamlstrict.Errors(err)...))
	}
	keyEnv := envName(lookupNode(&root, "model", "api_key"))
	modelKeyEnv := map[string]string{}
	if n := lookupNode(&root, "models"); n != nil && n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			name := n.Content[i].Value
			modelKeyEnv[name] = envName(lookupNode(&root, "models", name, "api_key"))
		}
	}
	secrets, withSecrets, err := expandEnv(name, &root, lookup)
	if err != nil {
		return nil, err
	}
	walked := map[*yaml.Node]bool{} // the mappings merged into credential maps, read once
	for _, m := range withSecrets {
		secrets = secretFields(m, secrets, walked)
	}
	// The connectors section is decoded by the connector types, the rest
	// here. Unknown keys are found on the original text (Node.Decode does
	// not report them); values are decoded from the expanded tree.
	section, err := detach(&root, "connectors")
	if err != nil {
		return nil, inFile(name, err)
	}
	wfSection, err := detach(&root, "workflows")
	if err != nil {
		return nil, inFile(name, err)
	}
	f := &File{path: name}
	errRest := yamlstrict.Decode(&root, f, "")
	var errConn error
	if section != nil {
		f.Connectors, errConn = types.Decode(section)
	}
	errWf, errDir := f.decodeWorkflows(&root, wfSection)
	if err := errors.Join(errRest, errConn, errWf); err != nil {
		return nil, errors.Join(inFile(name, err), errDir)
	}
	if errDir != nil {
		return nil, errDir
	}
	f.path, f.secrets = name, secrets
	f.Model.APIKeyEnv = keyEnv
	for name, m := range f.Models {
		m.APIKeyEnv, m.Section = modelKeyEnv[name], "models."+name
		f.Models[name] = m
	}
	f.resolvePaths()
	f.applyDefaults(types)
	return f, nil
}

// resolvePaths makes the relative paths of the file relative to its
// directory: the working directories of MCP servers and of exec.
func (f *File) resolvePaths() {
	if e := f.Tools.Exec; e != nil && e.Cwd != "" {
		e.Cwd = f.Resolve(e.Cwd)
	}
	for name, s := range f.MCP.Servers {
		if s.Cwd != "" {
			s.Cwd = f.Resolve(s.Cwd)
			f.MCP.Servers[name] = s
		}
	}
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
		return nil, inFile(path, errors.Join(yamlstrict.Errors(err)...))
	}
	busNode := lookupNode(&root, "bus")
	if busNode == nil {
		return f, nil
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: "bus"}, busNode}}
	if _, _, err := expandEnv(path, doc, os.LookupEnv); err != nil {
		return nil, err
	}
	if err := yamlstrict.Decode(doc, f, ""); err != nil {
		return nil, inFile(path, err)
	}
	if err := f.Bus.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// lookupNode returns the node at path in the document root, or nil.
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

// detach removes key and its value from the top-level mapping of doc and
// returns the value (nil when the key is absent).
func detach(doc *yaml.Node, key string) (*yaml.Node, error) {
	m := doc
	if m.Kind == yaml.DocumentNode && len(m.Content) == 1 {
		m = m.Content[0]
	}
	if m.Kind != yaml.MappingNode {
		return nil, nil // not a mapping: the decoder says so
	}
	var val *yaml.Node
	line := 0
	kept := m.Content[:0:0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Value == key {
			if val != nil {
				return nil, &yamlstrict.Error{Line: k.Line, Msg: fmt.Sprintf("%s: defined twice (first at line %d)", key, line)}
			}
			val, line = m.Content[i+1], k.Line
			continue
		}
		kept = append(kept, m.Content[i], m.Content[i+1])
	}
	m.Content = kept
	return val, nil
}

// inFile places each of err's joined errors in file name, at the line a
// *yamlstrict.Error names.
func inFile(name string, err error) error {
	var errs []*Error
	var walk func(err error)
	walk = func(err error) {
		if many, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range many.Unwrap() {
				walk(e)
			}
			return
		}
		if ye, ok := errors.AsType[*yamlstrict.Error](err); ok {
			errs = append(errs, &Error{File: name, Line: ye.Line, Msg: ye.Msg})
			return
		}
		errs = append(errs, &Error{File: name, Msg: err.Error()})
	}
	walk(err)
	// In the order of the file: the connectors section is decoded apart.
	slices.SortStableFunc(errs, func(a, b *Error) int { return a.Line - b.Line })
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces ${VAR} in every scalar and returns the values it put
// in, split by secret.Words, and the mappings that may hold secret fields
// (a key of secretKeys, secretLists or credentialMaps, url or base_url),
// in the order of the file, for secretFields: one walk of the tree for
// both (a config of 100,000 cron jobs has a million nodes). A reference
// to an unset variable is an error naming the line: a secret must never
// silently be "".
func expandEnv(name string, n *yaml.Node, lookup func(string) (string, bool)) ([]string, []*yaml.Node, error) {
	var errs []error
	var values []string
	var withSecrets []*yaml.Node
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode && mayHoldSecrets(n) {
			withSecrets = append(withSecrets, n)
		}
		if line, msg := unreadable(n); msg != "" {
			errs = append(errs, &Error{File: name, Line: line, Msg: msg})
		}
		if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
			n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
				v := envRef.FindStringSubmatch(ref)[1]
				val, ok := lookup(v)
				if !ok {
					errs = append(errs, &Error{File: name, Line: n.Line, Msg: fmt.Sprintf("environment variable %s is not set (referenced as ${%s})", v, v)})
				}
				values = addWords(values, val)
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
	return values, withSecrets, errors.Join(errs...)
}

// unreadable says what is wrong with n, if it is written in a way the
// config does not take: a mapping's key given as an alias (*name), or a
// !!binary value (base64 the decoder decodes). Both would let a field or
// a secret be named or written in a way other than the text of the file,
// which the secret fields are found by.
func unreadable(n *yaml.Node) (line int, msg string) {
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!binary":
		return n.Line, "a !!binary value is not taken: write the text itself (a secret as ${VAR})"
	case n.Kind == yaml.MappingNode:
		for i := 0; i < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Kind == yaml.AliasNode {
				return k.Line, fmt.Sprintf("a key written as an alias (*%s) is not taken: write the key itself", k.Value)
			}
		}
	}
	return 0, ""
}

// mayHoldSecrets reports whether a key of the mapping n, as written or
// once expanded, may be that of a secret field (see secretFields).
func mayHoldSecrets(n *yaml.Node) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch k := n.Content[i].Value; {
		case slices.Contains(secretKeys, k), k == "url", k == "base_url", slices.Contains(secretLists, k), slices.Contains(credentialMaps, k):
			return true
		case strings.Contains(k, "${"): // a key from the environment
			return true
		}
	}
	return false
}

// urlPasswords adds to values the password of each URL in v (a list of
// URLs, comma-separated) that has one.
func urlPasswords(values []string, v string) []string {
	for _, s := range strings.Split(v, ",") {
		if u, err := url.Parse(strings.TrimSpace(s)); err == nil {
			if pw, ok := u.User.Password(); ok {
				values = addWords(values, pw)
			}
		}
	}
	return values
}

// addWords adds the parts of v to cut (secret.Words) to values, once each.
func addWords(values []string, v string) []string {
	for _, w := range secret.Words(v) {
		if !slices.Contains(values, w) {
			values = append(values, w)
		}
	}
	return values
}

// Secret fields, by key, wherever they are in the file (the connectors
// section included, which the connector types decode): the config knows
// a secret by its field's name, whatever the section.
var (
	// secretKeys hold a secret.
	secretKeys = []string{"api_key", "admin_token", "bot_token", "token", "password", "secret", "webhook_url"}
	// secretLists hold a list of secrets (strings; a list of objects has
	// its own secret keys).
	secretLists = []string{"secrets", "tokens"}
	// credentialMaps are maps (HTTP headers, environment variables) whose
	// entries are secrets when their name says so (credentialName).
	credentialMaps = []string{"headers", "env"}
	credentialName = regexp.MustCompile(`(?i)auth|key|token|secret|passw|cookie|credential|session|(^|[_-])pat($|[_-])`)
)

// secretFields adds to values the values of the secret fields of the
// (expanded) mapping n, and the password of every url with one: secrets
// written in the file as they are, not only as ${VAR} references. It
// looks at n and its values, not further down: Parse calls it for each
// mapping expandEnv found, in the order of the file.
func secretFields(n *yaml.Node, values []string, walked map[*yaml.Node]bool) []string {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i].Value, unalias(n.Content[i+1])
			switch {
			case v.Kind == yaml.ScalarNode && slices.Contains(secretKeys, k):
				values = addWords(values, v.Value)
			case v.Kind == yaml.ScalarNode && (k == "url" || k == "base_url"):
				values = urlPasswords(values, v.Value)
			case v.Kind == yaml.SequenceNode && slices.Contains(secretLists, k):
				for _, e := range v.Content {
					if e = unalias(e); e.Kind == yaml.ScalarNode {
						values = addWords(values, e.Value)
					}
				}
			case v.Kind == yaml.MappingNode && slices.Contains(credentialMaps, k):
				for name, e := range entries(v, walked) {
					switch {
					case e.Kind != yaml.ScalarNode:
					case credentialName.MatchString(name):
						values = addWords(values, e.Value)
					default: // DATABASE_URL: postgres://u:pw@host/db
						values = urlPasswords(values, e.Value)
					}
				}
			}
		}
	}
	return values
}

// entries yields the names and values of the mapping n, with those a
// merge key (<<: *anchor, or a list of anchors) brings in from a mapping
// anchored elsewhere, as yaml.v3 decodes them: a credential map's entries
// may be written so. A mapping in walked (merged before, into this or
// another credential map) is not walked again: its entries are secrets
// or not by their names alone.
func entries(n *yaml.Node, walked map[*yaml.Node]bool) iter.Seq2[string, *yaml.Node] {
	return func(yield func(string, *yaml.Node) bool) {
		walked[n] = true
		var walk func(m *yaml.Node) bool
		walk = func(m *yaml.Node) bool {
			for i := 0; i+1 < len(m.Content); i += 2 {
				k, v := m.Content[i], unalias(m.Content[i+1])
				if !isMerge(k) {
					if !yield(unalias(k).Value, v) {
						return false
					}
					continue
				}
				merged := []*yaml.Node{v}
				if v.Kind == yaml.SequenceNode {
					merged = v.Content
				}
				for _, x := range merged {
					if x = unalias(x); x.Kind == yaml.MappingNode && !walked[x] {
						walked[x] = true
						if !walk(x) {
							return false
						}
					}
				}
			}
			return true
		}
		walk(n)
	}
}

// isMerge reports whether the key k is a merge key, as yaml.v3 has it: a
// plain << (not quoted, not another tag; not an alias).
func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge"
}

// unalias returns the node the alias n (*name) stands for, else n: a
// secret field's value may be anchored under a field that is no secret.
func unalias(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

// DefaultConnector is the connector of a file without a connectors
// section: one of this type, by this name, when the build has the type.
const DefaultConnector = "console"

func (f *File) applyDefaults(types connectors.Types) {
	if f.Model.Provider == "" {
		f.Model.Provider = "script"
	}
	if t, ok := types.Lookup(DefaultConnector); ok && len(f.Connectors) == 0 {
		f.Connectors = connectors.Configs{DefaultConnector: t.Default()}
	}
}
