package heartbeat

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/triggers/budget"
)

// Policy is how the runner treats heartbeat requests. Register it on every
// instance's runner: runner.Handle(bus.SourceHeartbeat, h.Policy()).
//
// Input gates, in order: enabled (scheduled runs of a disabled heartbeat,
// or of a heartbeat name this runtime does not have, skip "disabled");
// paused (a scheduled run published before the pause skips "paused"; the
// fires of a paused heartbeat publish nothing); active hours (scheduled runs outside skip "outside-active-hours"; wake
// runs anyway); checklist (skip "empty-checklist" or "no-checklist"). Then
// the runner's overlap lease: one heartbeat at a time across all instances
// (skip "busy", or wait with overlap: queue unless a newer tick is due).
// Output gates: notify_user (fail-closed) or
// the HEARTBEAT_OK token, then dedup within dedup_window. Tools, model,
// fallback and max_steps: heartbeat's, else the runner's. A run that fails
// for good alerts the targets. The observer keeps the state (last run,
// consecutive errors, the day's tokens) on whichever instance ran it, and
// pauses the heartbeat at its budget with one alert.
func (h *Heartbeat) Policy() agentwork.Policy {
	var out agentwork.OutputGate = agentwork.NotifyGate{}
	if h.cfg.OutputMode == ModeOKToken {
		out = OKTokenGate{}
	}
	return agentwork.Policy{
		Input: []agentwork.InputGate{
			agentwork.InputGateFunc(h.checkEnabled),
			agentwork.InputGateFunc(h.checkPaused),
			agentwork.InputGateFunc(h.checkActiveHours),
			agentwork.InputGateFunc(h.checkChecklist),
		},
		Overlap: agentwork.Overlap{
			Mode: h.cfg.Overlap,
			Poll: h.queuePoll,
			// A queued tick is dropped once the next one is due: there is
			// no point running two old heartbeats back to back.
			Superseded: func(run *agentwork.Run, now time.Time) bool {
				at := run.Request.ScheduledAt
				return at != nil && !run.Request.Manual && !now.Before(at.Add(h.cfg.Every))
			},
		},
		Output:      []agentwork.OutputGate{out, &agentwork.DedupGate{KV: h.bus.Dedup, Window: h.cfg.DedupWindow}},
		Targets:     h.cfg.Targets,
		Tools:       h.cfg.Tools,
		Approval:    h.cfg.Approval,
		Memory:      h.cfg.Memory,
		MemoryFlush: h.cfg.MemoryFlush,
		Timeout:     h.cfg.Timeout,
		MaxSteps:    h.cfg.MaxSteps,
		Model:       h.cfg.Model,
		Fallback:    h.cfg.Fallback,
		Observer:    agentwork.ObserverFunc(h.observe),
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

func (h *Heartbeat) checkPaused(ctx context.Context, run *agentwork.Run) error {
	if run.Request.Manual {
		return nil
	}
	st, _, err := h.loadState(ctx)
	if err != nil {
		return err
	}
	if st.pausedAt(h.clock.Now()) {
		return agentwork.Skip(agentwork.ReasonPaused, st.PausedReason)
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

// Lease is the running heartbeat, as status shows it: the overlap lease
// the runner holds for it in agentwork_locks (agentwork.OverlapKey).
type Lease struct {
	Owner     string    `json:"owner"`
	RunID     string    `json:"run_id"`
	RequestID string    `json:"request_id"`
	Since     time.Time `json:"since"`
	Expires   time.Time `json:"expires"`
}

// running returns the lease of the running heartbeat, if one runs.
func (h *Heartbeat) running(ctx context.Context) (*Lease, error) {
	l, err := agentwork.Running(ctx, h.bus, agentwork.OverlapKey(bus.SourceHeartbeat, h.cfg.Name))
	if err != nil || l == nil {
		return nil, err
	}
	return &Lease{Owner: l.Owner, RunID: l.RunID, RequestID: l.RequestID, Since: l.Since, Expires: l.Expires}, nil
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
	run.Notice = &agentwork.Notice{Text: text, Urgency: tools.UrgencyInfo, Truncated: out.Truncated}
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

// observe keeps the state of the last run and counts its tokens into the
// day's (once per run id). It runs on the instance that ran the heartbeat,
// after the run's event was emitted. When the next run would pass the
// budget it pauses the heartbeat until the next midnight and alerts the
// run's targets once.
func (h *Heartbeat) observe(run *agentwork.Run, outcome string) {
	if run.Request.Name != h.cfg.Name || run.Result == nil {
		return
	}
	res := run.Result
	now := h.clock.Now().UTC()
	lr := &LastRun{
		RunID: run.ID, RequestID: run.Request.ID, Ended: now, Outcome: outcome,
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
	var paused *State
	err := h.updateState(ctx, func(st *State) bool {
		paused = nil
		if res.Usage != nil && (st.LastRun == nil || st.LastRun.RunID != run.ID) {
			var p *budget.Pause
			st.Spent, p = budget.Spend(st.Spent, h.cfg.Budget, res.Usage.InputTokens+res.Usage.OutputTokens, now, h.hours.Location())
			if p != nil && !st.pausedAt(now) {
				st.Paused, st.PausedAt, st.PausedUntil, st.PausedReason = true, &now, &p.Until, p.Reason
				paused = st
			}
		}
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
		return
	}
	if outcome == bus.OutcomeError {
		h.log.Warn("heartbeat failed", zap.String("run", run.ID), zap.String("class", res.Class), zap.String("error", res.Error))
	}
	if paused != nil {
		text := fmt.Sprintf("agentwork: heartbeat %q %s. To let it run again today: %s", h.cfg.Name, paused.PausedReason, ResumeCommand(h.cfg.Name))
		if err := agentwork.Alert(ctx, h.bus, run, ".heartbeat-budget", text, now); err != nil {
			h.log.Error("heartbeat budget alert not queued", zap.String("run", run.ID), zap.Error(err))
		}
		h.log.Warn("heartbeat paused: its daily token budget would be passed", zap.Int64("tokens_today", paused.Spent.Tokens), zap.Int64("budget", h.cfg.Budget.DailyTokens))
	}
}

// ResumeCommand is the command that resumes the heartbeat name.
func ResumeCommand(name string) string {
	if name == "" || name == DefaultName {
		return "agentwork heartbeat resume"
	}
	return "agentwork heartbeat resume --name " + name
}

// modelAnswered reports a skip reason given after the model answered.
func modelAnswered(reason string) bool {
	switch reason {
	case agentwork.ReasonAck, agentwork.ReasonEmpty, agentwork.ReasonDuplicate:
		return true
	}
	return false
}
