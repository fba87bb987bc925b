package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/agentwork/agentwork/bus"
)

// Options are the checks of Validate that need parts above this package.
type Options struct {
	// Schedule checks a cron trigger's schedule in its time zone; the
	// config passes the cron trigger's parser, so a workflow's schedule
	// means what a cron job's does. Nil: a schedule is only checked to be
	// non-empty.
	Schedule func(expr string, loc *time.Location) error
}

var inputNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// Validate checks every workflow of s and what spans them (child
// workflows that exist, no cycle of child workflows, nesting depth). The
// error joins one *Error per problem, in the order of the files.
func (s Set) Validate(opts Options) error {
	var errs []*Error
	for _, name := range slices.Sorted(maps.Keys(s)) {
		errs = append(errs, s[name].validate(s, opts)...)
	}
	errs = append(errs, s.validateChildren()...)
	slices.SortStableFunc(errs, func(a, b *Error) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		return a.Line - b.Line
	})
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

// Validate checks w alone (a child workflow it names is not looked up).
func (w *Workflow) Validate(opts Options) error {
	var out []error
	for _, e := range w.validate(nil, opts) {
		out = append(out, e)
	}
	return errors.Join(out...)
}

// checker collects the problems of one workflow.
type checker struct {
	w    *Workflow
	set  Set // nil: child workflows are not looked up
	opts Options
	errs []*Error
	// where maps each step id to the path of its step ("steps[2]").
	where map[string]string
	// branch maps each step id in a parallel branch to "<parallel
	// id>.<branch>".
	branch map[string]string
	count  int
}

func (c *checker) add(rel, step, format string, args ...any) {
	c.errs = append(c.errs, c.w.errorf(rel, step, format, args...))
}

func (w *Workflow) validate(set Set, opts Options) []*Error {
	c := &checker{w: w, set: set, opts: opts, where: map[string]string{}, branch: map[string]string{}}
	if !bus.ValidToken(w.Name) {
		c.add("", "", "the name %q is not 1-64 characters of a-z, 0-9, _ and -; rename it", w.Name)
	}
	for _, name := range slices.Sorted(maps.Keys(w.Inputs)) {
		c.input(name, w.Inputs[name])
	}
	for i, t := range w.On {
		c.trigger(fmt.Sprintf("on[%d]", i), t)
	}
	if w.Concurrency.Limit < 0 {
		c.add("concurrency.limit", "", "%d is negative; want 0 (no limit) or more", w.Concurrency.Limit)
	}
	switch w.Concurrency.Overlap {
	case "", OverlapSkip, OverlapQueue, OverlapAllow:
	default:
		c.add("concurrency.overlap", "", "%q: want skip, queue or allow", w.Concurrency.Overlap)
	}
	if w.Timeout < 0 {
		c.add("timeout", "", "%s is negative; want a duration such as 48h, or none", w.Timeout)
	}
	for i, t := range w.Targets {
		if strings.TrimSpace(t) == "" {
			c.add(fmt.Sprintf("targets[%d]", i), "", "empty; name a connector")
		}
	}
	if len(w.Steps) == 0 {
		c.add("steps", "", "no steps; a workflow needs at least one")
	}
	c.collect(w.Steps, "steps", "")
	if c.count > MaxSteps {
		c.add("steps", "", "%d steps, over the limit of %d; move some into a child workflow", c.count, MaxSteps)
	}
	c.sequence(w.Steps, "steps", nil)
	return c.errs
}

func (c *checker) input(name string, in Input) {
	rel := "inputs." + name
	if !inputNameRE.MatchString(name) {
		c.add(rel, "", "an input name is a letter or _ then up to 63 letters, digits and _ (it is written inputs.%s in expressions)", name)
	}
	switch in.Type {
	case "", TypeString, TypeNumber, TypeInteger, TypeBoolean, TypeObject, TypeArray:
	default:
		c.add(rel+".type", "", "%q: want string, number, integer, boolean, object or array", in.Type)
		return
	}
	if in.Default != nil {
		if in.Required {
			c.add(rel+".default", "", "a required input has no use for a default; drop one of them")
		}
		if _, err := checkType(in.Type, in.Default); err != nil {
			c.add(rel+".default", "", "%v", err)
		}
	}
}

