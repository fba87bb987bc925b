package agentwork_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/model"
)

// turn is one scripted model call: its reply, or err.
type turn struct {
	reply model.Reply
	err   error
}

// modelCallsProvider answers its n-th call with turns[n] (the last turn
// once they are spent), whichever try of the run makes it.
func modelCallsProvider(turns ...turn) model.Provider {
	var calls atomic.Int64
	return model.ProviderFunc(func(context.Context, model.Request) (model.Reply, error) {
		t := turns[min(int(calls.Add(1))-1, len(turns)-1)]
		return t.reply, t.err
	})
}

func nope(n int) []model.ToolCall {
	calls := make([]model.ToolCall, n)
	for i := range calls {
		calls[i] = model.ToolCall{Name: "nope", Arguments: `{}`}
	}
	return calls
}

// modelCallList is a run's model calls as "model in/out tool_calls
// stop_reason error" lines, for comparison.
func modelCallList(r agentwork.Result) string {
	var out []string
	for _, c := range r.ModelCalls {
		out = append(out, fmt.Sprintf("%d %s %d/%d %d %q %q a%d", c.N, c.Model, c.Usage.InputTokens, c.Usage.OutputTokens, c.ToolCalls, c.StopReason, c.Error, c.Attempt))
	}
	return strings.Join(out, "\n")
}

// A run's event lists each model call in order: the model that answered,
// its tokens, how long it took, why it stopped, how many tool calls it
// asked for; a call that failed with its error, cut of the runner's
// secrets; and, across a retry that went on from the run's checkpoint,
// the calls of the try before.
func TestRunListsItsModelCalls(t *testing.T) {
	t.Parallel()
	const key = "sk-modelcalls-secret-0123456789"
	tests := []struct {
		name    string
		turns   []turn
		outcome string
		want    string
	}{
		{
			name: "two tool-calling turns and a final reply",
			turns: []turn{
				{reply: model.Reply{Model: "m-1", Usage: model.Usage{InputTokens: 10, OutputTokens: 2}, StopReason: "tool_calls", ToolCalls: nope(2)}},
				{reply: model.Reply{Model: "m-2", Usage: model.Usage{InputTokens: 20, OutputTokens: 3}, StopReason: "tool_calls", ToolCalls: nope(1)}},
				{reply: model.Reply{Model: "m-2", Usage: model.Usage{InputTokens: 30, OutputTokens: 4}, StopReason: "stop", Text: "done"}},
			},
			outcome: bus.OutcomeDone,
			want: `1 m-1 10/2 2 "tool_calls" "" a1
2 m-2 20/3 1 "tool_calls" "" a1
3 m-2 30/4 0 "stop" "" a1`,
		},
		{
			name: "a turn that fails",
			turns: []turn{
				{reply: model.Reply{Model: "m-1", Usage: model.Usage{InputTokens: 10, OutputTokens: 2}, StopReason: "tool_calls", ToolCalls: nope(1)}},
				{err: &model.Error{Class: model.ClassPermanent, Status: 401, Message: "key " + key + " <script>x</script> refused"}},
			},
			outcome: bus.OutcomeError,
			want: `1 m-1 10/2 1 "tool_calls" "" a1
2  0/0 0 "" "model: key [redacted] <script>x</script> refused" a1`,
		},
		{
			name: "a retry goes on from the checkpoint and lists the calls of the try before",
			turns: []turn{
				{reply: model.Reply{Model: "m-1", Usage: model.Usage{InputTokens: 10, OutputTokens: 2}, StopReason: "tool_calls", ToolCalls: nope(1)}},
				{err: &model.Error{Class: model.ClassTransient, Status: 503, Message: "overloaded"}},
				{reply: model.Reply{Model: "m-1", Usage: model.Usage{InputTokens: 30, OutputTokens: 4}, StopReason: "stop", Text: "done"}},
			},
			outcome: bus.OutcomeDone,
			want: `1 m-1 10/2 1 "tool_calls" "" a1
2  0/0 0 "" "model: overloaded" a1
3 m-1 30/4 0 "stop" "" a2`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watchEvents(t, b)
			stop := startRunner(t, b, modelCallsProvider(tt.turns...), testConfig(), taskPolicy(), agentwork.WithSecrets(key))
			publish(t, b, agentwork.Request{Source: "task", Name: "calls", Prompt: "go", Deliver: agentwork.DeliverNone})
			r := events.runEvents(1)[0].Run
			stop()
			if r.Outcome != tt.outcome {
				t.Fatalf("outcome %s (%s), want %s", r.Outcome, r.Error, tt.outcome)
			}
			if got := modelCallList(r); got != tt.want {
				t.Errorf("model calls:\n%s\nwant:\n%s", got, tt.want)
			}
			var sum model.Usage
			for _, c := range r.ModelCalls {
				sum = sum.Add(c.Usage)
				if c.DurationMS < 0 || c.Flush {
					t.Errorf("model call %+v: want a duration >= 0, not a flush", c)
				}
			}
			if r.Usage == nil || *r.Usage != sum || r.ModelCallsOmitted != 0 {
				t.Errorf("usage %+v, omitted %d; want the sum of the calls' %+v, none omitted", r.Usage, r.ModelCallsOmitted, sum)
			}
		})
	}
}

