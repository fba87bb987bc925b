package agentwork

// A run's outcome: its result, the skip, failure and alert it may end
// in, and its one event.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

func (r *Runner) result(run *Run, outcome string) *Result {
	res := &Result{
		Source: run.Request.Source, Name: run.Request.Name, Outcome: outcome,
		Attempt: run.Attempt, DurationMS: r.now().Sub(run.Started).Milliseconds(),
		ScheduledAt: run.Request.ScheduledAt, Manual: run.Request.Manual, Metadata: run.Request.Metadata,
	}
	// Every outcome after a model call says what it cost and what its
	// tools did, so skipped heartbeats and failed runs count in the token
	// and tool metrics too.
	if out := run.Output; out != nil && (out.Model != "" || out.Usage != (model.Usage{})) {
		res.Model = out.Model
		usage := out.Usage
		res.Usage = &usage
	}
	if out := run.Output; out != nil {
		calls := out.Calls
		if f := out.Flush; f != nil {
			calls = append(calls[:len(calls):len(calls)], f.Calls...)
			res.Flush = r.flushResult(f)
		}
		if len(calls) > 0 || out.Dropped > 0 {
			r.recordCalls(run, res, calls, out.Dropped)
		}
	}
	res.Approvals = slices.Clone(run.approvals)
	res.ModelCalls, res.ModelCallsOmitted = slices.Clone(run.calls.List), run.calls.Omitted
	return res
}

func (r *Runner) skip(ctx context.Context, run *Run, s *SkipError) {
	res := r.result(run, bus.OutcomeSkip)
	res.Reason, res.Detail = s.Reason, s.Detail
	r.emit(ctx, run, res)
}

func (r *Runner) fail(ctx context.Context, run *Run, class model.Class, err error) string {
	res := r.result(run, bus.OutcomeError)
	res.Class, res.Error = string(class), err.Error()
	r.emit(ctx, run, res)
	return bus.OutcomeError
}

func (r *Runner) failWithAlert(ctx context.Context, run *Run, pol Policy, class model.Class, err error) string {
	out := r.fail(ctx, run, class, err)
	if (pol.Alert == nil || *pol.Alert) && r.firstAlert(ctx, run, class) {
		text := fmt.Sprintf("agentwork: %s %q failed (%s) after %d attempt(s): %v", run.Request.Source, run.Request.Name, class, run.Attempt, err)
		if _, qerr := r.enqueue(ctx, run, text, tools.UrgencyImportant, ".alert"); qerr != nil {
			r.log.Error("alert not queued", zap.String("run", run.ID), zap.Error(qerr))
		}
	}
	return out
}

// storeFull reports whether err is a write refused for lack of space, and
// tells the bus (which reports the state once).
func (r *Runner) storeFull(err error) bool {
	if !bus.IsStoreFull(err) {
		return false
	}
	r.bus.NoteWrite(err)
	return true
}

// busUnreachable reports whether err is a NATS connectivity error: the
// server did not answer (as opposed to answering with an error, which may
// be lasting, like a deleted stream).
func busUnreachable(err error) bool {
	for _, target := range []error{
		nats.ErrTimeout, nats.ErrConnectionClosed, nats.ErrDisconnected, nats.ErrNoResponders,
		nats.ErrConnectionDraining, nats.ErrConnectionReconnecting,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// firstAlert reports whether this failure should alert: the first failure
// of a source/name with a class within AlertWindow does, later ones do not
// (a heartbeat with an expired API key would otherwise alert every tick).
// The key is shared by all instances through agentwork_dedup.
func (r *Runner) firstAlert(ctx context.Context, run *Run, class model.Class) bool {
	if r.cfg.AlertWindow < 0 {
		return true
	}
	key := "alert." + DedupKey(run.Request.Source, run.Request.Name+"\x00"+string(class))
	_, err := r.bus.Dedup.Create(context.WithoutCancel(ctx), key, []byte(run.ID), jetstream.KeyTTL(r.cfg.AlertWindow))
	if errors.Is(err, jetstream.ErrKeyExists) {
		if e, gerr := r.bus.Dedup.Get(context.WithoutCancel(ctx), key); gerr == nil && string(e.Value()) == run.ID {
			return true // ours, from an attempt that crashed before queueing it
		}
		r.log.Info("alert held back: already alerted within the alert window", zap.String("run", run.ID), zap.Duration("alert_window", r.cfg.AlertWindow))
		return false
	}
	return true // on a bus error, alert rather than stay silent
}

// emit publishes the run's one event. Publishing is retried briefly; a
// failure is logged and never ends the run.
func (r *Runner) emit(ctx context.Context, run *Run, res *Result) {
	// The texts of every event, cut of the secrets here, where each
	// passes (the tool calls and the flush are, as they are recorded).
	res.Text, res.Reply, res.Error, res.Detail = r.redact(res.Text), r.redact(res.Reply), r.redact(res.Error), r.redact(res.Detail)
	// Then, cut to fit the bus's max payload: an event too large could
	// never be published, nor the claim that keeps it.
	data, err := json.Marshal(res)
	if limit := r.eventMax(); err == nil && len(data) > limit {
		r.fit(run, res, limit)
		data, err = json.Marshal(res)
	}
	run.Result = res
	run.emitErr = nil
	var ev bus.Event
	if err == nil {
		ev, err = bus.NewEvent("agentwork/runner", bus.TypeOf(res.Source, res.Outcome), res.Name, r.now(), json.RawMessage(data))
	}
	if err != nil {
		r.log.Error("build event", zap.Error(err))
		return
	}
	// The run's event has the run's id, which is also its Nats-Msg-Id: a run
	// taken over after a crash emits again with the same id and is stored once.
	ev.ID, ev.RunID, ev.CausationID = run.ID, run.ID, run.Request.ID
	if run.release != nil {
		run.release()
	}
	subject := r.bus.Subjects.Event(res.Source, res.Outcome)
	ectx := context.WithoutCancel(ctx)
	for attempt := range 3 {
		pctx, cancel := context.WithTimeout(ectx, 5*time.Second)
		_, err = r.bus.Publish(pctx, subject, ev, "")
		cancel()
		if err == nil {
			return
		}
		time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
	}
	run.emitErr = err
	r.log.Error("event not published", zap.String("run", run.ID), zap.String("subject", subject), zap.Error(err))
}