func (c *checker) trigger(rel string, t Trigger) {
	n := 0
	if t.Webhook != nil {
		n++
	}
	if t.Cron != nil {
		n++
		loc := time.UTC
		if t.Cron.Timezone != "" {
			var err error
			if loc, err = time.LoadLocation(t.Cron.Timezone); err != nil {
				c.add(rel+".cron.timezone", "", "%q is not an IANA time zone (e.g. Europe/Berlin)", t.Cron.Timezone)
				loc = time.UTC
			}
		}
		switch {
		case strings.TrimSpace(t.Cron.Schedule) == "":
			c.add(rel+".cron.schedule", "", "empty; want a cron expression such as \"0 9 * * mon\" or \"@daily\"")
		case c.opts.Schedule != nil:
			if err := c.opts.Schedule(t.Cron.Schedule, loc); err != nil {
				c.add(rel+".cron.schedule", "", "%v", err)
			}
		}
	}
	if t.Event != nil {
		n++
		if strings.TrimSpace(t.Event.Type) == "" {
			c.add(rel+".event.type", "", "empty; want the event type to match, e.g. agentwork.cron.error")
		}
		if t.Event.If != "" {
			p, err := compileExpr(condSource(t.Event.If))
			switch {
			case err != nil:
				c.add(rel+".event.if", "", "%v", err)
			case len(p.refs) > 0 || p.usesItem:
				c.add(rel+".event.if", "", "an event condition sees only `event` (and inputs' defaults), not steps or items")
			}
		}
	}
	switch {
	case n == 0:
		c.add(rel, "", "no trigger; want one of webhook, cron or event")
	case n > 1:
		c.add(rel, "", "more than one trigger in one entry; write each as its own list item")
	}
}

// collect records every step id (unique), counting the steps.
func (c *checker) collect(steps []Step, rel, branch string) {
	for i := range steps {
		s := &steps[i]
		c.count++
		srel := fmt.Sprintf("%s[%d]", rel, i)
		switch {
		case !bus.ValidToken(s.ID):
			c.add(srel+".id", s.ID, "a step id is 1-64 characters of a-z, 0-9, _ and -; got %q", s.ID)
		case c.where[s.ID] != "":
			c.add(srel+".id", s.ID, "the id is also used by %s; step ids are unique in a workflow", c.where[s.ID])
		default:
			c.where[s.ID] = srel
			if branch != "" {
				c.branch[s.ID] = branch
			}
		}
		for _, b := range slices.Sorted(maps.Keys(s.Parallel)) {
			c.collect(s.Parallel[b], srel+".parallel."+b, s.ID+"."+b)
		}
	}
}

// sequence checks steps that run in order; visible are the ids earlier
// steps (outside the sequence) made visible.
func (c *checker) sequence(steps []Step, rel string, visible map[string]bool) {
	seen := maps.Clone(visible)
	if seen == nil {
		seen = map[string]bool{}
	}
	for i := range steps {
		s := &steps[i]
		c.step(s, fmt.Sprintf("%s[%d]", rel, i), seen)
		seen[s.ID] = true
		for _, b := range s.Parallel {
			c.markAll(b, seen)
		}
	}
}

func (c *checker) markAll(steps []Step, seen map[string]bool) {
	for i := range steps {
		seen[steps[i].ID] = true
		for _, b := range steps[i].Parallel {
			c.markAll(b, seen)
		}
	}
}

