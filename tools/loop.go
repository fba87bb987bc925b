package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/model"
)

// ErrMaxSteps is returned by Loop when the model still asks for tool calls
// after the step budget is spent.
var ErrMaxSteps = errors.New("tools: model still calling tools after max_steps")

// Result is what Loop produced.
type Result struct {
	// Text is the model's final answer.
	Text string
	// Calls are all tool calls the model made, in order, with their outcome,
	// but those Dropped counts.
	Calls []Call
	// Dropped counts the calls replies asked for past Limits.PerReply,
	// which ran nothing and are not in Calls.
	Dropped int
	// Usage sums all model calls of the loop.
	Usage model.Usage
	// Model is the model name the provider reported last.
	Model string
	// StopReason and Truncated are those of the last reply, whose text is
	// Text (see model.Reply).
	StopReason string
	Truncated  bool
	// Steps counts model calls.
	Steps int
	// Messages is the whole conversation, for debugging and run records.
	Messages []model.Message

	st State // how far the Loop got (see State)
}

// State returns how far the Loop got, to go on From: with a user turn
// appended to its Messages, a Loop From it asks the model again, within
// what is left of the same Limits (the steps and calls made count).
func (r Result) State() State {
	s := r.st
	s.Messages = slices.Clone(s.Messages)
	s.Calls = slices.Clone(s.Calls)
	return s
}

// Call is one tool call the model asked for, with its outcome.
type Call struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Result    string `json:"result,omitempty"`
	Error     string `json:"error,omitempty"`
	// Outcome is OutcomeOK, OutcomeError, OutcomeTimeout or OutcomeRefused.
	Outcome string `json:"outcome,omitempty"`
	// DurationMS is how long the tool ran, in milliseconds (0 when refused).
	DurationMS float64 `json:"duration_ms"`
	// ArgumentsBytes and ResultBytes are the sizes of the arguments and of
	// what the model got back (the result, or the error), whole: a record
	// may hold them cut (see Record).
	ArgumentsBytes int `json:"arguments_bytes"`
	ResultBytes    int `json:"result_bytes"`
}

// Outcomes of a call.
const (
	// OutcomeOK: the tool ran and returned a result.
	OutcomeOK = "ok"
	// OutcomeError: the tool ran and failed (or reported an error).
	OutcomeError = "error"
	// OutcomeTimeout: the tool did not answer in time (ErrTimeout).
	OutcomeTimeout = "timeout"
	// OutcomeRefused: nothing ran: the name is not a tool of the run (unknown,
	// or outside its scope), the arguments are not a JSON object, the
	// run has made its Limits.MaxCalls calls, or the tool refused the
	// call before doing anything (ErrRefused).
	OutcomeRefused = "refused"
	// OutcomeInterrupted: the call was running when its run was cut short
	// (the process killed), so whether it took effect is unknown; the Loop
	// that went on from the run's State did not make it again (its tool is
	// not Idempotent) and told the model so. Its duration is unknown (0).
	OutcomeInterrupted = "interrupted"
)

// ErrRefused is the kind of a handler error that means the tool did
// nothing: the call asked for what the tool's own limits forbid, such as
// a command outside exec's allow-list or a URL outside http_fetch's
// (errors.Is). Such a call's outcome is OutcomeRefused.
var ErrRefused = errors.New("tools: call refused")

// ErrTimeout is the kind of a handler error that means the tool did not
// answer within its time limit (errors.Is); such a call's outcome is
// OutcomeTimeout.
var ErrTimeout = errors.New("tools: call timed out")

// Limits bound one Loop.
type Limits struct {
	// MaxSteps bounds the model calls. <= 0: 8.
	MaxSteps int
	// MaxCalls bounds the calls of every tool but notify_user, which has
	// its own bound (MaxNotify) and must stay usable to report: a call
	// beyond is refused, and the model is told so. It also bounds the calls
	// of one reply (see PerReply). <= 0: no bound.
	MaxCalls int
}

