package agentwork

// A run's model calls, each as its event lists it: the model, the tokens,
// how long it took, why the reply ended, how many tool calls it asked
// for, or why it failed.

import (
	"context"
	"slices"
	"time"

	"github.com/agentwork/agentwork/model"
)

// ModelCall is one call of a run's model, as its event lists it
// (Result.ModelCalls): one turn of the tool loop. A fallback list that
// passed the call on to another model is one call.
type ModelCall struct {
	// N is the call's number in the run, from 1: where the event leaves
	// calls out (Result.ModelCallsOmitted), the numbers it lists skip them.
	N int `json:"n"`
	// Model is the model that answered, as its server named it; for a
	// call that failed, or a provider that names no model in its replies,
	// the provider's own name (e.g. "openai/gpt-4o", "cheap, then strong").
	Model string      `json:"model,omitempty"`
	Usage model.Usage `json:"usage"`
	// DurationMS is how long the call took, in milliseconds.
	DurationMS float64 `json:"duration_ms"`
	// StopReason is the provider's reason the reply ended ("stop",
	// "tool_calls", "length", ...).
	StopReason string `json:"stop_reason,omitempty"`
	// ToolCalls counts the tool calls the reply asked for, those past what
	// one reply may make included (Result.ToolCallsDropped).
	ToolCalls int `json:"tool_calls,omitempty"`
	// Error says why the call failed, redacted of the runner's secrets and
	// cut to RecordMax bytes.
	Error string `json:"error,omitempty"`
	// Flush: the call was of the run's memory flush.
	Flush bool `json:"flush,omitempty"`
	// Attempt is the try of the run that made it (Result.Attempt).
	Attempt int `json:"attempt,omitempty"`
}

// modelCalls are the model calls of a run as its event lists them: the
// first RecordFirst and the last RecordLast, and a count of those between.
type modelCalls struct {
	List    []ModelCall
	Omitted int
}

// add lists c, the run's latest call, numbered, leaving out the oldest
// after the first RecordFirst when the list is full.
func (m *modelCalls) add(c ModelCall) {
	c.N = len(m.List) + m.Omitted + 1
	m.List = append(m.List, c)
	if len(m.List) > RecordFirst+RecordLast {
		m.List = slices.Delete(m.List, RecordFirst, RecordFirst+1)
		m.Omitted++
	}
}

// recordedModel is the provider of a run's tool loop: each call is listed
// on the run (Run.calls) as it returns, so that the journal's next
// checkpoint keeps it.
type recordedModel struct {
	p   model.Provider
	r   *Runner
	run *Run
}

var _ model.Provider = recordedModel{}

// Complete implements model.Provider.
func (m recordedModel) Complete(ctx context.Context, req model.Request) (model.Reply, error) {
	start := time.Now()
	reply, err := m.p.Complete(ctx, req)
	c := ModelCall{
		Model: reply.Model, Usage: reply.Usage, DurationMS: float64(time.Since(start).Microseconds()) / 1000,
		StopReason: reply.StopReason, ToolCalls: len(reply.ToolCalls), Flush: m.run.flushing, Attempt: m.run.Attempt,
	}
	if err != nil {
		c.Error = cutRecord(m.r.redact(err.Error()))
	}
	if n, ok := m.p.(model.Namer); ok && c.Model == "" {
		c.Model = n.Name()
	}
	m.run.calls.add(c)
	return reply, err
}

// keepModelCalls returns c with run's model calls in its checkpoint, for
// the run's next try to list them too: written by the settle of a try
// that ends without an outcome (a retry, a deferral), so that the failed
// call that ended it is listed as well. A decided checkpoint is left as
// it is: its result lists them.
func keepModelCalls(c claim, run *Run) claim {
	if len(run.calls.List) == 0 {
		return c
	}
	var cp checkpoint
	if c.Checkpoint != nil {
		if c.Checkpoint.Result != nil {
			return c
		}
		cp = *c.Checkpoint
	}
	cp.ModelCalls, cp.ModelCallsOmitted = slices.Clone(run.calls.List), run.calls.Omitted
	c.Checkpoint = &cp
	return c
}