func (c *checker) step(s *Step, rel string, seen map[string]bool) {
	id := s.ID
	kind, kinds := s.Kind()
	switch {
	case len(kinds) == 0:
		c.add(rel, id, "no step kind; give it one of agent, tool, notify, wait (or until), workflow, parallel or approval")
	case len(kinds) > 1:
		c.add(rel, id, "more than one kind (%s); a step does one thing: split it into steps", strings.Join(kinds, " and "))
	case s.Wait != 0 && s.Until != "":
		c.add(rel+".until", id, "wait and until both set; keep one")
	}
	inForeach := s.Foreach != ""
	expr := func(field, src string, cond bool) {
		c.expr(rel+"."+field, id, src, cond, seen, inForeach)
	}
	if s.If != "" {
		expr("if", s.If, true)
	}
	if s.Timeout < 0 {
		c.add(rel+".timeout", id, "%s is negative; want a duration such as 2m, or none", s.Timeout)
	}
	if r := s.Retry; r != nil {
		if r.Attempts < 1 || r.Attempts > MaxAttempts {
			c.add(rel+".retry.attempts", id, "%d: want 1 to %d (the first attempt included)", r.Attempts, MaxAttempts)
		}
		if r.Backoff < 0 || r.Backoff > MaxRetryBackoff {
			c.add(rel+".retry.backoff", id, "%s: want 0 to %s", r.Backoff, MaxRetryBackoff)
		}
		if r.MaxBackoff < 0 || (r.MaxBackoff > 0 && r.MaxBackoff < r.Backoff) {
			c.add(rel+".retry.max_backoff", id, "%s: want at least the backoff (%s)", r.MaxBackoff, r.Backoff)
		}
	}
	switch s.OnFailure {
	case "", OnFailureFail, OnFailureContinue:
	default:
		c.add(rel+".on_failure", id, "%q: want fail or continue", s.OnFailure)
	}
	if s.Args != nil && kind != KindTool {
		c.add(rel+".args", id, "args belong to a tool step; this is a %s step", kindName(kind))
	}
	if s.With != nil && kind != KindWorkflow {
		c.add(rel+".with", id, "with belongs to a workflow step; this is a %s step", kindName(kind))
	}
	if s.Concurrency != 0 && !inForeach {
		c.add(rel+".concurrency", id, "concurrency belongs to a foreach step")
	}
	if inForeach {
		expr("foreach", s.Foreach, true)
		if s.Concurrency < 0 || s.Concurrency > MaxConcurrency {
			c.add(rel+".concurrency", id, "%d: want 1 to %d", s.Concurrency, MaxConcurrency)
		}
		if kind == KindParallel {
			c.add(rel+".foreach", id, "a parallel step cannot be a foreach; put the branches in a child workflow and make that the foreach step")
		}
	}
	if len(kinds) != 1 {
		return
	}
	switch kind {
	case KindAgent:
		a := s.Agent
		if strings.TrimSpace(a.Prompt) == "" {
			c.add(rel+".agent.prompt", id, "empty; say what the agent should do")
		}
		expr("agent.prompt", a.Prompt, false)
		if a.Output != nil {
			if _, err := resolveSchema(a.Output); err != nil {
				c.add(rel+".agent.output", id, "not a JSON Schema: %v", err)
			}
		}
		if a.MaxSteps < 0 {
			c.add(rel+".agent.max_steps", id, "%d is negative", a.MaxSteps)
		}
		switch a.Memory {
		case "", "none", "light", "full":
		default:
			c.add(rel+".agent.memory", id, "%q: want none, light or full", a.Memory)
		}
		for i, t := range a.Tools {
			if strings.TrimSpace(t) == "" {
				c.add(fmt.Sprintf("%s.agent.tools[%d]", rel, i), id, "empty; name a tool or a glob")
			}
		}
	case KindTool:
		c.value(rel+".args", id, s.Args, seen, inForeach)
	case KindNotify:
		n := s.Notify
		if strings.TrimSpace(n.Text) == "" {
			c.add(rel+".notify.text", id, "empty; say what the notification says")
		}
		expr("notify.text", n.Text, false)
		for i, t := range n.Targets {
			expr(fmt.Sprintf("notify.targets[%d]", i), t, false)
		}
		switch n.Urgency {
		case "", UrgencyLow, UrgencyNormal, UrgencyHigh:
		default:
			c.add(rel+".notify.urgency", id, "%q: want low, normal or high", n.Urgency)
		}
	case KindWait:
		if s.Wait < 0 {
			c.add(rel+".wait", id, "%s is negative; want a duration such as 10m", s.Wait)
		}
		if s.Until != "" {
			expr("until", s.Until, true)
		}
	case KindWorkflow:
		if !bus.ValidToken(s.Workflow) {
			c.add(rel+".workflow", id, "%q is not a workflow name (1-64 characters of a-z, 0-9, _ and -)", s.Workflow)
		} else if c.set != nil && c.set[s.Workflow] == nil {
			c.add(rel+".workflow", id, "no workflow %q; known: %s", s.Workflow, strings.Join(slices.Sorted(maps.Keys(c.set)), ", "))
		}
		c.value(rel+".with", id, s.With, seen, inForeach)
	case KindApproval:
		c.approval(s, rel, seen)
	case KindParallel:
		if s.Retry != nil || s.Timeout != 0 {
			c.add(rel, id, "retry and timeout apply to the steps in the branches, not to a parallel step; move them there")
		}
		if len(s.Parallel) == 0 || len(s.Parallel) > MaxBranches {
			c.add(rel+".parallel", id, "%d branches: want 1 to %d", len(s.Parallel), MaxBranches)
		}
		for _, b := range slices.Sorted(maps.Keys(s.Parallel)) {
			brel := rel + ".parallel." + b
			if !bus.ValidToken(b) {
				c.add(brel, id, "a branch name is 1-64 characters of a-z, 0-9, _ and -")
			}
			if len(s.Parallel[b]) == 0 {
				c.add(brel, id, "an empty branch; give it steps or remove it")
			}
			c.sequence(s.Parallel[b], brel, seen)
		}
	}
}

