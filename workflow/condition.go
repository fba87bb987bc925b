package workflow

import "fmt"

// Condition is a compiled condition of the expression language, as a
// step's `if` is: for an event trigger's `if`, compiled once at load and
// tested against each event.
type Condition struct{ p *program }

// CompileCondition compiles src (an expression, or one ${{ }} around the
// whole). It refuses what a condition outside a run cannot see: steps,
// item and index.
func CompileCondition(src string) (*Condition, error) {
	p, err := compileExpr(condSource(src))
	if err != nil {
		return nil, err
	}
	if len(p.refs) > 0 || p.usesItem {
		return nil, fmt.Errorf("%q: a trigger's condition sees only `event` and `inputs`, not steps or items", src)
	}
	return &Condition{p: p}, nil
}

// Test evaluates the condition in env: true, or false for false and null;
// any other value is an error, as for a step's `if`.
func (c *Condition) Test(env Env) (bool, error) {
	v, err := c.p.eval(env)
	if err != nil {
		return false, err
	}
	switch v := v.(type) {
	case nil:
		return false, nil
	case bool:
		return v, nil
	}
	return false, fmt.Errorf("gave %s, want true or false", describe(v))
}
