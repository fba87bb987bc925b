package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/vm"
	"github.com/expr-lang/expr/vm/runtime"
)

// Limits of expressions. An evaluation is bounded without a clock: the
// work of its loops (ticks), the memory its ranges and literals take, and
// the size of every string or list it builds. No wall clock: the same
// expression on the same data gives the same answer on any machine.
const (
	// MaxExprNodes bounds the syntax tree of one expression.
	MaxExprNodes = 500
	// MaxExprTicks bounds the loop iterations, additions and builtin
	// calls of one evaluation.
	MaxExprTicks = 100_000
	// MaxExprMemory is the evaluator's memory budget (its own unit:
	// roughly the elements of the lists and ranges it makes).
	MaxExprMemory = 200_000
	// MaxExprValue bounds a string (bytes) or list or map (elements) that
	// an evaluation builds.
	MaxExprValue = 1 << 20
)

// Env is what expressions see. Field names are those of the language.
type Env struct {
	// Inputs are the run's inputs (defaults applied).
	Inputs map[string]any
	// Steps maps a step id to {output, status, error}.
	Steps map[string]any
	// Item and Index are the current item of a foreach step and its
	// position (from 0); nil and -1 elsewhere.
	Item  any
	Index int
	// Run is {id, workflow, started_at}.
	Run map[string]any
	// Event is the event that started the run ({id, type, subject,
	// source, time, data}); nil for other triggers.
	Event map[string]any
}

// names of the environment.
const (
	envInputs = "inputs"
	envSteps  = "steps"
	envItem   = "item"
	envIndex  = "index"
	envRun    = "run"
	envEvent  = "event"
	envCost   = "__cost"
)

// cost is one evaluation's meter, passed to the guard functions.
//
// The bounds are counts, never the wall clock: Decide must decide the same
// on a loaded machine as on an idle one, or a replay after a crash could
// fail a step that passed the first time.
type cost struct {
	ticks int
}

var errTooCostly = fmt.Errorf("expression too costly: over %d steps of work (loops, additions, calls); make it simpler or prepare the data in a step", MaxExprTicks)

func (c *cost) tick() {
	c.ticks++
	if c.ticks > MaxExprTicks {
		panic(errTooCostly)
	}
}

// checkSize panics when v is a string, list or map over MaxExprValue.
func checkSize(v any) any {
	n := 0
	switch x := v.(type) {
	case string:
		n = len(x)
	case []any:
		n = len(x)
	case map[string]any:
		n = len(x)
	default:
		rv := reflect.ValueOf(v)
		if k := rv.Kind(); k == reflect.Slice || k == reflect.Array || k == reflect.Map {
			n = rv.Len()
		}
	}
	if n > MaxExprValue {
		panic(fmt.Errorf("expression built a value of %d bytes or elements, over the limit of %d", n, MaxExprValue))
	}
	return v
}

// exprOptions are the compile options of every expression.
var exprOptions = []expr.Option{
	expr.Env(map[string]any{
		envInputs: map[string]any{},
		envSteps:  map[string]any{},
		envItem:   nil,
		envIndex:  0,
		envRun:    map[string]any{},
		envEvent:  map[string]any{},
		envCost:   (*cost)(nil),
	}),
	expr.MaxNodes(MaxExprNodes),
	// No clock (a run's decisions are made from its state and the
	// event), no unbounded string building.
	expr.DisableBuiltin("now"),
	expr.DisableBuiltin("repeat"),
	expr.Timezone("UTC"),
	expr.Function("__add", func(p ...any) (any, error) {
		p[0].(*cost).tick()
		return checkSize(runtime.Add(p[1], p[2])), nil
	}, new(func(*cost, any, any) any)),
	expr.Function("__tick", func(p ...any) (any, error) {
		p[0].(*cost).tick()
		return checkSize(p[1]), nil
	}, new(func(*cost, any) any)),
	expr.Patch(guard{}),
}

// guard meters an expression: every addition becomes __add, and every
// predicate body and builtin call passes through __tick, which counts one
// step of work and refuses values over MaxExprValue.
type guard struct{}

func (guard) Visit(node *ast.Node) {
	meter := func(n ast.Node) ast.Node {
		return &ast.CallNode{Callee: &ast.IdentifierNode{Value: "__tick"}, Arguments: []ast.Node{&ast.IdentifierNode{Value: envCost}, n}}
	}
	switch n := (*node).(type) {
	case *ast.BinaryNode:
		if n.Operator == "+" {
			ast.Patch(node, &ast.CallNode{Callee: &ast.IdentifierNode{Value: "__add"}, Arguments: []ast.Node{&ast.IdentifierNode{Value: envCost}, n.Left, n.Right}})
		}
	case *ast.PredicateNode:
		n.Node = meter(n.Node)
	case *ast.BuiltinNode:
		ast.Patch(node, meter(n))
	}
}

