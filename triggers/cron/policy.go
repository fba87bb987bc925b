package cron

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/tools"
)

// Policy is how the runner treats cron requests: the job gate (deleted,
// disabled, paused, expired; overlap lease), reply delivery by default,
// and the observer that keeps each job's state, alerts after
// alert_after consecutive failures and pauses after pause_after.
// Register it with runner.Handle("cron", s.Policy()).
func (s *Scheduler) Policy() agentwork.Policy {
	noRunnerAlert := false // the observer alerts per alert_after instead
	return agentwork.Policy{
		Input:    []agentwork.InputGate{&jobGate{s: s}},
		Output:   []agentwork.OutputGate{agentwork.ModeGate{Default: agentwork.DeliverAuto}, &agentwork.DedupGate{KV: s.bus.Dedup, Window: s.cfg.DedupWindow}},
		Targets:  s.cfg.Targets,
		Timeout:  s.cfg.Timeout,
		Alert:    &noRunnerAlert,
		Observer: agentwork.ObserverFunc(s.observe),
	}
}

// jobGate checks a cron request against its job and takes the job's
// overlap lease.
type jobGate struct{ s *Scheduler }

var (
	_ agentwork.InputGate = (*jobGate)(nil)
	_ agentwork.Releaser  = (*jobGate)(nil)
)

// lease is the record lease.cron.<job> in agentwork_locks.
type lease struct {
	Owner     string    `json:"owner"`
	RunID     string    `json:"run_id"`
	RequestID string    `json:"request_id,omitempty"`
	Started   time.Time `json:"started"`
	Expires   time.Time `json:"expires"`
}

func leaseKey(id string) string { return "lease.cron." + id }

// Check implements agentwork.InputGate.
func (g *jobGate) Check(ctx context.Context, run *agentwork.Run) error {
	s := g.s
	req := run.Request
	j, _, err := s.readJob(ctx, req.Name)
	if errors.Is(err, ErrNotFound) {
		return agentwork.Skip(ReasonDeleted, fmt.Sprintf("job %q no longer exists", req.Name))
	}
	if err != nil {
		return err
	}
	if !req.Manual {
		st, err := readState(ctx, s.bus.State, j.ID)
		if err != nil {
			return err
		}
		switch {
		case !j.IsEnabled():
			return agentwork.Skip(agentwork.ReasonDisabled, "the job is disabled")
		case st.Paused:
			return agentwork.Skip(agentwork.ReasonPaused, st.PausedReason)
		case j.ExpiresAt != nil && req.ScheduledAt != nil && req.ScheduledAt.After(*j.ExpiresAt):
			return agentwork.Skip(ReasonExpired, "the job expired at "+j.ExpiresAt.UTC().Format(time.RFC3339))
		}
	}
	if j.Overlap == OverlapAllow {
		return nil
	}
	return g.take(ctx, run, j)
}

func (g *jobGate) take(ctx context.Context, run *agentwork.Run, j Job) error {
	s := g.s
	kv, key := s.bus.Locks, leaseKey(j.ID)
	now := s.clock.Now()
	l := lease{Owner: s.bus.Instance(), RunID: run.ID, RequestID: run.Request.ID, Started: now, Expires: now.Add(s.cfg.Timeout + time.Minute)}
	data, _ := json.Marshal(l)
	for range 5 {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			rev, err := kv.Create(ctx, key, data)
			if isConflict(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("overlap lease: %w", err)
			}
			s.leases.Store(run.ID, rev)
			return nil
		}
		if err != nil {
			return fmt.Errorf("overlap lease: %w", err)
		}
		var held lease
		_ = json.Unmarshal(e.Value(), &held)
		alive := held.RunID != run.ID && now.Before(held.Expires)
		if alive && held.RequestID != "" {
			// The holder's run claim, renewed while it runs, tells sooner
			// than the lease whether its instance crashed.
			alive, _ = agentwork.RunAlive(ctx, s.bus, held.RequestID)
		}
		if alive {
			detail := fmt.Sprintf("run %s of the job (started %s) is still going", held.RunID, held.Started.UTC().Format(time.RFC3339))
			if j.Overlap == OverlapQueue {
				return agentwork.Defer(s.queuePoll, "busy: "+detail)
			}
			return agentwork.Skip(agentwork.ReasonBusy, detail)
		}
		// Ours (a retry of this run) or expired (its holder died): take it over.
		rev, err := kv.Update(ctx, key, data, e.Revision())
		if isConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("overlap lease: %w", err)
		}
		s.leases.Store(run.ID, rev)
		return nil
	}
	return agentwork.Defer(s.queuePoll, "overlap lease contended")
}