// A run of many model calls lists the first RecordFirst and the last
// RecordLast of them and counts those between.
func TestRunListsItsFirstAndLastModelCalls(t *testing.T) {
	t.Parallel()
	const steps = agentwork.RecordFirst + agentwork.RecordLast + 30
	var calls atomic.Int64
	p := model.ProviderFunc(func(context.Context, model.Request) (model.Reply, error) {
		n := int(calls.Add(1))
		if n == steps {
			return model.Reply{Model: fmt.Sprint("m-", n), Text: "done", Usage: model.Usage{InputTokens: 1}}, nil
		}
		return model.Reply{Model: fmt.Sprint("m-", n), ToolCalls: nope(1), Usage: model.Usage{InputTokens: 1}}, nil
	})
	b := bustest.New(t)
	events := watchEvents(t, b)
	cfg := testConfig()
	cfg.MaxSteps = steps
	stop := startRunner(t, b, p, cfg, taskPolicy())
	publish(t, b, agentwork.Request{Source: "task", Name: "many", Prompt: "go", Deliver: agentwork.DeliverNone})
	r := events.runEvents(1)[0].Run
	stop()
	if r.Outcome != bus.OutcomeDone {
		t.Fatalf("outcome %s (%s), want done", r.Outcome, r.Error)
	}
	listed := len(r.ModelCalls)
	if listed != agentwork.RecordFirst+agentwork.RecordLast || r.ModelCallsOmitted != steps-listed || r.Usage.InputTokens != steps {
		t.Fatalf("%d model calls listed, %d omitted, usage %+v; want %d, %d, %d input tokens",
			listed, r.ModelCallsOmitted, r.Usage, agentwork.RecordFirst+agentwork.RecordLast, steps-listed, steps)
	}
	first, lastOfFirst, firstOfLast, last := r.ModelCalls[0], r.ModelCalls[agentwork.RecordFirst-1], r.ModelCalls[agentwork.RecordFirst], r.ModelCalls[listed-1]
	for _, c := range []agentwork.ModelCall{first, lastOfFirst, firstOfLast, last} {
		if c.Model != fmt.Sprint("m-", c.N) {
			t.Errorf("call %d is of model %s, want m-%d: numbered in the run", c.N, c.Model, c.N)
		}
	}
	if first.N != 1 || lastOfFirst.N != agentwork.RecordFirst || firstOfLast.N != steps-agentwork.RecordLast+1 || last.N != steps || last.ToolCalls != 0 {
		t.Errorf("listed %d, %d, %d … %d; want the first %d and the last %d", first.N, lastOfFirst.N, firstOfLast.N, last.N,
			agentwork.RecordFirst, agentwork.RecordLast)
	}
}
