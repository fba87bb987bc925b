package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools"
)

// Policy is how the runner treats heartbeat requests. Register it on every
// instance's runner: runner.Handle(bus.SourceHeartbeat, h.Policy()).
//
// Input gates, in order: enabled (scheduled runs of a disabled heartbeat,
// or of a heartbeat name this runtime does not have, skip "disabled");
// active hours (scheduled runs outside skip "outside-active-hours"; wake
// runs anyway); checklist (skip "empty-checklist" or "no-checklist"); the
// overlap lease (one heartbeat at a time across all instances: skip "busy",
// or wait with overlap: queue). Output gates: notify_user (fail-closed) or
// the HEARTBEAT_OK token, then dedup within dedup_window. A run that fails
// for good alerts the targets. The observer keeps the state (last run,
// consecutive errors) on whichever instance ran it.
func (h *Heartbeat) Policy() agentwork.Policy {
	var out agentwork.OutputGate = agentwork.NotifyGate{}
	if h.cfg.OutputMode == ModeOKToken {
		out = OKTokenGate{}
	}
	return agentwork.Policy{
		Input: []agentwork.InputGate{
			agentwork.InputGateFunc(h.checkEnabled),
			agentwork.InputGateFunc(h.checkActiveHours),
			agentwork.InputGateFunc(h.checkChecklist),
			&leaseGate{h: h},
		},
		Output:   []agentwork.OutputGate{out, &agentwork.DedupGate{KV: h.bus.Dedup, Window: h.cfg.DedupWindow}},
		Targets:  h.cfg.Targets,
		Timeout:  h.cfg.Timeout,
		Observer: agentwork.ObserverFunc(h.observe),
	}
}

func (h *Heartbeat) checkEnabled(_ context.Context, run *agentwork.Run) error {
	if run.Request.Name != h.cfg.Name {
		return agentwork.Skip(agentwork.ReasonDisabled, fmt.Sprintf("no heartbeat named %q is configured (this runtime has %q)", run.Request.Name, h.cfg.Name))
	}
	if !h.cfg.Enabled && !run.Request.Manual {
		return agentwork.Skip(agentwork.ReasonDisabled, "heartbeat.enabled is false")
	}
	return nil
}

func (h *Heartbeat) checkActiveHours(_ context.Context, run *agentwork.Run) error {
	if run.Request.Manual {
		return nil
	}
	now := h.clock.Now()
	if h.hours.Contains(now) {
		return nil
	}
	next := h.hours.Next(now).In(h.hours.Location())
	return agentwork.Skip(agentwork.ReasonOutside, fmt.Sprintf("active hours are %s; next opening %s", h.hours, next.Format("Mon 2006-01-02 15:04 MST")))
}

func (h *Heartbeat) checkChecklist(_ context.Context, run *agentwork.Run) error {
	detail := run.Request.Metadata[metaChecklistDetail]
	switch run.Request.Metadata[metaChecklist] {
	case checklistEmpty:
		return agentwork.Skip(agentwork.ReasonEmptyList, detail)
	case checklistMissing:
		return agentwork.Skip(ReasonNoChecklist, detail)
	}
	return nil
}

// Lease is the record of the running heartbeat in agentwork_locks under
// heartbeat.<name>.lease. A lease past Expires belongs to an instance that
// died; the next run takes it over.
type Lease struct {
	Owner     string    `json:"owner"`
	RunID     string    `json:"run_id"`
	RequestID string    `json:"request_id"`
	Since     time.Time `json:"since"`
	Expires   time.Time `json:"expires"`
}

func (h *Heartbeat) leaseKey() string { return "heartbeat." + h.cfg.Name + ".lease" }

// leaseTTL outlives the longest run the runner allows for a heartbeat.
func (h *Heartbeat) leaseTTL() time.Duration { return h.cfg.Timeout + time.Minute }

// running returns the live lease, if any.
func (h *Heartbeat) running(ctx context.Context) (*Lease, error) {
	e, err := h.bus.Locks.Get(ctx, h.leaseKey())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var l Lease
	if err := json.Unmarshal(e.Value(), &l); err != nil || !h.clock.Now().Before(l.Expires) {
		return nil, nil
	}
	return &l, nil
}

// leaseGate holds the overlap lease for the length of a run.
type leaseGate struct{ h *Heartbeat }

var (
	_ agentwork.InputGate = (*leaseGate)(nil)
	_ agentwork.Releaser  = (*leaseGate)(nil)
)