// Release implements agentwork.Releaser: it gives the lease back if it is
// still this run's.
func (g *jobGate) Release(ctx context.Context, run *agentwork.Run) {
	rev, ok := g.s.leases.LoadAndDelete(run.ID)
	if !ok {
		return
	}
	if err := g.s.bus.Locks.Delete(ctx, leaseKey(run.Request.Name), jetstream.LastRevision(rev.(uint64))); err != nil {
		g.s.log.Debug("overlap lease not released (taken over?)", zap.String("job", run.Request.Name), zap.Error(err))
	}
}

// gateReasons are skips decided before the model: they neither reset nor
// count toward failures.
var gateReasons = map[string]bool{
	agentwork.ReasonBusy: true, agentwork.ReasonPaused: true, agentwork.ReasonDisabled: true,
	ReasonExpired: true, ReasonDeleted: true, ReasonMissed: true,
}

// observe records a run's outcome in the job's state (on whichever
// instance ran it), schedules a retry, alerts and pauses.
func (s *Scheduler) observe(run *agentwork.Run, outcome string) {
	if run.Request.Source != bus.SourceCron {
		return
	}
	id := run.Request.Name
	log := s.log.With(zap.String("job", id), zap.String("run", run.ID))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	j, _, err := s.readJob(ctx, id)
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			log.Warn("observe run: read job", zap.Error(err))
		}
		return
	}
	var res agentwork.Result
	if run.Result != nil {
		res = *run.Result
	}
	gateSkip := outcome == bus.OutcomeSkip && gateReasons[res.Reason]
	alertAfter, pauseAfter := s.cfg.AlertAfter, s.cfg.PauseAfter
	if j.AlertAfter != 0 {
		alertAfter = j.AlertAfter
	}
	if j.PauseAfter != 0 {
		pauseAfter = j.PauseAfter
	}
	attempt, _ := strconv.Atoi(run.Request.Metadata[metaRetry])
	now := s.clock.Now().UTC()
	var alert, paused bool
	st, err := updateState(ctx, s.bus.State, id, func(st *State) bool {
		alert, paused = false, false
		st.LastRunAt, st.LastRunID, st.LastOutcome = &now, run.ID, outcome
		st.LastReason, st.LastError = res.Reason, res.Error
		if outcome == bus.OutcomeError {
			st.LastReason = res.Class
		}
		if gateSkip {
			return true
		}
		st.Runs++
		if outcome != bus.OutcomeError {
			st.ConsecutiveFailures = 0
			st.Retry = nil
			return true
		}
		st.ConsecutiveFailures++
		alert = alertAfter > 0 && st.ConsecutiveFailures == alertAfter
		if pauseAfter > 0 && st.ConsecutiveFailures >= pauseAfter && !st.Paused {
			st.Paused, st.PausedAt, paused = true, &now, true
			st.PausedReason = fmt.Sprintf("paused after %d consecutive failed runs; last error: %s", st.ConsecutiveFailures, res.Error)
			st.Retry = nil
		}
		if !st.Paused && !run.Request.Manual && run.Request.ScheduledAt != nil && attempt < j.Retry.Attempts {
			backoff := time.Duration(j.Retry.Backoff) << attempt
			st.Retry = &RetryState{Tick: run.Request.ScheduledAt.UTC(), Attempt: attempt + 1, At: now.Add(backoff)}
		}
		return true
	})
	if err != nil {
		log.Warn("observe run: state not updated", zap.Error(err))
		return
	}
	if alert && !paused {
		s.alert(ctx, run, j, fmt.Sprintf("agentwork: cron job %q failed %d time(s) in a row; last error: %s", j.ID, st.ConsecutiveFailures, res.Error), "alert")
	}
	if paused {
		s.alert(ctx, run, j, fmt.Sprintf("agentwork: cron job %q is paused after %d failed runs in a row; last error: %s. Fix it, then: agentwork cron resume %s", j.ID, st.ConsecutiveFailures, res.Error, j.ID), "paused")
		log.Warn("job paused after consecutive failures", zap.Int("failures", st.ConsecutiveFailures))
	}
}

// alert queues an important notification to the run's targets.
func (s *Scheduler) alert(ctx context.Context, run *agentwork.Run, j Job, text, kind string) {
	for _, t := range run.Targets {
		n := connectors.Notification{
			ID: run.ID + ".cron-" + kind + "." + t, RunID: run.ID, RequestID: run.Request.ID,
			Source: bus.SourceCron, Name: j.ID, Text: text, Urgency: tools.UrgencyImportant,
			Target: t, Time: s.clock.Now(), Metadata: run.Request.Metadata,
		}
		if err := connectors.Enqueue(ctx, s.bus, n); err != nil {
			s.log.Error("cron alert not queued", zap.String("job", j.ID), zap.String("target", t), zap.Error(err))
		}
	}
}