// program is a compiled expression and the steps it refers to.
type program struct {
	src  string
	prog *vm.Program
	// refs are the step ids of steps.<id>, in order of appearance.
	refs []string
	// usesItem is true when it names item or index.
	usesItem bool
}

// programs caches compiled expressions by source: compiling is
// deterministic, and runs re-evaluate the same few expressions.
var programs = struct {
	sync.Mutex
	m map[string]*program
}{m: map[string]*program{}}

const maxCachedPrograms = 10_000

// compileExpr compiles src (an expression, not a template).
func compileExpr(src string) (*program, error) {
	programs.Lock()
	p, ok := programs.m[src]
	programs.Unlock()
	if ok {
		return p, nil
	}
	if strings.Contains(src, envCost) {
		return nil, fmt.Errorf("%s is reserved", envCost)
	}
	tree, err := parser.Parse(src)
	if err != nil {
		return nil, exprError(err)
	}
	p = &program{src: src}
	var bad error
	ast.Walk(&tree.Node, visitFunc(func(n *ast.Node) {
		switch x := (*n).(type) {
		case *ast.MemberNode:
			if id, ok := x.Node.(*ast.IdentifierNode); ok && id.Value == envSteps {
				s, ok := x.Property.(*ast.StringNode)
				if !ok {
					bad = errors.New("refer to a step by its id (steps.<id>), not by a computed name")
					return
				}
				p.refs = append(p.refs, s.Value)
			}
		case *ast.IdentifierNode:
			if x.Value == envItem || x.Value == envIndex {
				p.usesItem = true
			}
		}
	}))
	if bad != nil {
		return nil, bad
	}
	prog, err := expr.Compile(src, exprOptions...)
	if err != nil {
		return nil, exprError(err)
	}
	p.prog = prog
	programs.Lock()
	if len(programs.m) >= maxCachedPrograms {
		programs.m = map[string]*program{}
	}
	programs.m[src] = p
	programs.Unlock()
	return p, nil
}

type visitFunc func(*ast.Node)

func (f visitFunc) Visit(n *ast.Node) { f(n) }

// exprError makes an error of the expression library one line.
func exprError(err error) error {
	if fe, ok := errors.AsType[*file.Error](err); ok {
		msg := fe.Message
		if fe.Column > 0 {
			msg = fmt.Sprintf("%s (at column %d)", msg, fe.Column)
		}
		if fe.Prev != nil && !strings.Contains(msg, fe.Prev.Error()) {
			msg += ": " + fe.Prev.Error()
		}
		return errors.New(msg)
	}
	return err
}

// eval evaluates p in env and returns a JSON value.
func (p *program) eval(env Env) (any, error) {
	m := map[string]any{
		envInputs: orEmpty(env.Inputs),
		envSteps:  orEmpty(env.Steps),
		envItem:   env.Item,
		envIndex:  env.Index,
		envRun:    orEmpty(env.Run),
		envEvent:  env.Event,
		envCost:   &cost{},
	}
	v := vm.VM{MemoryBudget: MaxExprMemory}
	out, err := v.Run(p.prog, m)
	if err != nil {
		return nil, exprError(err)
	}
	return jsonValue(out)
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// jsonValue turns a value of the evaluator into a JSON value: nil, bool,
// float64, string, []any or map[string]any. Times become RFC 3339 strings.
func jsonValue(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, string:
		return x, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("%v is not a JSON number", x)
		}
		return x, nil
	case int:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano), nil
	case time.Duration:
		return x.String(), nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			var err error
			if out[i], err = jsonValue(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			var err error
			if out[k], err = jsonValue(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("a %T is not a JSON value", v)
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("a %T is not a JSON value", v)
	}
	return out, nil
}

// template is a string with ${{ expr }} parts.
type template struct {
	// lits has one more element than exprs: lits[0] exprs[0] lits[1] ...
	lits  []string
	exprs []*program
}