// PerReply is how many calls of one reply a Loop makes: MaxCalls and
// MaxNotify, all a run may make; 0 (MaxCalls <= 0): all. Of a reply
// that asks for more, the first call past them is refused, telling the
// model so, and the rest are dropped: they run nothing, and neither the
// conversation nor the calls keep them (State.Dropped counts them), so
// that a model gone wrong cannot fill a run's records.
func (lim Limits) PerReply() int {
	if lim.MaxCalls <= 0 {
		return 0
	}
	return lim.MaxCalls + MaxNotify
}

// Steps is the model calls a Loop may make: MaxSteps, or 8.
func (lim Limits) Steps() int {
	if lim.MaxSteps <= 0 {
		return 8
	}
	return lim.MaxSteps
}

// State is how far a Loop has got: what it gives its Journal to keep, and
// what a Loop started From it goes on from.
type State struct {
	// Messages is the conversation: the request's messages, then every
	// reply, each followed by a tool result for each of its calls that
	// ran. Calls of the last reply that no result answers yet did not run,
	// except maybe the first of them that is not notify_user: it may have
	// been running when the Loop was cut short (see Loop).
	Messages []model.Message `json:"messages"`
	// Calls are the calls that have a result in Messages, in order.
	Calls []Call `json:"calls,omitempty"`
	// Usage sums the model calls so far; Model is the last one named.
	Usage model.Usage `json:"usage"`
	Model string      `json:"model,omitempty"`
	// StopReason and Truncated are those of the last reply.
	StopReason string `json:"stop_reason,omitempty"`
	Truncated  bool   `json:"truncated,omitempty"`
	// Steps counts the model calls made.
	Steps int `json:"steps"`
	// Counted counts the calls Limits.MaxCalls bounds.
	Counted int `json:"counted,omitempty"`
	// Dropped counts the calls replies asked for past Limits.PerReply.
	Dropped int `json:"dropped,omitempty"`
	// Held is the id of the call of the last reply that waits for a
	// decision (see Gate): it has not run. A Loop From this State asks
	// the Gate again before it runs it, and does not take it for the call
	// in flight.
	Held string `json:"held,omitempty"`
}

// Gate holds the calls of some tools until someone decides on them (a
// person's approval): the runner's gated tool calls. Its methods are
// called from the Loop's goroutine, one call at a time.
type Gate interface {
	// Gates reports whether a call of the tool name needs a decision.
	// notify_user is never asked about.
	Gates(name string) bool
	// Check is asked before a call Gates names runs, with the call and
	// its index among the Loop's calls (State.Calls so far: the same
	// index every time the same call is asked about). The Loop saves its
	// State with the call held (State.Held) before it asks. An error ends
	// the Loop with it.
	Check(ctx context.Context, call model.ToolCall, index int) (Decision, error)
}

// Decision is a Gate's answer: the zero Decision lets the call run.
type Decision struct {
	// Wait: nobody has decided yet. The call does not run; the Loop ends
	// with ErrWaiting, its State saved with the call held, so that a
	// Loop From that State asks again.
	Wait bool
	// Refused, if set, says why the call may not run: it runs nothing,
	// and the model reads this as the call's error (OutcomeRefused).
	Refused string
}

// ErrWaiting is returned by Loop when a Gate holds a call until someone
// decides: the Loop's State (saved in its Journal) holds the call, not
// run; go on From it once decided.
var ErrWaiting = errors.New("tools: a tool call waits for a decision")

// Journal keeps a Loop's State as it goes, so that a Loop cut short (its
// process killed) can go on from the last one it kept (From) without
// running a call that finished again or asking the model again for a
// reply it gave. Save stores s before the Loop goes on, and must not
// change s or keep it past the call; an error ends the Loop with it.
type Journal interface {
	Save(ctx context.Context, s State) error
}

// LoopOption configures one Loop.
type LoopOption func(*loopOptions)

type loopOptions struct {
	journal Journal
	from    *State
	secrets []string
	gate    Gate
}