// approval checks an approval step.
func (c *checker) approval(s *Step, rel string, seen map[string]bool) {
	id, a := s.ID, s.Approval
	rel += ".approval"
	if s.Foreach != "" {
		c.add(rel, id, "an approval step cannot be a foreach; ask once, or make a child workflow with the approval the foreach step")
	}
	if s.Retry != nil || s.Timeout != 0 {
		c.add(rel, id, "retry and timeout do not apply to an approval step; set approval.timeout and approval.on_timeout")
	}
	if strings.TrimSpace(a.Message) == "" {
		c.add(rel+".message", id, "empty; say what the people asked approve")
	}
	c.expr(rel+".message", id, a.Message, false, seen, false)
	if len(a.Targets) == 0 && len(c.w.Targets) == 0 {
		c.add(rel+".targets", id, "no targets: name the connectors that carry the question (or set the workflow's targets)")
	}
	for i, t := range a.Targets {
		if strings.TrimSpace(t) == "" {
			c.add(fmt.Sprintf("%s.targets[%d]", rel, i), id, "empty; name a connector")
			continue
		}
		c.expr(fmt.Sprintf("%s.targets[%d]", rel, i), id, t, false, seen, false)
	}
	for i, ap := range a.Approvers {
		if ap == "link" {
			continue
		}
		if conn, user, ok := strings.Cut(ap, ":"); !ok || conn == "" || user == "" || strings.ContainsAny(ap, " \t") {
			c.add(fmt.Sprintf("%s.approvers[%d]", rel, i), id, "%q: want connector:user-id (telegram:123456789, slack:U024BE7LH) or link", ap)
		}
	}
	if a.Timeout < 0 {
		c.add(rel+".timeout", id, "%s is negative; want a duration such as 4h, or none (approvals.timeout, 24h)", a.Timeout)
	}
	switch a.OnTimeout {
	case "", "reject", "approve", "fail":
	default:
		c.add(rel+".on_timeout", id, "%q: want reject (the default), approve or fail", a.OnTimeout)
	}
	switch {
	case a.Reminder < 0:
		c.add(rel+".reminder", id, "%s is negative; want a duration shorter than the timeout, or none", a.Reminder)
	case a.Reminder > 0 && a.Timeout > 0 && a.Reminder >= a.Timeout:
		c.add(rel+".reminder", id, "%s: want a duration shorter than the timeout (%s)", a.Reminder, a.Timeout)
	}
}

