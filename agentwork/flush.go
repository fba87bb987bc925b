package agentwork

// The memory flush: one more, silent model turn at the end of a run, in
// which the model stores what matters with the memory tools (Station's
// NO_REPLY flush). Nothing of it is delivered.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/memory"
)

// NoReply is what the model is asked to answer a memory flush with once it
// has stored what matters.
const NoReply = "NO_REPLY"

// Flush is a run's memory flush: the silent model turn after its work
// (Config.MemoryFlush).
type Flush struct {
	// Calls are its tool calls, in order.
	Calls []tools.Call
	// Reply is what the model answered (NoReply when it did as asked).
	// It is never delivered.
	Reply string
	// Err says why the flush did not end well (nil: it did). The run is
	// done all the same: its work was.
	Err error
}

// FlushResult is a run's memory flush as its event has it.
type FlushResult struct {
	// ToolCalls counts the flush's calls: the last of the event's
	// tool_calls.
	ToolCalls int `json:"tool_calls"`
	// Reply is the model's answer to the flush, never delivered.
	Reply string `json:"reply,omitempty"`
	// Error says why the flush did not end well; the run is done anyway.
	Error string `json:"error,omitempty"`
}

// flushMark is where a run's work ended in its conversation, once its
// memory flush began: the flush's prompt is Messages[At]. The reply before
// it is the run's, which StopReason and Truncated are of.
type flushMark struct {
	At         int    `json:"at"`
	StopReason string `json:"stop_reason,omitempty"`
	Truncated  bool   `json:"truncated,omitempty"`
}

// flushable reports whether ts offers a memory tool that writes: a flush
// without one could store nothing.
func flushable(ts Toolset) bool {
	for _, n := range []string{memory.AppendName, memory.ReplaceName} {
		if _, ok := ts.reg.Lookup(n); ok {
			return true
		}
	}
	return false
}

// flushPrompt is the user turn of a memory flush, naming the memory tools
// that write which ts offers.
func flushPrompt(ts Toolset) string {
	var how []string
	if _, ok := ts.reg.Lookup(memory.AppendName); ok {
		how = append(how, memory.AppendName+" for what happened or was decided in this run (a short note in today's log)")
	}
	if _, ok := ts.reg.Lookup(memory.ReplaceName); ok {
		how = append(how, memory.ReplaceName+" for a lasting fact (a section of long-term memory; read it first)")
	}
	return "This run is over. Before it ends, store what is worth remembering from it with your memory tools: " +
		strings.Join(how, "; ") + ". Store only what a later run would need and your memory does not hold yet; " +
		"if nothing is, store nothing. This turn is silent: nothing you write in it reaches the user, and " +
		"notify_user sends nothing. When you are done, answer " + NoReply + " and nothing else."
}

// flush runs the memory flush of a run whose work ended: the tool loop
// goes on from st (the run's conversation with the flush's prompt after
// the mark fm), within what is left of lim and the run's deadline (tctx),
// with the run's tools and journal. It returns the run's Output (its
// work's text and calls, the usage of both) with the Flush. A flush that
// fails is logged and on the Output; only a shutdown (ctx) or the loss of
// the run to another instance end the run with an error.
func (r *Runner) flush(ctx, tctx context.Context, run *Run, p model.Provider, req model.Request, ts Toolset, lim tools.Limits, st tools.State, fm *flushMark, j claimJournal, set Settings, timedOut func(error) error) (Output, error) {
	out := Output{StopReason: fm.StopReason, Truncated: fm.Truncated, Usage: st.Usage, Model: st.Model, Dropped: st.Dropped}
	work := 0 // the run's calls: those answered before the flush
	for _, m := range st.Messages[:min(fm.At, len(st.Messages))] {
		switch m.Role {
		case model.RoleAssistant:
			out.Text = m.Content
		case model.RoleTool:
			work++
		}
	}
	work = min(work, len(st.Calls))
	out.Calls = st.Calls[:work:work]
	f := &Flush{}
	out.Flush = f
	// A flush that writes needs two model calls (the one that stores, the
	// NO_REPLY) and one tool call: with less, its write would be refused,
	// or made and then reported as a failure (max_steps).
	switch left := lim.Steps() - st.Steps; {
	case left < 2:
		f.Err = fmt.Errorf("not run: the run left %d of its %d model calls (max_steps) for the flush, which needs 2", max(left, 0), lim.Steps())
	case lim.MaxCalls > 0 && st.Counted >= lim.MaxCalls:
		f.Err = fmt.Errorf("not run: the run made its %d tool calls (runner.max_tool_calls) before the flush, so it could store nothing", lim.MaxCalls)
	}
	if f.Err != nil {
		r.log.Warn("memory flush not run", zap.String("run", run.ID), zap.Error(f.Err))
		return out, nil
	}
	j.flush = fm
	run.flushing = true // its model calls are the flush's
	// notify_user sends nothing from here on: the flush is silent.
	fctx := tools.WithDelivery(tctx, &tools.Delivery{Mode: tools.DeliveryNone})
	// Keep the flush's state before its first model call: a run cut short
	// in it goes on from the flush, its work not done again (a work that
	// called nothing but notify_user kept no state of its own).
	if err := j.Save(fctx, st); err != nil {
		return r.flushFailed(ctx, run, out, j, timedOut, err)
	}
	opts := []tools.LoopOption{tools.From(st), tools.WithJournal(j), tools.WithSecrets(r.secrets...)}
	if len(set.Approval) > 0 {
		// The flush is silent and asks nobody: a gated call is refused.
		opts = append(opts, tools.WithGate(approvalGate{r: r, run: run, scope: set.Approval, flush: true}))
	}
	res, err := tools.Loop(fctx, p, ts.reg, req, lim, opts...)
	out.Usage, out.Dropped = res.Usage, res.Dropped
	if res.Model != "" {
		out.Model = res.Model
	}
	f.Calls = res.Calls[min(work, len(res.Calls)):]
	for _, m := range res.Messages[min(fm.At+1, len(res.Messages)):] {
		if m.Role == model.RoleAssistant {
			f.Reply = m.Content
		}
	}
	if err == nil {
		return out, nil
	}
	return r.flushFailed(ctx, run, out, j, timedOut, err)
}

// flushFailed ends the flush of out that err ended: a shutdown (ctx) or
// the loss of the run to another instance end the run with err (the flush
// goes on from its checkpoint); any other error is the flush's, logged
// and on out.Flush, and the run is done.
func (r *Runner) flushFailed(ctx context.Context, run *Run, out Output, j claimJournal, timedOut func(error) error, err error) (Output, error) {
	if ctx.Err() != nil || (errors.Is(err, errCheckpoint) && j.held.lost()) {
		return out, err
	}
	out.Flush.Err = timedOut(err)
	r.log.Warn("memory flush failed; the run is done all the same", zap.String("run", run.ID), zap.Error(out.Flush.Err))
	return out, nil
}

// flushResult is f as the run's event has it: reply and error redacted of
// the runner's secrets and cut to RecordMax bytes.
func (r *Runner) flushResult(f *Flush) *FlushResult {
	res := &FlushResult{ToolCalls: len(f.Calls), Reply: cutRecord(secret.Redact(f.Reply, r.secrets))}
	if f.Err != nil {
		res.Error = cutRecord(secret.Redact(f.Err.Error(), r.secrets))
	}
	return res
}

// cutRecord cuts s to RecordMax bytes, at a character.
func cutRecord(s string) string {
	if len(s) <= RecordMax {
		return s
	}
	return strings.ToValidUTF8(s[:RecordMax], "") + "…"
}
