package cron

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/triggers/budget"
)

// Policy is how the runner treats cron requests: the job gate (deleted,
// disabled, paused, expired; the job's overlap mode, which the runner's
// overlap lease applies), the job's tools, model, fallback, max_steps and
// timeout (else the runner's), reply
// delivery by default, and the observer that
// keeps each job's state, alerts after alert_after consecutive failures
// and pauses after pause_after.
// Register it with runner.Handle("cron", s.Policy()).
func (s *Scheduler) Policy() agentwork.Policy {
	noRunnerAlert := false // the observer alerts per alert_after instead
	return agentwork.Policy{
		Input:       []agentwork.InputGate{&jobGate{s: s}},
		Overlap:     agentwork.Overlap{Mode: agentwork.OverlapSkip, Poll: s.queuePoll},
		Output:      []agentwork.OutputGate{agentwork.ModeGate{Default: agentwork.DeliverAuto}, &agentwork.DedupGate{KV: s.bus.Dedup, Window: s.cfg.DedupWindow}},
		Targets:     s.cfg.Targets,
		SettingsFor: s.settingsOf,
		Timeout:     s.cfg.Timeout,
		Alert:       &noRunnerAlert,
		Observer:    agentwork.ObserverFunc(s.observe),
	}
}

// settingsOf returns the settings of job id as it is now. A job that no
// longer exists (deleted after the job gate let its run in) has none: an
// error, never the runner's settings, which would give a deleted agent
// job's prompt the runner's tools; the run is tried again and the job
// gate skips it as deleted.
func (s *Scheduler) settingsOf(ctx context.Context, _, id string) (agentwork.Settings, error) {
	j, _, err := s.readJob(ctx, id)
	if err != nil {
		return agentwork.Settings{}, err
	}
	approval := slices.Clone(j.Approval)
	if j.Creator != nil {
		// The gates of the run that created it: a job can add gates,
		// never lose those its creator had.
		for _, g := range j.Creator.Approval {
			if !slices.Contains(approval, g) {
				approval = append(approval, g)
			}
		}
	}
	set := agentwork.Settings{Tools: j.Tools, Approval: approval, MaxSteps: j.MaxSteps, Timeout: time.Duration(j.Timeout), Model: j.Model, Fallback: j.Fallback, Memory: j.Memory, MemoryFlush: j.MemoryFlush}
	if len(j.Tools) == 0 && j.Origin == OriginAgent {
		// The allow-list of agent-created jobs, as the config says now.
		set.Tools = s.cfg.Agent.Tools
	}
	return set, nil
}

// MetaName is the metadata key under which a cron run's request, and so
// its event, history record and notifications, carry the job's name
// (when it has one besides its id): an agent job's id (agent-…) says
// nothing to a reader.
const MetaName = "cron_job_name"

// jobGate checks a cron request against its job and sets the run's
// overlap mode to the job's (queue for the ticks of a catch-up, which would
// otherwise skip each other).
type jobGate struct{ s *Scheduler }

// elsewhereDefer is how long a run of a job another instance's config
// defines waits before it is handed out again.
const elsewhereDefer = time.Second

var _ agentwork.InputGate = (*jobGate)(nil)

// Check implements agentwork.InputGate.
func (g *jobGate) Check(ctx context.Context, run *agentwork.Run) error {
	s := g.s
	req := run.Request
	j, _, err := s.readJob(ctx, req.Name)
	if errors.Is(err, ErrNotFound) {
		if err := s.elsewhere(ctx, req.Name); errors.Is(err, errDefinedElsewhere) {
			// A rolling config change: an instance whose config defines
			// the job runs it.
			return agentwork.Defer(elsewhereDefer, err.Error())
		} else if err != nil {
			return err
		}
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
		case st.pausedAt(s.clock.Now()):
			return agentwork.Skip(agentwork.ReasonPaused, st.PausedReason)
		case j.ExpiresAt != nil && req.ScheduledAt != nil && req.ScheduledAt.After(*j.ExpiresAt):
			return agentwork.Skip(ReasonExpired, "the job expired at "+j.ExpiresAt.UTC().Format(time.RFC3339))
		}
	}
	if j.Name != "" && j.Name != j.ID && req.Metadata[MetaName] != j.Name {
		// The name as the job has it now: the run's event, history record
		// and notifications say which job it was, also once it is deleted.
		md := maps.Clone(req.Metadata)
		if md == nil {
			md = map[string]string{}
		}
		md[MetaName] = j.Name
		run.Request.Metadata = md
	}
	if c := j.Creator; c != nil && c.Credential != "" && s.grants != nil && credentialed(j.Origin) {
		// Its targets were within the credential's grant when the job was
		// made; they must still be, now.
		if err := s.grants(c.Credential, j.Targets); err != nil {
			s.log.Warn("agent job not run: its targets are outside its credential's grant", zap.String("job", j.ID), zap.String("credential", c.Credential), zap.Error(err))
			return agentwork.Skip(ReasonForbidden, fmt.Sprintf("the job was created by a task of webhook credential %q, and %v; nothing was sent. Widen the grant, or change the job's targets (agentwork cron update) or delete it", c.Credential, err))
		}
	}
	if j.Overlap != "" {
		run.Overlap = j.Overlap
	}
	if req.Metadata[metaCatchup] != "" && run.Overlap == OverlapSkip {
		// Ticks a catch-up fired together: each would find the one before
		// it running. They run one after another instead.
		run.Overlap = OverlapQueue
	}
	return nil
}