func kindName(k string) string {
	if k == "" {
		return "kindless"
	}
	return k
}

// value checks the templates in the strings of v.
func (c *checker) value(rel, step string, v any, seen map[string]bool, inForeach bool) {
	switch x := v.(type) {
	case string:
		c.expr(rel, step, x, false, seen, inForeach)
	case []any:
		for i, e := range x {
			c.value(fmt.Sprintf("%s[%d]", rel, i), step, e, seen, inForeach)
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			c.value(rel+"."+k, step, x[k], seen, inForeach)
		}
	}
}

// expr checks src, a condition (cond) or a template, and the steps it
// refers to.
func (c *checker) expr(rel, step, src string, cond bool, seen map[string]bool, inForeach bool) {
	var progs []*program
	if cond {
		p, err := compileExpr(condSource(src))
		if err != nil {
			c.add(rel, step, "%v", err)
			return
		}
		progs = []*program{p}
	} else {
		if !strings.Contains(src, "${{") {
			return
		}
		t, err := parseTemplate(src)
		if err != nil {
			c.add(rel, step, "%v", err)
			return
		}
		progs = t.exprs
	}
	for _, p := range progs {
		if p.usesItem && !inForeach {
			c.add(rel, step, "`item` and `index` exist only in a foreach step")
		}
		for _, ref := range p.refs {
			c.ref(rel, step, ref, seen)
		}
	}
}

func (c *checker) ref(rel, step, ref string, seen map[string]bool) {
	switch {
	case seen[ref]:
		return
	case ref == step:
		c.add(rel, step, "steps.%s is this step itself; a step sees only the steps before it", ref)
	case c.where[ref] == "":
		c.add(rel, step, "steps.%s: no step %q in this workflow (steps: %s)", ref, ref, strings.Join(slices.Sorted(maps.Keys(c.where)), ", "))
	case siblings(c.branch[ref], c.branch[step]):
		c.add(rel, step, "steps.%s is in parallel branch %s, which runs beside this step; refer to it after the parallel step", ref, c.branch[ref])
	default:
		c.add(rel, step, "steps.%s comes later (at %s); a step sees only the steps before it: move it, or refer to an earlier step", ref, c.where[ref])
	}
}

// siblings is true when two steps are in different branches of one
// parallel step (branch names "<parallel id>.<branch>").
func siblings(a, b string) bool {
	pa, _, _ := strings.Cut(a, ".")
	pb, _, _ := strings.Cut(b, ".")
	return a != "" && b != "" && a != b && pa == pb
}

// condSource is the expression of a condition: src, or the inside of a
// ${{ }} that is all of it.
func condSource(src string) string {
	s := strings.TrimSpace(src)
	if strings.HasPrefix(s, "${{") && strings.HasSuffix(s, "}}") && strings.Count(s, "${{") == 1 {
		return strings.TrimSpace(s[3 : len(s)-2])
	}
	return s
}

