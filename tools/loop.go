package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

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
	// Calls are all tool calls the model made, in order, with their outcome.
	Calls []Call
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
	// beyond is refused, and the model is told so. <= 0: no bound.
	MaxCalls int
}

// Loop calls p with req, runs every tool call in each reply through reg and
// feeds the results back, until a reply has no tool calls or
// lim.MaxSteps model calls were made (ErrMaxSteps; the result so far is
// returned with it). reg holds the tools the run may use, and req.Tools
// should describe the same: a call to a name reg does not have runs
// nothing. Every failed call (a name reg does not have, arguments that are
// not a JSON object, a call past lim.MaxCalls, a handler error) goes back
// to the model as a tool result marked as an error; only provider errors
// and ctx end the loop early.
func Loop(ctx context.Context, p model.Provider, reg *Registry, req model.Request, lim Limits) (Result, error) {
	maxSteps := lim.MaxSteps
	if maxSteps <= 0 {
		maxSteps = 8
	}
	var res Result
	calls := 0 // of tools other than notify_user
	msgs := append([]model.Message(nil), req.Messages...)
	for res.Steps < maxSteps {
		req.Messages = msgs
		reply, err := p.Complete(ctx, req)
		res.Steps++
		if err != nil {
			res.Messages = msgs
			return res, err
		}
		res.Usage = res.Usage.Add(reply.Usage)
		if reply.Model != "" {
			res.Model = reply.Model
		}
		res.Text, res.StopReason, res.Truncated = reply.Text, reply.StopReason, reply.Truncated
		// Give every call an id before it enters the history: the tool result
		// must answer the same id the assistant turn carries.
		for i := range reply.ToolCalls {
			if reply.ToolCalls[i].ID == "" {
				reply.ToolCalls[i].ID = fmt.Sprintf("call_%d_%d", res.Steps, i)
			}
		}
		msgs = append(msgs, model.Message{Role: model.RoleAssistant, Content: reply.Text, ToolCalls: reply.ToolCalls})
		if len(reply.ToolCalls) == 0 {
			res.Messages = msgs
			return res, nil
		}
		for _, tc := range reply.ToolCalls {
			var call Call
			if _, ok := reg.Lookup(tc.Name); ok && tc.Name != NotifyName && lim.MaxCalls > 0 && calls >= lim.MaxCalls {
				call = refuse(tc, fmt.Sprintf("not run: this run has made its %d tool calls (runner.max_tool_calls), so no more will run; answer with what you have%s",
					lim.MaxCalls, notifyHint(reg)))
			} else {
				if ok && tc.Name != NotifyName {
					calls++
				}
				call = reg.Call(ctx, tc.ID, tc.Name, tc.Arguments)
			}
			res.Calls = append(res.Calls, call)
			content, isErr := call.Result, call.Error != ""
			if isErr {
				content = "error: " + call.Error
			}
			msgs = append(msgs, model.Message{Role: model.RoleTool, ToolCallID: tc.ID, ToolName: tc.Name, Content: content, IsError: isErr})
		}
		if err := ctx.Err(); err != nil {
			res.Messages = msgs
			return res, err
		}
	}
	res.Messages = msgs
	return res, ErrMaxSteps
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
	args = strings.TrimSpace(tc.Arguments)
	if args == "" {
		args = "{}"
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &obj); err != nil || obj == nil {
		return refuse(tc, fmt.Sprintf("arguments are not a JSON object (%v); send a JSON object matching the tool's schema", errOr(err, "null")))
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

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// Record returns c as a run's record keeps it: its arguments, result and
// error with each of secrets cut out (in every form secret.Redact knows),
// then each cut to at most max bytes, with a note that says how long it
// was. The sizes stay those of the whole call. max <= 0 keeps them whole.
func (c Call) Record(max int, secrets []string) Call {
	keep := func(s string) string {
		s = secret.Redact(s, secrets)
		if max <= 0 || len(s) <= max {
			return s
		}
		n := max
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		return s[:n] + fmt.Sprintf("…[cut: %d bytes]", len(s))
	}
	c.Arguments, c.Result, c.Error = keep(c.Arguments), keep(c.Result), keep(c.Error)
	return c
}
