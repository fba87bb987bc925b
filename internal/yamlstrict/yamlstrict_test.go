package yamlstrict_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/internal/yamlstrict"
)

type inner struct {
	Every time.Duration `yaml:"every"`
}

type outer struct {
	Name  string           `yaml:"name"`
	Inner inner            `yaml:",inline"`
	List  []inner          `yaml:"list"`
	Map   map[string]inner `yaml:"map"`
	Count int              `yaml:"count"`
}

func TestDecode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src string
		want      []string // the errors, in order; none for valid
	}{
		{"valid", "name: a\nevery: 1m\nlist: [{every: 2s}]\nmap: {x: {every: 3h}}\n", nil},
		{"unknown key", "name: a\nnmae: b\n", []string{`line 2: unknown key "s.nmae" (known: count, every, list, map, name;`}},
		{"in a list", "list:\n  - every: 1s\n  - evry: 2s\n", []string{`line 3: unknown key "s.list[1].evry" (known: every;`}},
		{"in a map", "map:\n  x:\n    evry: 1s\n", []string{`line 3: unknown key "s.map.x.evry"`}},
		{"every one", "a: 1\nb: 2\n", []string{`line 1: unknown key "s.a"`, `line 2: unknown key "s.b"`}},
		{"wrong type", "name: a\ncount: lots\n", []string{"line 2: cannot unmarshal !!str `lots` into int"}},
		// The paths of the errors at every depth, after good keys and
		// elements, each written only when there is an error.
		{"deep and after good ones", "name: a\nlist: [{every: 1s}, {every: 2s}, {evry: 3s}, {every: soon}]\nmap: {x: {every: 1s}, y: {evry: 1s, every: later}}\nlsit: []\n", []string{
			`line 2: unknown key "s.list[2].evry" (known: every;`,
			`line 2: s.list[3].every: "soon" is not a duration, e.g. 30s, 5m or 1h30m`,
			`line 3: unknown key "s.map.y.evry" (known: every;`,
			`line 3: s.map.y.every: "later" is not a duration`,
			`line 4: unknown key "s.lsit" (known:`,
		}},
		{"through an alias", "list:\n  - &a {every: 1s, evry: 2s}\n  - *a\n", []string{`line 2: unknown key "s.list[0].evry"`, `line 2: unknown key "s.list[1].evry"`}},
		{"a bad duration at the top", "every: soon\n", []string{`line 1: s.every: "soon" is not a duration`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var n yaml.Node
			if err := yaml.Unmarshal([]byte(tc.src), &n); err != nil {
				t.Fatal(err)
			}
			var out outer
			err := yamlstrict.Decode(&n, &out, "s")
			if len(tc.want) == 0 {
				if err != nil || out.Map["x"].Every != 3*time.Hour {
					t.Fatalf("Decode(%q) = %v, %+v; want nil and the values", tc.src, err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("Decode(%q) = nil, want %q", tc.src, tc.want)
			}
			errs := err.(interface{ Unwrap() []error }).Unwrap()
			if len(errs) != len(tc.want) {
				t.Fatalf("Decode(%q) = %q, want %d errors", tc.src, err, len(tc.want))
			}
			for i, w := range tc.want {
				if _, ok := errors.AsType[*yamlstrict.Error](errs[i]); !ok || !strings.HasPrefix(errs[i].Error(), w) {
					t.Errorf("Decode(%q) error %d = %q (%T), want a *yamlstrict.Error starting %q", tc.src, i, errs[i], errs[i], w)
				}
			}
		})
	}
}

// From the document's root (path ""), a path starts with the first key or
// index, without a dot.
func TestUnknownKeysFromTheRoot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		src  string
		typ  reflect.Type
		want []string
	}{
		{"[{every: 1s}, {evry: 1s}, {every: soon}]\n", reflect.TypeFor[[]inner](), []string{`line 1: unknown key "[1].evry"`, `line 1: [2].every: "soon" is not a duration`}},
		{"x: {evry: 1s}\n", reflect.TypeFor[map[string]inner](), []string{`line 1: unknown key "x.evry"`}},
		{"list: [[]]\nnmae: a\n", reflect.TypeFor[*outer](), []string{`line 2: unknown key "nmae"`}},
	} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(tc.src), &n); err != nil {
			t.Fatal(err)
		}
		errs := yamlstrict.UnknownKeys(&n, tc.typ, "")
		if len(errs) != len(tc.want) {
			t.Fatalf("UnknownKeys(%q) = %q, want %d errors", tc.src, errs, len(tc.want))
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(errs[i].Error(), w) {
				t.Errorf("UnknownKeys(%q) error %d = %q, want it to start %q", tc.src, i, errs[i], w)
			}
		}
	}
}
