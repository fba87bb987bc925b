// Package yamlstrict decodes YAML the way agentwork.yaml is read: a key the
// target type has no field for is an error with its line and full path
// (model.script.rules[0].mach), not silently ignored.
package yamlstrict

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// Error is one problem at a line of a YAML document.
type Error struct {
	// Line is 1-based; 0 when the decoder did not say.
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

// Decode decodes n into out (a non-nil pointer) after checking n's keys
// against out's type. path is n's key path in the document ("" at the
// root), the prefix of the paths in errors. The error joins one *Error per
// unknown key, and out is left as it was; else it joins the decoder's
// errors (wrong types), as *Error with their lines.
func Decode(n *yaml.Node, out any, path string) error {
	if errs := UnknownKeys(n, reflect.TypeOf(out), path); len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := n.Decode(out); err != nil {
		return errors.Join(Errors(err)...)
	}
	return nil
}

// UnknownKeys walks n alongside t's yaml tags and returns an *Error for
// every key t has no field for, with its line and full path.
func UnknownKeys(n *yaml.Node, t reflect.Type, path string) []error {
	w := walk{root: path}
	return w.unknownKeys(n, t)
}

// walk is UnknownKeys' way down the tree: the path to the node it is at,
// as steps, written out only for an error (a config of 100,000 cron jobs
// has 600,000 paths, and almost never an error).
type walk struct {
	root  string
	steps []step
}

// step is a key (index < 0) or a list's index.
type step struct {
	key   string
	index int
}

// path writes out the path of the node w is at, as the steps were joined
// on the way down: Join for a key, [i] for an index.
func (w *walk) path() string {
	p := w.root
	for _, s := range w.steps {
		if s.index >= 0 {
			p = fmt.Sprintf("%s[%d]", p, s.index)
		} else {
			p = Join(p, s.key)
		}
	}
	return p
}

// into walks n as a t at the step s below the node w is at.
func (w *walk) into(s step, n *yaml.Node, t reflect.Type) []error {
	w.steps = append(w.steps, s)
	errs := w.unknownKeys(n, t)
	w.steps = w.steps[:len(w.steps)-1]
	return errs
}

func (w *walk) unknownKeys(n *yaml.Node, t reflect.Type) []error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.DocumentNode {
		var errs []error
		for _, c := range n.Content {
			errs = append(errs, w.unknownKeys(c, t)...)
		}
		return errs
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if t == durationType || t == timeType {
		// The decoder reports a bad time or duration without its line or
		// key: say both here.
		return badValue(n, t, w.path)
	}
	var errs []error
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil // a type error, reported by the decoder
		}
		fields := Fields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" {
				continue
			}
			ft, ok := fields[k.Value]
			if !ok {
				p := Join(w.path(), k.Value)
				known := slices.Sorted(maps.Keys(fields))
				errs = append(errs, &Error{Line: k.Line, Msg: fmt.Sprintf("unknown key %q (known: %s; see `agentwork config schema`)", p, strings.Join(known, ", "))})
				continue
			}
			errs = append(errs, w.into(step{key: k.Value, index: -1}, v, ft)...)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			errs = append(errs, w.into(step{key: n.Content[i].Value, index: -1}, n.Content[i+1], t.Elem())...)
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		for i, c := range n.Content {
			errs = append(errs, w.into(step{index: i}, c, t.Elem())...)
		}
	}
	return errs
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	timeType     = reflect.TypeFor[time.Time]()
)

// badValue returns an *Error when the scalar n does not decode as a value
// of t (time.Time or time.Duration).
// path gives n's path; it is asked only for an error.
func badValue(n *yaml.Node, t reflect.Type, path func() string) []error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return nil
	}
	if err := n.Decode(reflect.New(t).Interface()); err == nil {
		return nil
	}
	want := "a time in RFC 3339, e.g. 2026-12-01T09:00:00+01:00"
	if t == reflect.TypeFor[time.Duration]() {
		want = "a duration, e.g. 30s, 5m or 1h30m"
	}
	return []error{&Error{Line: n.Line, Msg: fmt.Sprintf("%s: %q is not %s", path(), n.Value, want)}}
}

// Join appends key to path with a dot.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Fields maps the yaml keys of struct t to field types, following ",inline"
// and untagged embedded structs. The map is computed once per type and
// shared (a config of 100,000 cron jobs asks for the job's 100,000
// times): do not change it.
func Fields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldsOf.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := fields(t)
	fieldsOf.Store(t, m)
	return m
}

// fieldsOf caches Fields by type.
var fieldsOf sync.Map

func fields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") || (f.Anonymous && tag == "") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range Fields(ft) {
					out[k] = v
				}
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

var lineRE = regexp.MustCompile(`line (\d+): (.*)`)

// Errors splits an error of the yaml decoder into one *Error per problem,
// with the line its message names.
func Errors(err error) []error {
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
			line, _ = strconv.Atoi(sm[1])
			m = sm[2]
		}
		errs = append(errs, &Error{Line: line, Msg: m})
	}
	return errs
}