// Check implements agentwork.InputGate.
func (g *leaseGate) Check(ctx context.Context, run *agentwork.Run) error {
	h := g.h
	kv, key := h.bus.Locks, h.leaseKey()
	for range 5 {
		now := h.clock.Now()
		mine := Lease{Owner: h.bus.Instance(), RunID: run.ID, RequestID: run.Request.ID, Since: now, Expires: now.Add(h.leaseTTL())}
		raw, _ := json.Marshal(mine)
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if _, err := kv.Create(ctx, key, raw); err == nil {
				return nil
			} else if !isConflict(err) {
				return fmt.Errorf("overlap lease: %w", err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("overlap lease: %w", err)
		}
		var held Lease
		if err := json.Unmarshal(e.Value(), &held); err != nil {
			held = Lease{} // unreadable: treat as expired
		}
		if held.RunID != run.ID && now.Before(held.Expires) {
			// A lease outlives a crashed holder by up to Timeout+1m; the
			// holder's run claim, renewed while it runs, tells sooner.
			if alive, _ := agentwork.RunAlive(ctx, h.bus, held.RequestID); alive {
				return g.busy(run, held, now)
			}
		}
		// Expired (its holder died), or ours from an attempt that crashed.
		if _, err := kv.Update(ctx, key, raw, e.Revision()); err == nil {
			if held.RunID != "" && held.RunID != run.ID {
				h.log.Warn("took over the lease of a heartbeat whose instance stopped", zap.String("owner", held.Owner), zap.String("run", held.RunID), zap.Time("expired", held.Expires))
			}
			return nil
		} else if !isConflict(err) {
			return fmt.Errorf("overlap lease: %w", err)
		}
	}
	return agentwork.Skip(agentwork.ReasonBusy, "another heartbeat run took the lease at the same moment")
}

func (g *leaseGate) busy(run *agentwork.Run, held Lease, now time.Time) error {
	h := g.h
	detail := fmt.Sprintf("the heartbeat run %s started %s ago on %s is still going", held.RunID, now.Sub(held.Since).Round(time.Second), held.Owner)
	if h.cfg.Overlap != OverlapQueue {
		return agentwork.Skip(agentwork.ReasonBusy, detail)
	}
	// Queue: wait, unless a newer tick has overtaken this one.
	if at := run.Request.ScheduledAt; at != nil && !run.Request.Manual && !now.Before(at.Add(h.cfg.Every)) {
		return agentwork.Skip(agentwork.ReasonBusy, detail+"; a newer heartbeat tick has replaced this one")
	}
	return agentwork.Defer(h.queuePoll, agentwork.ReasonBusy)
}

// Release implements agentwork.Releaser: it frees the lease if this run
// still holds it.
func (g *leaseGate) Release(ctx context.Context, run *agentwork.Run) {
	h := g.h
	e, err := h.bus.Locks.Get(ctx, h.leaseKey())
	if err != nil {
		return
	}
	var held Lease
	if json.Unmarshal(e.Value(), &held) != nil || held.RunID != run.ID {
		return
	}
	if err := h.bus.Locks.Delete(ctx, h.leaseKey(), jetstream.LastRevision(e.Revision())); err != nil {
		h.log.Warn("overlap lease not released; it expires on its own", zap.String("run", run.ID), zap.Error(err))
	}
}

// OKTokenGate is the output gate of ok_token mode, for models without tool
// calling. After trimming white space, punctuation and markup characters
// from both ends, a reply that starts or ends with HEARTBEAT_OK (as a whole
// word) is an ack: skip "ack". A token elsewhere does not count: the reply
// is delivered as it is. A blank reply skips "empty". If the model did call
// notify_user, that call wins, as in notify mode.
type OKTokenGate struct{}

var _ agentwork.OutputGate = OKTokenGate{}

// Inspect implements agentwork.OutputGate.
func (OKTokenGate) Inspect(ctx context.Context, run *agentwork.Run, out agentwork.Output) error {
	for _, c := range out.Calls {
		if c.Name == tools.NotifyName {
			return agentwork.NotifyGate{}.Inspect(ctx, run, out)
		}
	}
	run.Notice = nil
	text := strings.TrimSpace(out.Text)
	if trimEdges(text) == "" {
		return agentwork.Skip(agentwork.ReasonEmpty, "the model's reply is blank")
	}
	if IsOK(text) {
		return agentwork.Skip(agentwork.ReasonAck, "")
	}
	run.Notice = &agentwork.Notice{Text: text, Urgency: tools.UrgencyInfo}
	return nil
}

// IsOK reports whether reply is a HEARTBEAT_OK ack: after trimming white
// space, punctuation and symbols (such as ** or `) from both ends, it starts
// or ends with the token as a whole word.
func IsOK(reply string) bool {
	t := trimEdges(reply)
	if rest, ok := strings.CutPrefix(t, OKToken); ok && (rest == "" || !wordRune(firstRune(rest))) {
		return true
	}
	if rest, ok := strings.CutSuffix(t, OKToken); ok && (rest == "" || !wordRune(lastRune(rest))) {
		return true
	}
	return false
}

func trimEdges(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsPunct(r) || unicode.IsSymbol(r)
	})
}

func wordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

func firstRune(s string) rune {
	for _, r := range s {
		return r
	}
	return 0
}

func lastRune(s string) rune {
	r := []rune(s)
	return r[len(r)-1]
}

// observe keeps the state of the last run. It runs on the instance that ran
// the heartbeat, after the run's event was emitted.
func (h *Heartbeat) observe(run *agentwork.Run, outcome string) {
	if run.Request.Name != h.cfg.Name || run.Result == nil {
		return
	}
	res := run.Result
	lr := &LastRun{
		RunID: run.ID, RequestID: run.Request.ID, Ended: h.clock.Now().UTC(), Outcome: outcome,
		Manual: run.Request.Manual, ScheduledAt: run.Request.ScheduledAt,
	}
	switch outcome {
	case bus.OutcomeSkip:
		lr.Reason, lr.Detail = res.Reason, res.Detail
	case bus.OutcomeError:
		lr.Reason, lr.Detail = res.Class, res.Error
	case bus.OutcomeDone:
		lr.Text = res.Text
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := h.updateState(ctx, func(st *State) bool {
		st.LastRun = lr
		switch {
		case outcome == bus.OutcomeError:
			st.ConsecutiveErrors++
		case outcome == bus.OutcomeDone, modelAnswered(res.Reason):
			st.ConsecutiveErrors = 0
		}
		return true
	})
	if err != nil {
		h.log.Warn("heartbeat state not updated", zap.String("run", run.ID), zap.Error(err))
	}
	if outcome == bus.OutcomeError {
		h.log.Warn("heartbeat failed", zap.String("run", run.ID), zap.String("class", res.Class), zap.String("error", res.Error))
	}
}

// modelAnswered reports a skip reason given after the model answered.
func modelAnswered(reason string) bool {
	switch reason {
	case agentwork.ReasonAck, agentwork.ReasonEmpty, agentwork.ReasonDuplicate:
		return true
	}
	return false
}
