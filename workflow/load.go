package workflow

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/internal/yamlstrict"
)

// Error is a problem of a definition: where it is and what to do.
type Error struct {
	// File is the file of the definition ("" in a config section, whose
	// loader names the file).
	File string
	// Line is 1-based; 0 when unknown.
	Line int
	// Workflow and Step name the workflow and step ("" when not about one).
	Workflow, Step string
	// Field is the key path of the field in its document
	// ("workflows.x.steps[1].if").
	Field string
	// Msg says what is wrong and what to do.
	Msg string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	b.WriteString(e.text())
	return b.String()
}

// text is the message without the place in the file.
func (e *Error) text() string {
	var b strings.Builder
	if e.Workflow != "" {
		fmt.Fprintf(&b, "workflow %s: ", e.Workflow)
	}
	if e.Step != "" {
		fmt.Fprintf(&b, "step %s: ", e.Step)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, "%s: ", e.Field)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the error as a *yamlstrict.Error (its line and message
// without the file), so the config loader places it in its own file as it
// does every other error of a section.
func (e *Error) Unwrap() error { return &yamlstrict.Error{Line: e.Line, Msg: e.text()} }

// Decode decodes a mapping of workflows by name (the config's workflows
// section) from n. path is n's key path in its document ("workflows"),
// the prefix of the field paths in errors. Unknown keys are errors with
// their lines (as *Error, which unwraps to *yamlstrict.Error). Decode does
// not validate: call Set.Validate once all the definitions are in.
func Decode(n *yaml.Node, path string) (Set, error) {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	set := Set{}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return set, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, &Error{Line: n.Line, Field: path, Msg: "want a mapping of workflows by name"}
	}
	var errs []error
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if _, dup := set[k.Value]; dup {
			errs = append(errs, &Error{Line: k.Line, Field: yamlstrict.Join(path, k.Value), Msg: "defined twice; give one of them another name"})
			continue
		}
		w, err := decodeOne(v, k.Value, yamlstrict.Join(path, k.Value), "")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		w.Line = k.Line
		set[k.Value] = w
	}
	return set, errors.Join(errs...)
}

// DecodeFile decodes one workflow from raw, the text of a file named name
// whose base name (without .yaml or .yml) is the workflow's name.
func DecodeFile(name string, raw []byte) (*Workflow, error) {
	wf := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(name), ".yaml"), ".yml")
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(raw)).Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: name, Workflow: wf, Msg: "empty file: want one workflow (description, inputs, on, steps, ...)"}
		}
		var errs []error
		for _, e := range yamlstrict.Errors(err) {
			ye := e.(*yamlstrict.Error)
			errs = append(errs, &Error{File: name, Line: ye.Line, Workflow: wf, Msg: ye.Msg})
		}
		return nil, errors.Join(errs...)
	}
	w, err := decodeOne(&root, wf, "", name)
	if err != nil {
		return nil, err
	}
	w.Line = 1
	return w, nil
}

// Load decodes the workflows of dir: every *.yaml and *.yml file in it
// (not below it) is one workflow named by the file's base name. A missing
// directory is an error. Load does not validate: call Set.Validate once all
// the definitions are in (those of the config file too).
func Load(dir string) (Set, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("workflow: %w", err)
	}
	set := Set{}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		ext := filepath.Ext(name)
		if e.IsDir() || (ext != ".yaml" && ext != ".yml") || strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(dir, name)
		raw, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("workflow: %w", err))
			continue
		}
		w, err := DecodeFile(path, raw)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, dup := set[w.Name]; dup {
			errs = append(errs, &Error{File: path, Line: 1, Workflow: w.Name, Msg: fmt.Sprintf("defined twice (also in %s); keep one file per workflow", prev.File)})
			continue
		}
		set[w.Name] = w
	}
	return set, errors.Join(errs...)
}

// Merge adds the workflows of other to s; a name in both is an error
// naming both places.
func (s Set) Merge(other Set) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(other)) {
		w := other[name]
		if prev, dup := s[name]; dup {
			errs = append(errs, w.errorf("", "", "defined twice (also at %s); rename one of them", prev.place()))
			continue
		}
		s[name] = w
	}
	return errors.Join(errs...)
}

// place is where w was defined, for messages.
func (w *Workflow) place() string {
	f := w.File
	if f == "" {
		f = "the config file"
	}
	if w.Line > 0 {
		return fmt.Sprintf("%s:%d", f, w.Line)
	}
	return f
}

// decodeOne decodes the workflow node n named name, at key path path of
// file (both may be "").
func decodeOne(n *yaml.Node, name, path, file string) (*Workflow, error) {
	w := &Workflow{}
	if err := yamlstrict.Decode(n, w, path); err != nil {
		var errs []error
		for _, e := range unjoin(err) {
			if ye, ok := errors.AsType[*yamlstrict.Error](e); ok {
				errs = append(errs, &Error{File: file, Line: ye.Line, Workflow: name, Msg: ye.Msg})
				continue
			}
			errs = append(errs, &Error{File: file, Workflow: name, Msg: e.Error()})
		}
		return nil, errors.Join(errs...)
	}
	w.Name, w.File, w.path = name, file, path
	w.lines = map[string]int{}
	indexLines(n, "", w.lines)
	return w, nil
}

// indexLines records the line of every key and sequence item below n by
// its path relative to n ("steps[1].args.url").
func indexLines(n *yaml.Node, path string, out map[string]int) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			indexLines(c, path, out)
		}
	case yaml.AliasNode:
		if n.Alias != nil {
			indexLines(n.Alias, path, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := yamlstrict.Join(path, n.Content[i].Value)
			out[p] = n.Content[i].Line
			indexLines(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			out[p] = c.Line
			indexLines(c, p, out)
		}
	}
}

// unjoin flattens joined errors.
func unjoin(err error) []error {
	if many, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range many.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}

// lineOf returns the line of the field at rel (relative to the workflow),
// or of its closest parent that has one.
func (w *Workflow) lineOf(rel string) int {
	for rel != "" {
		if l, ok := w.lines[rel]; ok {
			return l
		}
		i := strings.LastIndexAny(rel, ".[")
		if i < 0 {
			break
		}
		rel = rel[:i]
	}
	return w.Line
}

// errorf builds an *Error at the field rel of w (relative to the
// workflow; "" for the workflow itself), about step (may be "").
func (w *Workflow) errorf(rel, step, format string, args ...any) *Error {
	return &Error{
		File:     w.File,
		Line:     w.lineOf(rel),
		Workflow: w.Name,
		Step:     step,
		Field:    yamlstrict.Join(w.path, rel),
		Msg:      fmt.Sprintf(format, args...),
	}
}
