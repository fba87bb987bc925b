package workflow_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/workflow"
)

func TestRenderTypedValues(t *testing.T) {
	t.Parallel()
	env := workflow.Env{
		Inputs: map[string]any{"n": 2.0, "tags": []any{"a", "b"}, "cfg": map[string]any{"x": true}},
		Steps:  map[string]any{"log": map[string]any{"output": "L", "status": "done"}},
		Index:  -1,
	}
	cases := []struct {
		in   any
		want any
	}{
		{"${{ inputs.n * 2 }}", 4.0},
		{" ${{ inputs.tags }} ", []any{"a", "b"}},
		{"${{ inputs.cfg }}", map[string]any{"x": true}},
		{"n=${{ inputs.n }} tags=${{ inputs.tags }}", `n=2 tags=["a","b"]`},
		{"${{ steps.log.output }}; rm -rf /", "L; rm -rf /"},
		{"${{ {a: {b: 1}} }}", map[string]any{"a": map[string]any{"b": 1.0}}},
		{"${{ inputs.missing }}", nil},
		{"x${{ inputs.missing }}y", "xy"},
		{map[string]any{"list": []any{"${{ inputs.n }}", "lit"}}, map[string]any{"list": []any{2.0, "lit"}}},
	}
	for _, tc := range cases {
		got, err := workflow.Render(tc.in, env)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Render(%v) = %#v, %v; want %#v", tc.in, got, err, tc.want)
		}
	}
}

func TestEvalLimits(t *testing.T) {
	t.Parallel()
	env := workflow.Env{Inputs: map[string]any{"big": strings.Repeat("x", 4096), "list": make([]any, 2000)}, Index: -1}
	cases := []struct{ src, want string }{
		{"now()", "unknown name now"},
		{"repeat('x', 10)", "unknown name repeat"},
		{"map(1..1000000, #)", "memory budget exceeded"},
		{"let a = inputs.big + inputs.big; let b = a + a; let c = b + b; let d = c + c; let e = d + d; let f = e + e; let g = f + f; let h = g + g; h + h", "over the limit"},
		{"join(map(1..1000, inputs.big), '')", "over the limit"},
		{"len(filter(inputs.list, len(filter(inputs.list, true)) > 0))", "too costly"},
		{"steps[inputs.x]", "refer to a step by its id"},
		{"__cost", "reserved"},
	}
	for _, tc := range cases {
		_, err := workflow.Eval(tc.src, env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Eval(%s) = %v, want an error with %q", tc.src, err, tc.want)
		}
	}
}