// validateChildren checks the child workflows across the set: no cycle,
// and no chain deeper than MaxDepth.
func (s Set) validateChildren() []*Error {
	var errs []*Error
	const (
		unseen = iota
		active
		done
	)
	state := map[string]int{}
	depth := map[string]int{}
	var stack []string
	var visit func(name string) int
	visit = func(name string) int {
		w := s[name]
		if w == nil {
			return 0
		}
		switch state[name] {
		case active:
			return -1
		case done:
			return depth[name]
		}
		state[name] = active
		stack = append(stack, name)
		deepest := 0
		forEachStep(w.Steps, "steps", func(st *Step, rel string) {
			if st.Workflow == "" || s[st.Workflow] == nil {
				return
			}
			d := visit(st.Workflow)
			if d < 0 {
				i := slices.Index(stack, st.Workflow)
				cycle := append(slices.Clone(stack[i:]), st.Workflow)
				errs = append(errs, w.errorf(rel+".workflow", st.ID, "child workflows form a cycle (%s); a run would start itself without end: break the cycle", strings.Join(cycle, " → ")))
				return
			}
			deepest = max(deepest, d+1)
		})
		stack = stack[:len(stack)-1]
		state[name] = done
		depth[name] = deepest
		if deepest > MaxDepth {
			errs = append(errs, w.errorf("steps", "", "child workflows nest %d deep, over the limit of %d; flatten them", deepest, MaxDepth))
		}
		return deepest
	}
	for _, name := range slices.Sorted(maps.Keys(s)) {
		visit(name)
	}
	return errs
}

// forEachStep calls fn for every step of steps and their branches, with
// its path.
func forEachStep(steps []Step, rel string, fn func(*Step, string)) {
	for i := range steps {
		srel := fmt.Sprintf("%s[%d]", rel, i)
		fn(&steps[i], srel)
		for _, b := range slices.Sorted(maps.Keys(steps[i].Parallel)) {
			forEachStep(steps[i].Parallel[b], srel+".parallel."+b, fn)
		}
	}
}

// schemas caches resolved schemas (agent steps' outputs, tools'
// arguments) by their JSON.
var schemas sync.Map

// resolveSchema resolves an agent step's output schema.
func resolveSchema(m map[string]any) (*jsonschema.Resolved, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return resolveRaw(raw)
}

// resolveRaw resolves the JSON Schema raw (cached).
func resolveRaw(raw []byte) (*jsonschema.Resolved, error) {
	if r, ok := schemas.Load(string(raw)); ok {
		return r.(*jsonschema.Resolved), nil
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	r, err := s.Resolve(nil)
	if err != nil {
		return nil, err
	}
	schemas.Store(string(raw), r)
	return r, nil
}

// checkType returns v as a value of the input type typ ("" is string),
// or an error saying what was given.
func checkType(typ string, v any) (any, error) {
	if typ == "" {
		typ = TypeString
	}
	ok := false
	switch typ {
	case TypeString:
		_, ok = v.(string)
	case TypeBoolean:
		_, ok = v.(bool)
	case TypeNumber, TypeInteger:
		var f float64
		switch x := v.(type) {
		case float64:
			f, ok = x, true
		case int:
			f, ok = float64(x), true
		case int64:
			f, ok = float64(x), true
		case json.Number:
			var err error
			f, err = x.Float64()
			ok = err == nil
		}
		if ok && typ == TypeInteger && f != float64(int64(f)) {
			return nil, fmt.Errorf("%v is not an integer", v)
		}
		if ok {
			return f, nil
		}
	case TypeObject:
		_, ok = v.(map[string]any)
	case TypeArray:
		_, ok = v.([]any)
	}
	if !ok {
		return nil, fmt.Errorf("want %s %s, got %s", article(typ), typ, describe(v))
	}
	return jsonValue(v)
}

func article(typ string) string {
	if strings.ContainsAny(typ[:1], "aeiou") {
		return "an"
	}
	return "a"
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return fmt.Sprintf("the string %q", x)
	case bool:
		return fmt.Sprintf("the boolean %v", x)
	case float64, int, int64, json.Number:
		return fmt.Sprintf("the number %v", x)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}
