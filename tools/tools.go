// Package tools holds the tools a model may call during a run: a Registry of
// Specs whose JSON Schemas are reflected from Go structs, Sources of tools
// that change while the runtime runs (the MCP servers of tools/mcp), the
// built-in notify_user tool, the Scope of a run (globs of the tool names it
// may use), and Loop, which runs a model and its tool calls until the
// model answers without calls or a limit is reached, and keeps a record of
// every call.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/agentwork/agentwork/model"
)

// Handler runs one tool call. args is the raw JSON argument object the model
// produced, already checked to be a JSON object. The returned string is the
// tool result the model sees; an error is shown to the model as a tool error
// (the run goes on). Handlers must be safe for concurrent use and return
// promptly when ctx is done.
type Handler func(ctx context.Context, args json.RawMessage) (string, error)

// Spec is one tool: its name, what it is for, its argument schema and handler.
type Spec struct {
	Name        string
	Description string
	// Schema is the JSON Schema of the arguments (an object schema).
	Schema  json.RawMessage
	Handler Handler
	// Idempotent says a call may be made again with the same arguments
	// without harm (a read, say): when a run is cut short while the call
	// runs, the run makes it again as it goes on, where it would tell the
	// model that the call's outcome is unknown (see Loop).
	Idempotent bool
}

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Validate reports whether the spec can be offered to a model.
func (s Spec) Validate() error {
	if !nameRE.MatchString(s.Name) {
		return fmt.Errorf("tools: name %q: want 1-64 of [a-zA-Z0-9_-]", s.Name)
	}
	if s.Handler == nil {
		return fmt.Errorf("tools: %s: no handler", s.Name)
	}
	if !json.Valid(s.Schema) {
		return fmt.Errorf("tools: %s: schema is not valid JSON", s.Name)
	}
	return nil
}

// SchemaFor reflects the JSON Schema of the argument struct T: fields are
// named by their json tags, required unless `omitempty`, described by their
// `jsonschema` tags. Additional properties are not allowed.
func SchemaFor[T any]() json.RawMessage {
	r := &jsonschema.Reflector{DoNotReference: true, Anonymous: true}
	var zero T
	s := r.Reflect(&zero)
	s.Version = ""
	s.ID = ""
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("tools: reflect schema: %v", err)) // only on programmer error
	}
	return b
}

// Func makes a Spec from a typed handler: arguments are decoded into A with
// unknown fields rejected, and the schema is reflected from A.
func Func[A any](name, description string, fn func(ctx context.Context, args A) (string, error)) Spec {
	return Spec{
		Name:        name,
		Description: description,
		Schema:      SchemaFor[A](),
		Handler: func(ctx context.Context, raw json.RawMessage) (string, error) {
			var a A
			dec := json.NewDecoder(strings.NewReader(string(raw)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&a); err != nil {
				return "", fmt.Errorf("invalid arguments: %w", err)
			}
			return fn(ctx, a)
		},
	}
}

// Registry is a set of tools by name. It is safe for concurrent reads once
// built; Register is meant for wiring time.
type Registry struct {
	specs map[string]Spec
}

// NewRegistry returns a registry holding specs. It fails on an invalid spec
// or a repeated name.
func NewRegistry(specs ...Spec) (*Registry, error) {
	r := &Registry{specs: make(map[string]Spec, len(specs))}
	for _, s := range specs {
		if err := r.Register(s); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// ErrDuplicate is returned by Register for a name already registered.
var ErrDuplicate = errors.New("tools: duplicate name")

// Register adds a tool.
func (r *Registry) Register(s Spec) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if _, ok := r.specs[s.Name]; ok {
		return fmt.Errorf("%w: %s", ErrDuplicate, s.Name)
	}
	r.specs[s.Name] = s
	return nil
}

// Lookup returns the tool called name.
func (r *Registry) Lookup(name string) (Spec, bool) {
	if r == nil {
		return Spec{}, false
	}
	s, ok := r.specs[name]
	return s, ok
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	out := make([]string, 0, len(r.specs))
	for n := range r.specs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Specs returns every tool, sorted by name.
func (r *Registry) Specs() []Spec {
	names := r.Names()
	out := make([]Spec, 0, len(names))
	for _, n := range names {
		out = append(out, r.specs[n])
	}
	return out
}

// Source offers tools that may change while the runtime runs, such as the
// tools of MCP servers (mcp.Manager); a Registry is one that does not.
// Specs must be safe for concurrent use and answer at once, without I/O:
// the runner asks every run.
type Source interface {
	Specs() []Spec
}

var _ Source = (*Registry)(nil)

// Collect returns a registry of the tools of every source, in order: a
// name already taken by an earlier tool, or a spec that is not valid, is
// left out, with an error that says so (the rest are still usable).
func Collect(sources ...Source) (*Registry, []error) {
	r := &Registry{specs: map[string]Spec{}}
	var errs []error
	for _, src := range sources {
		if src == nil {
			continue
		}
		for _, s := range src.Specs() {
			if err := r.Register(s); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return r, errs
}

// Tools returns the model-facing descriptions of the named tools, or of all
// tools when names is empty. Unknown names are an error.
func (r *Registry) Tools(names ...string) ([]model.Tool, error) {
	if len(names) == 0 {
		names = r.Names()
	}
	out := make([]model.Tool, 0, len(names))
	for _, n := range names {
		s, ok := r.Lookup(n)
		if !ok {
			return nil, fmt.Errorf("tools: unknown tool %q (have %s)", n, strings.Join(r.Names(), ", "))
		}
		out = append(out, model.Tool{Name: s.Name, Description: s.Description, Parameters: s.Schema})
	}
	return out, nil
}

// CallHeader is set on every HTTP request a run's tools make (http_fetch,
// the MCP client's HTTP servers), after any configured header, so that no
// configuration removes it: agentwork's own MCP server refuses such
// requests, and a run's tools never decide the run's own approvals there.
const CallHeader = "Agentwork-Tool"