// WithGate makes the Loop ask g before it makes a call of a tool g gates
// (see Gate). A Loop with a Gate needs a Journal: a held call waits in
// the State the Journal keeps.
func WithGate(g Gate) LoopOption { return func(o *loopOptions) { o.gate = g } }

// WithJournal makes the Loop save its State in j (see Loop for when).
func WithJournal(j Journal) LoopOption { return func(o *loopOptions) { o.journal = j } }

// WithSecrets makes the Loop cut secrets (the config's API keys and
// tokens) out of every tool result and tool error, in every form
// secret.Redact knows, before the model reads it or the Loop keeps it: a
// tool that reads a secret (a process's environment, a server that echoes
// its token) hands the model [redacted]. Each tool gets them in its
// context too (secret.FromContext), for its own cut.
func WithSecrets(secrets ...string) LoopOption {
	return func(o *loopOptions) { o.secrets = append(o.secrets, secrets...) }
}

// From makes the Loop go on from s, a State an earlier Loop of the same
// request saved in its Journal, instead of starting from the request's
// messages (see Loop).
func From(s State) LoopOption { return func(o *loopOptions) { o.from = &s } }

// Loop calls p with req, runs every tool call in each reply through reg and
// feeds the results back, until a reply has no tool calls or
// lim.MaxSteps model calls were made (ErrMaxSteps; the result so far is
// returned with it). reg holds the tools the run may use, and req.Tools
// should describe the same: a call to a name reg does not have runs
// nothing. Every failed call (a name reg does not have, arguments that are
// not a JSON object, a call past lim.MaxCalls, a handler error) goes back
// to the model as a tool result marked as an error; only provider errors,
// a Journal's errors and ctx end the loop early. Calls run one after
// another; a call cut short by ctx gets no result in the State.
//
// With a Journal (WithJournal), the Loop saves its State from the first
// reply that asks for a tool other than notify_user on (notify_user has
// no side effect: a run that calls nothing else writes nothing): after
// every reply, before its calls run, and after every call of a tool other
// than notify_user, before the next call or model call.
//
// From a State (From), the Loop asks the model nothing it answered
// already: a State that ends with a reply without calls is the result as
// it is; one that ends with a user turn (Result.State with a message
// appended) asks the model. The calls of the last reply that have no result run now, but the
// one that may have been running when the earlier Loop stopped (the first
// that is not notify_user) runs again only if its tool is Idempotent;
// otherwise it runs nothing, and its result tells the model that its
// outcome is unknown (OutcomeInterrupted). The notify_user messages the
// State holds count towards MaxNotify.
//
// With a Gate (WithGate), a call of a tool the Gate gates is asked about
// before it runs: it runs, is refused, or waits (the Loop ends with
// ErrWaiting, its State saved with the call held; a Loop From that State
// asks again). An approved call is saved as no longer held before it
// runs, so from there the rule for the call in flight applies to it.
func Loop(ctx context.Context, p model.Provider, reg *Registry, req model.Request, lim Limits, opts ...LoopOption) (Result, error) {
	var o loopOptions
	for _, opt := range opts {
		opt(&o)
	}
	maxSteps := lim.Steps()
	l := &loop{reg: reg, lim: lim, journal: o.journal, secrets: o.secrets, gate: o.gate}
	if o.from != nil {
		l.st = *o.from
		l.st.Messages = slices.Clone(l.st.Messages)
		l.st.Calls = slices.Clone(l.st.Calls)
		l.saving = true
		restoreDelivery(ctx, l.st.Calls)
		if done, err := l.resume(ctx); done || err != nil {
			return l.result(), err
		}
	} else {
		l.st.Messages = slices.Clone(req.Messages)
	}
	for l.st.Steps < maxSteps {
		req.Messages = l.st.Messages
		reply, err := p.Complete(ctx, req)
		l.st.Steps++
		if err != nil {
			return l.result(), err
		}
		l.st.Usage = l.st.Usage.Add(reply.Usage)
		if reply.Model != "" {
			l.st.Model = reply.Model
		}
		l.st.StopReason, l.st.Truncated = reply.StopReason, reply.Truncated
		// Give every call an id before it enters the history: the tool result
		// must answer the same id the assistant turn carries.
		for i := range reply.ToolCalls {
			if reply.ToolCalls[i].ID == "" {
				reply.ToolCalls[i].ID = fmt.Sprintf("call_%d_%d", l.st.Steps, i)
			}
		}
		if n := lim.PerReply(); n > 0 && len(reply.ToolCalls) > n+1 {
			// Keep the first past the bound: its refusal tells the model.
			l.st.Dropped += len(reply.ToolCalls) - (n + 1)
			reply.ToolCalls = reply.ToolCalls[:n+1]
		}
		l.st.Messages = append(l.st.Messages, model.Message{Role: model.RoleAssistant, Content: reply.Text, ToolCalls: reply.ToolCalls})
		l.saving = l.saving || slices.ContainsFunc(reply.ToolCalls, func(tc model.ToolCall) bool { return tc.Name != NotifyName })
		if err := l.save(ctx); err != nil {
			return l.result(), err
		}
		if len(reply.ToolCalls) == 0 {
			return l.result(), nil
		}
		if err := l.run(ctx, reply.ToolCalls, 0, false); err != nil {
			return l.result(), err
		}
	}
	return l.result(), ErrMaxSteps
}