// gateReasons are skips decided before the model: they neither reset nor
// count toward failures.
var gateReasons = map[string]bool{
	agentwork.ReasonBusy: true, agentwork.ReasonPaused: true, agentwork.ReasonDisabled: true,
	ReasonExpired: true, ReasonDeleted: true, ReasonMissed: true, ReasonForbidden: true,
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
	j, rev, err := s.readJob(ctx, id)
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
	var alert, paused, overBudget bool
	tick := run.Request.ScheduledAt
	ended := func(st *State) bool {
		if !run.Request.Manual && tick != nil && (st.Ended == nil || tick.After(*st.Ended)) && (st.Retry == nil || !st.Retry.Tick.Equal(*tick)) {
			st.Ended = ptr(tick.UTC())
		}
		return true
	}
	st, err := updateState(ctx, s.bus.State, id, func(st *State) bool {
		alert, paused, overBudget = false, false, false
		if res.Usage != nil && st.LastRunID != run.ID { // once per run
			overBudget = spend(st, j, res.Usage.InputTokens+res.Usage.OutputTokens, now)
		}
		st.LastRunAt, st.LastRunID, st.LastOutcome = &now, run.ID, outcome
		st.LastReason, st.LastError = res.Reason, res.Error
		if outcome == bus.OutcomeError {
			st.LastReason = res.Class
		}
		if gateSkip {
			return ended(st)
		}
		st.Runs++
		if outcome != bus.OutcomeError {
			st.ConsecutiveFailures = 0
			if tick == nil || st.Retry == nil || !st.Retry.Tick.After(*tick) {
				st.Retry = nil // (not a later tick's: an earlier tick's success does not settle it)
			}
			return ended(st)
		}
		st.ConsecutiveFailures++
		alert = alertAfter > 0 && st.ConsecutiveFailures == alertAfter
		if pauseAfter > 0 && st.ConsecutiveFailures >= pauseAfter && (!st.Paused || st.PausedBy == PausedByAgent) {
			// (It takes over a pause of the schedule tools: they cannot lift it.)
			st.Paused, st.PausedAt, st.PausedUntil, st.PausedBy, paused = true, &now, nil, PausedByFailures, true
			st.PausedReason = fmt.Sprintf("paused after %d consecutive failed runs; last error: %s", st.ConsecutiveFailures, res.Error)
			st.Retry = nil
		}
		if !st.Paused && !run.Request.Manual && run.Request.ScheduledAt != nil && attempt < j.Retry.Attempts {
			backoff := time.Duration(j.Retry.Backoff) << attempt
			st.Retry = &RetryState{Tick: run.Request.ScheduledAt.UTC(), Attempt: attempt + 1, At: now.Add(backoff)}
		}
		return ended(st)
	})
	if err != nil {
		log.Warn("observe run: state not updated", zap.Error(err))
		return
	}
	if deleted, err := s.deleteAfterRun(ctx, run, j, rev, st); err != nil {
		log.Warn("observe run: job not deleted after its last run (delete it with agentwork cron delete)", zap.Error(err))
	} else if deleted {
		log.Info("job deleted after its last run (delete_after_run)", zap.String("outcome", outcome))
	}
	if alert && !paused {
		s.alert(ctx, run, j, fmt.Sprintf("agentwork: cron job %s failed %d time(s) in a row; last error: %s", jobLabel(j), st.ConsecutiveFailures, res.Error), "alert")
	}
	if paused {
		s.alert(ctx, run, j, fmt.Sprintf("agentwork: cron job %s is paused after %d failed runs in a row; last error: %s. Fix it, then: agentwork cron resume %s", jobLabel(j), st.ConsecutiveFailures, res.Error, j.ID), "paused")
		log.Warn("job paused after consecutive failures", zap.Int("failures", st.ConsecutiveFailures))
	}
	if overBudget && !paused {
		s.alert(ctx, run, j, fmt.Sprintf("agentwork: cron job %s %s. To let it run again today: agentwork cron resume %s", jobLabel(j), st.PausedReason, j.ID), "budget")
		log.Warn("job paused: its daily token budget would be passed", zap.Int64("tokens_today", st.Spent.Tokens), zap.Int64("budget", j.Budget.DailyTokens))
	}
}

// spend adds a run's tokens to the job's count of the day (in the job's
// time zone) and, when the next run would pass the job's budget, pauses
// the job until its next midnight (budget.Spend). It reports that pause.
func spend(st *State, j Job, tokens int, now time.Time) bool {
	var p *budget.Pause
	st.Spent, p = budget.Spend(st.Spent, j.Budget, tokens, now, j.Location())
	if p == nil || (st.pausedAt(now) && st.PausedBy != PausedByAgent) {
		return false
	}
	until := &p.Until
	if st.pausedAt(now) {
		// It was paused with schedule_pause, without an end: the budget
		// takes the pause over (the tools may not lift it) but does not
		// end it at midnight, which would run a job its agent paused.
		until = nil
		p.Reason = p.Used + "; it was paused with schedule_pause, and stays paused"
	}
	st.Paused, st.PausedAt, st.PausedUntil, st.PausedReason, st.PausedBy = true, &now, until, p.Reason, PausedByBudget
	return true
}

// jobLabel names j in a message: "name" (id), or "id" when it has no
// name of its own.
func jobLabel(j Job) string {
	if j.Name == "" || j.Name == j.ID {
		return strconv.Quote(j.ID)
	}
	return strconv.Quote(j.Name) + " (" + j.ID + ")"
}

// alert queues an important notification to the run's targets.
func (s *Scheduler) alert(ctx context.Context, run *agentwork.Run, j Job, text, kind string) {
	if err := agentwork.Alert(ctx, s.bus, run, ".cron-"+kind, text, s.clock.Now()); err != nil {
		s.log.Error("cron alert not queued", zap.String("job", j.ID), zap.Error(err))
	}
}