// parseTemplate splits s at its ${{ }} parts and compiles them. A part
// ends at the first "}}" after which the expression parses, so a map
// literal ({a: {b: 1}}) may end in "}}".
func parseTemplate(s string) (*template, error) {
	t := &template{}
	rest := s
	for {
		i := strings.Index(rest, "${{")
		if i < 0 {
			t.lits = append(t.lits, rest)
			return t, nil
		}
		t.lits = append(t.lits, rest[:i])
		body := rest[i+3:]
		end := -1
		for from := 0; ; {
			j := strings.Index(body[from:], "}}")
			if j < 0 {
				break
			}
			j += from
			if _, err := parser.Parse(body[:j]); err == nil || end < 0 {
				end = j
				if err == nil {
					break
				}
			}
			from = j + 1
		}
		if end < 0 {
			return nil, errors.New("a ${{ is not closed by }}")
		}
		src := strings.TrimSpace(body[:end])
		if src == "" {
			return nil, errors.New("an empty ${{ }}")
		}
		p, err := compileExpr(src)
		if err != nil {
			return nil, fmt.Errorf("${{ %s }}: %w", src, err)
		}
		t.exprs = append(t.exprs, p)
		rest = body[end+2:]
	}
}

// single is true when the template is exactly one ${{ }} (spaces around
// allowed): it gives the expression's value, not a string.
func (t *template) single() bool {
	return len(t.exprs) == 1 && strings.TrimSpace(t.lits[0]) == "" && strings.TrimSpace(t.lits[1]) == ""
}

// render evaluates the template: the value of a single expression, else
// the text with each value put in (strings as they are, null as nothing,
// other values as JSON).
func (t *template) render(env Env) (any, error) {
	if len(t.exprs) == 0 {
		return t.lits[0], nil
	}
	if t.single() {
		return t.exprs[0].eval(env)
	}
	var b strings.Builder
	for i, p := range t.exprs {
		b.WriteString(t.lits[i])
		v, err := p.eval(env)
		if err != nil {
			return nil, fmt.Errorf("${{ %s }}: %w", p.src, err)
		}
		switch x := v.(type) {
		case nil:
		case string:
			b.WriteString(x)
		default:
			raw, _ := json.Marshal(x)
			b.Write(raw)
		}
		if b.Len() > MaxExprValue {
			return nil, fmt.Errorf("the text is over %d bytes", MaxExprValue)
		}
	}
	b.WriteString(t.lits[len(t.lits)-1])
	return b.String(), nil
}

// Eval evaluates the expression src (a condition or foreach list, no
// ${{ }}) in env and returns its JSON value. For tools and tests; the
// engine compiles its expressions once.
func Eval(src string, env Env) (any, error) {
	p, err := compileExpr(src)
	if err != nil {
		return nil, err
	}
	return p.eval(env)
}

// Render evaluates the templates in v (a string, or a JSON value holding
// strings) in env: a string that is exactly one ${{ }} becomes the
// expression's value, other strings stay strings. Values are never pasted
// into anything but the string they stand in.
func Render(v any, env Env) (any, error) {
	return render(v, env, "")
}

func render(v any, env Env, field string) (any, error) {
	switch x := v.(type) {
	case string:
		if !strings.Contains(x, "${{") {
			return x, nil
		}
		t, err := parseTemplate(x)
		if err != nil {
			return nil, fieldErr(field, err)
		}
		out, err := t.render(env)
		if err != nil {
			return nil, fieldErr(field, err)
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			var err error
			if out[i], err = render(e, env, fmt.Sprintf("%s[%d]", field, i)); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			var err error
			if out[k], err = render(e, env, joinField(field, k)); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return jsonValue(v)
}

func joinField(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

func fieldErr(field string, err error) error {
	if field == "" {
		return err
	}
	return fmt.Errorf("%s: %w", field, err)
}

// renderString renders a template that must give a string (a prompt, a
// notification's text); another value is written as JSON.
func renderString(s string, env Env, field string) (string, error) {
	v, err := render(s, env, field)
	if err != nil {
		return "", err
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case nil:
		return "", nil
	}
	raw, _ := json.Marshal(v)
	return string(raw), nil
}

// MaxOutput bounds the JSON of a step's output; a bigger output is cut
// to a string with a note saying so.
const MaxOutput = 64 << 10

// bound returns v, or when its JSON is over MaxOutput the start of that
// JSON with a note, and whether it cut.
func bound(v any) (any, bool) {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("[output dropped: not JSON: %v]", err), true
	}
	if len(raw) <= MaxOutput {
		return v, false
	}
	cut := raw[:MaxOutput]
	for len(cut) > 0 && !utf8.Valid(cut) {
		cut = cut[:len(cut)-1]
	}
	return fmt.Sprintf("%s … [cut: the first %d of %d bytes; a step's output is at most %d bytes of JSON]", cut, len(cut), len(raw), MaxOutput), true
}