// loop is one Loop's progress.
type loop struct {
	reg     *Registry
	lim     Limits
	journal Journal
	gate    Gate
	saving  bool     // the journal keeps the state (from the first call that is not notify_user on)
	secrets []string // cut out of every result and error (WithSecrets)
	st      State
	cut     *Call // a call ctx cut short: on the result, not in the state
}

// run makes the calls, in order: those of a reply from its call at index
// first on. inFlight says the first that is not notify_user may have been
// running when an earlier Loop stopped.
func (l *loop) run(ctx context.Context, calls []model.ToolCall, first int, inFlight bool) error {
	for i, tc := range calls {
		if err := ctx.Err(); err != nil {
			return err
		}
		resumed := inFlight && tc.Name != NotifyName
		if resumed {
			inFlight = false
			if l.st.Held == tc.ID {
				// It waited for a decision: it did not run.
				resumed = false
			}
		}
		var call Call
		if n := l.lim.PerReply(); n > 0 && first+i >= n {
			call = refuse(tc, fmt.Sprintf("not run: your reply asked for more tool calls than the %d one reply may make (runner.max_tool_calls and %d notify_user), "+
				"so this call and those after it were not run; ask for fewer at a time", n, MaxNotify))
		} else {
			d, err := l.decide(ctx, tc)
			if err != nil {
				return err
			}
			if d.Refused != "" {
				call = refuse(tc, d.Refused)
			} else {
				call = l.call(ctx, tc, resumed)
			}
		}
		call = call.redact(l.secrets)
		if ctx.Err() != nil && call.Outcome != OutcomeRefused && call.Outcome != OutcomeInterrupted {
			// Cut short: whether it took effect is not known, so its result
			// is not kept; a Loop resumed from the state treats it as the
			// call in flight.
			l.cut = &call
			return ctx.Err()
		}
		content, isErr := call.Result, call.Error != ""
		if isErr {
			content = "error: " + call.Error
		}
		l.st.Calls = append(l.st.Calls, call)
		l.st.Messages = append(l.st.Messages, model.Message{Role: model.RoleTool, ToolCallID: tc.ID, ToolName: tc.Name, Content: content, IsError: isErr})
		if tc.Name != NotifyName {
			if err := l.save(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// decide asks the Gate about tc, if it gates its tool and the call could
// run (a call refused anyway asks nobody): the State is saved with the
// call held first, so that a Loop cut short while the Gate asks does not
// take the call for one in flight. A call that may run is no longer held,
// saved so before it runs: cut short from there, it is the call in flight.
func (l *loop) decide(ctx context.Context, tc model.ToolCall) (Decision, error) {
	var d Decision
	if l.gate != nil && tc.Name != NotifyName && l.gate.Gates(tc.Name) {
		_, known := l.reg.Lookup(tc.Name)
		if known && isObject(tc.Arguments) && (l.lim.MaxCalls <= 0 || l.st.Counted < l.lim.MaxCalls) {
			if l.st.Held != tc.ID {
				l.st.Held = tc.ID
				if err := l.save(ctx); err != nil {
					return d, err
				}
			}
			var err error
			if d, err = l.gate.Check(ctx, tc, len(l.st.Calls)); err != nil {
				return d, err
			}
			if d.Wait {
				return d, ErrWaiting
			}
		}
	}
	if l.st.Held != "" {
		l.st.Held = ""
		if d.Refused == "" {
			if err := l.save(ctx); err != nil {
				return d, err
			}
		}
	}
	return d, nil
}

// call makes one call, within the limits. resumed: it may have run in an
// earlier Loop; it runs again only if its tool is Idempotent (a call that
// would run nothing is made as usual).
func (l *loop) call(ctx context.Context, tc model.ToolCall, resumed bool) Call {
	spec, ok := l.reg.Lookup(tc.Name)
	if ok && tc.Name != NotifyName {
		if l.lim.MaxCalls > 0 && l.st.Counted >= l.lim.MaxCalls {
			return refuse(tc, fmt.Sprintf("not run: this run has made its %d tool calls (runner.max_tool_calls), so no more will run; answer with what you have%s",
				l.lim.MaxCalls, notifyHint(l.reg)))
		}
		l.st.Counted++
	}
	if resumed && ok && !spec.Idempotent && isObject(tc.Arguments) {
		return Call{
			ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments, Error: interruptedText, Outcome: OutcomeInterrupted,
			ArgumentsBytes: len(tc.Arguments), ResultBytes: len(interruptedText),
		}
	}
	// The tool gets the secrets too: one that cuts its output to a cap
	// cuts them out first (secret.Cut), or the cut could leave a part of
	// one that the Loop's redaction would not find.
	return l.reg.Call(secret.NewContext(ctx, l.secrets...), tc.ID, tc.Name, tc.Arguments)
}

// interruptedText is what the model reads of a call that was running when
// its run was cut short, and was not made again.
const interruptedText = "outcome unknown: the run was interrupted while this call ran (agentwork stopped or lost the run), " +
	"so it may or may not have taken effect; it was not run again. Check whether it took effect before you call it again"

// resume makes the calls of the state's last reply that have no result,
// and reports whether the state ends with the final reply.
func (l *loop) resume(ctx context.Context) (done bool, err error) {
	msgs := l.st.Messages
	a := len(msgs) - 1
	for a >= 0 && msgs[a].Role != model.RoleAssistant {
		a--
	}
	if a < 0 || msgs[len(msgs)-1].Role == model.RoleUser {
		return false, nil // no reply yet, or a user turn after the last one
	}
	calls := msgs[a].ToolCalls
	if len(calls) == 0 {
		return true, nil
	}
	// Every message after the reply is the result of one of its calls, in
	// order.
	if answered := len(msgs) - 1 - a; answered < len(calls) {
		return false, l.run(ctx, calls[answered:], answered, true)
	}
	return false, nil
}

func (l *loop) save(ctx context.Context) error {
	if !l.saving || l.journal == nil {
		return nil
	}
	if err := l.journal.Save(ctx, l.st); err != nil {
		return fmt.Errorf("tools: save the loop's state: %w", err)
	}
	return nil
}

// result is the Loop's result so far.
func (l *loop) result() Result {
	res := Result{
		Calls: l.st.Calls, Dropped: l.st.Dropped, Usage: l.st.Usage, Model: l.st.Model, StopReason: l.st.StopReason,
		Truncated: l.st.Truncated, Steps: l.st.Steps, Messages: l.st.Messages, st: l.st,
	}
	if l.cut != nil {
		res.Calls = append(slices.Clone(res.Calls), *l.cut)
	}
	for i := len(l.st.Messages) - 1; i >= 0; i-- {
		if m := l.st.Messages[i]; m.Role == model.RoleAssistant {
			res.Text = m.Content
			break
		}
	}
	return res
}

func notifyHint(reg *Registry) string {
	if _, ok := reg.Lookup(NotifyName); ok {
		return " (notify_user still works)"
	}
	return ""
}

// refuse is a call that runs nothing.
func refuse(tc model.ToolCall, why string) Call {
	return Call{
		ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments, Error: why, Outcome: OutcomeRefused,
		ArgumentsBytes: len(tc.Arguments), ResultBytes: len(why),
	}
}

// Call runs the tool called name with args (a JSON object; "" is {}) as
// the loop does, and says how it went: a name the registry does not have,
// or arguments that are not a JSON object, run nothing (OutcomeRefused); a
// handler that panics is an OutcomeError. id is the call's id, if any.
func (r *Registry) Call(ctx context.Context, id, name, args string) (c Call) {
	tc := model.ToolCall{ID: id, Name: name, Arguments: args}
	spec, ok := r.Lookup(tc.Name)
	if !ok {
		have := strings.Join(r.Names(), ", ")
		if have == "" {
			have = "none"
		}
		return refuse(tc, fmt.Sprintf("%q is not a tool of this run (it is unknown, or outside the run's tool scope), so nothing ran; this run's tools: %s", tc.Name, have))
	}
	args, err := object(tc.Arguments)
	if err != nil {
		return refuse(tc, fmt.Sprintf("arguments are not a JSON object (%v); send a JSON object matching the tool's schema", err))
	}
	c = Call{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments, ArgumentsBytes: len(tc.Arguments)}
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			c.Error, c.Outcome = fmt.Sprintf("tool %s failed: %v", tc.Name, r), OutcomeError
		}
		c.DurationMS = float64(time.Since(start).Microseconds()) / 1000
		c.ResultBytes = len(c.Result) + len(c.Error)
	}()
	out, err := spec.Handler(ctx, json.RawMessage(args))
	switch {
	case err == nil:
		c.Result, c.Outcome = out, OutcomeOK
	case errors.Is(err, ErrRefused):
		c.Error, c.Outcome = err.Error(), OutcomeRefused
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		c.Error, c.Outcome = err.Error(), OutcomeTimeout
	default:
		c.Error, c.Outcome = err.Error(), OutcomeError
	}
	return c
}

// object returns args ("" is {}) if they are a JSON object.
func object(args string) (string, error) {
	args = strings.TrimSpace(args)
	if args == "" {
		args = "{}"
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &obj); err != nil {
		return "", err
	}
	if obj == nil {
		return "", errors.New("null")
	}
	return args, nil
}

func isObject(args string) bool {
	_, err := object(args)
	return err == nil
}

// redact returns c with secrets cut out of its result and error, whole
// (before anything cuts them: half a secret matches nothing). Its sizes
// stay those of what the tool returned.
func (c Call) redact(secrets []string) Call {
	if len(secrets) == 0 {
		return c
	}
	if c.Result != "" {
		c.Result = secret.Redact(c.Result, secrets)
	}
	if c.Error != "" {
		c.Error = secret.Redact(c.Error, secrets)
	}
	return c
}

// Record returns c as a run's record keeps it: its arguments, result and
// error with each of secrets cut out (in every form secret.Redact knows),
// then each cut to at most max bytes (secret.Cut: no part of a secret is
// left at the cut), with a note that says how long it was. The sizes stay those of the whole call. max <= 0 keeps them whole.
func (c Call) Record(max int, secrets []string) Call {
	if max <= 0 {
		max = -1
	}
	keep := func(s string) string {
		kept, whole := secret.Cut(s, max, false, secrets)
		if len(kept) == whole {
			return kept
		}
		return kept + fmt.Sprintf("…[cut: %d bytes]", whole)
	}
	c.Arguments, c.Result, c.Error = keep(c.Arguments), keep(c.Result), keep(c.Error)
	return c
}
