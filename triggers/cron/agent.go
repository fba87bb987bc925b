package cron

// The jobs runs create with the schedule tools (tools/schedule): origin
// agent, owned by the source and name of the run that created them, within
// the limits of cron.agent.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/schedule"
)

// Defaults of cron.agent.
const (
	DefaultAgentMaxJobs     = 20
	DefaultAgentMaxTotal    = 100
	maxAgentMaxTotal        = 100000
	DefaultAgentMinInterval = time.Minute
	maxAgentMaxJobs         = 10000
	// IdempotencyWindow is how long after a job of origin agent was
	// removed (after its run, or by hand) its idempotency key still
	// answers with it instead of creating a new job.
	IdempotencyWindow = 24 * time.Hour
)

// Agent is the cron.agent section: the limits of the jobs runs create with
// the schedule tools. Which runs may use the tools at all is their tool
// scope (schedule_* in runner.tools, heartbeat.tools, tasks.<name>.tools
// or a job's tools); none may by default.
type Agent struct {
	// MaxJobs is how many jobs one owner (a source and name, such as
	// task/default or heartbeat/heartbeat) may have at once; a job counts
	// until it is deleted. Default 20.
	MaxJobs int `yaml:"max_jobs" json:"max_jobs,omitempty"`
	// MaxJobsTotal is how many jobs all runs together may have at once
	// (every job of origin agent): an owner is a source and name, and a
	// webhook caller chooses the names of its tasks (within its grant's
	// names), so max_jobs alone does not bound them. Default 100.
	MaxJobsTotal int `yaml:"max_jobs_total" json:"max_jobs_total,omitempty"`
	// MinInterval is the shortest time between two runs of a recurring
	// job an agent creates. Default 1m.
	MinInterval time.Duration `yaml:"min_interval" json:"min_interval,omitempty"`
	// Tools are the tools the runs of agent-created jobs may use: names
	// and globs, as runner.tools. A job's own tools (set with cron update)
	// replace them. Default [notify_user].
	Tools []string `yaml:"tools" json:"tools,omitempty"`
}

func (a Agent) withDefaults() Agent {
	if a.MaxJobs == 0 {
		a.MaxJobs = DefaultAgentMaxJobs
	}
	if a.MaxJobsTotal == 0 {
		a.MaxJobsTotal = DefaultAgentMaxTotal
	}
	if a.MinInterval == 0 {
		a.MinInterval = DefaultAgentMinInterval
	}
	if len(a.Tools) == 0 {
		a.Tools = tools.DefaultScope
	}
	return a
}

func (a Agent) validate() error {
	var errs []error
	if a.MaxJobs < 0 || a.MaxJobs > maxAgentMaxJobs {
		errs = append(errs, fmt.Errorf("cron.agent.max_jobs: %d: want 1-%d (default %d)", a.MaxJobs, maxAgentMaxJobs, DefaultAgentMaxJobs))
	}
	if a.MaxJobsTotal < 0 || a.MaxJobsTotal > maxAgentMaxTotal {
		errs = append(errs, fmt.Errorf("cron.agent.max_jobs_total: %d: want 1-%d (default %d)", a.MaxJobsTotal, maxAgentMaxTotal, DefaultAgentMaxTotal))
	}
	if a.MinInterval < 0 {
		errs = append(errs, fmt.Errorf("cron.agent.min_interval: %s: must not be negative (default %s)", a.MinInterval, DefaultAgentMinInterval))
	}
	errs = append(errs, tools.Scope(a.Tools).Check("cron.agent.tools"))
	return errors.Join(errs...)
}

// WithConnectors names the runtime's connectors: the targets a run gives
// schedule_create must be among them.
func WithConnectors(names ...string) Option { return func(s *Scheduler) { s.connectors = names } }

// Grants checks targets against the current grant of a webhook
// credential: nil when it allows them all, else an error that says which
// target is refused and which config field to change (or that the
// credential is gone). It must be safe for concurrent use.
type Grants func(credential string, targets []string) error

// WithGrants sets how the targets of a job a webhook credential's task
// created are checked at each fire: the routing may not outlive the
// credential's grant. Without it they are not checked.
func WithGrants(g Grants) Option { return func(s *Scheduler) { s.grants = g } }

// AgentJobs is the scheduler as the schedule tools see it.
type AgentJobs struct{ s *Scheduler }

var _ schedule.Jobs = (*AgentJobs)(nil)

// Agent returns the job store of the schedule tools:
// schedule.Tools(s.Agent(), nil).
func (s *Scheduler) Agent() *AgentJobs { return &AgentJobs{s: s} }

// agentID is the id of owner's job of key: the same on every instance, so
// that two creates with one key meet at the bucket's create. Without a
// key the id is random.
func agentID(o schedule.Owner, key string) string {
	if key == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		return "agent-" + hex.EncodeToString(b)
	}
	h := sha256.Sum256([]byte(o.Source + "\x00" + o.Name + "\x00" + key))
	return "agent-" + hex.EncodeToString(h[:8])
}

// Create implements schedule.Jobs.
func (a *AgentJobs) Create(ctx context.Context, o schedule.Owner, spec schedule.Job) (schedule.Info, bool, error) {
	s := a.s
	cfg := s.cfg.Agent
	j := Job{
		ID: agentID(o, spec.IdempotencyKey), Name: spec.Name, Prompt: spec.Prompt, Schedule: spec.Schedule, At: spec.At,
		Timezone: spec.Timezone, Targets: spec.Targets, MaxRuns: spec.MaxRuns, ExpiresAt: spec.ExpiresAt,
		DeleteAfterRun: spec.DeleteAfterRun, Creator: &o, IdempotencyKey: spec.IdempotencyKey,
	}
	if spec.IdempotencyKey != "" {
		if info, ok, err := a.existing(ctx, o, j.ID); ok || err != nil {
			return info, false, err
		}
	}
	now := s.clock.Now().UTC()
	if err := s.check(&j, now); err != nil {
		return schedule.Info{}, false, agentError(err)
	}
	if j.At == nil {
		if err := minGap(j, cfg.MinInterval, now); err != nil {
			return schedule.Info{}, false, err
		}
	}
	for _, t := range j.Targets {
		if name, _ := connectors.SplitTarget(t); len(s.connectors) > 0 && !slices.Contains(s.connectors, name) {
			return schedule.Info{}, false, fmt.Errorf("targets: %q is not a connector of this runtime (there are: %s); leave targets out to deliver where this run does",
				t, strings.Join(s.connectors, ", "))
		}
	}
	// The count and the create under one lease: see holdQuota.
	hold, err := s.holdQuota(ctx, o, j.ID)
	if err != nil {
		return schedule.Info{}, false, err
	}
	defer hold.release()
	if spec.IdempotencyKey != "" {
		// A create with the same key that held the lease before this one
		// made the job: this call is its repeat, not a job over the quota.
		if info, ok, err := a.existing(ctx, o, j.ID); ok || err != nil {
			return info, false, err
		}
	}
	n, total, err := s.countAgentJobs(ctx, o)
	if err != nil {
		return schedule.Info{}, false, err
	}
	if n >= cfg.MaxJobs {
		return schedule.Info{}, false, fmt.Errorf("quota reached: %s has %d scheduled jobs, the most it may have (cron.agent.max_jobs); delete one it no longer needs with schedule_delete (schedule_list shows them), then try again", o, n)
	}
	if total >= cfg.MaxJobsTotal {
		return schedule.Info{}, false, fmt.Errorf("quota reached: the runtime has %d jobs created with schedule_create, the most all runs together may have (cron.agent.max_jobs_total); delete one you no longer need with schedule_delete, or ask an operator", total)
	}
	if err := hold.check(ctx); err != nil {
		return schedule.Info{}, false, err
	}
	st, _, err := s.create(ctx, j, OriginAgent, now, false)
	if errors.Is(err, ErrExists) && spec.IdempotencyKey != "" {
		// Another call with the same key (here or on another instance)
		// came first.
		if info, ok, err := a.existing(ctx, o, j.ID); ok || err != nil {
			return info, false, err
		}
	}
	if err != nil {
		return schedule.Info{}, false, agentError(err)
	}
	return info(st), true, nil
}

// existing returns owner's job id, or the record of its removal within
// IdempotencyWindow; ok false when there is neither.
func (a *AgentJobs) existing(ctx context.Context, o schedule.Owner, id string) (schedule.Info, bool, error) {
	s := a.s
	st, err := s.Get(ctx, id)
	switch {
	case err == nil:
		if !owns(o, st.Job) {
			return schedule.Info{}, true, fmt.Errorf("job %s exists and is not yours: use another idempotency_key", id)
		}
		return info(st), true, nil
	case !errors.Is(err, ErrNotFound):
		return schedule.Info{}, false, agentError(err)
	}
	hist, err := s.bus.Jobs.History(ctx, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return schedule.Info{}, false, nil
	case err != nil:
		return schedule.Info{}, false, fmt.Errorf("the jobs cannot be read now (%w); try again later", err)
	case len(hist) < 2:
		return schedule.Info{}, false, nil
	}
	last, prev := hist[len(hist)-1], hist[len(hist)-2]
	if last.Operation() == jetstream.KeyValuePut || s.clock.Now().Sub(last.Created()) > IdempotencyWindow {
		return schedule.Info{}, false, nil
	}
	var j Job
	if json.Unmarshal(prev.Value(), &j) != nil || !owns(o, j) {
		return schedule.Info{}, false, nil
	}
	out := info(s.status(j, State{}))
	out.Status, out.Next, out.RemovedAt = schedule.StatusRemoved, nil, ptr(last.Created().UTC())
	return out, true, nil
}

// List implements schedule.Jobs.
func (a *AgentJobs) List(ctx context.Context, o schedule.Owner) ([]schedule.Info, error) {
	all, _, err := a.s.pageOf(ctx, "", 0, func(h *held) bool { return h.originOf() == OriginAgent && owns(o, h.job()) })
	if err != nil {
		return nil, agentError(err)
	}
	var out []schedule.Info
	for _, js := range all {
		out = append(out, info(a.s.status(js.j, js.st)))
	}
	return out, nil
}

// Act implements schedule.Jobs.
func (a *AgentJobs) Act(ctx context.Context, o schedule.Owner, id, action string) (schedule.Info, error) {
	s := a.s
	st, err := s.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return schedule.Info{}, fmt.Errorf("no job %q among yours (schedule_list shows the jobs you created)", id)
	}
	if err != nil {
		return schedule.Info{}, agentError(err)
	}
	if !owns(o, st.Job) {
		by := "the config file"
		switch {
		case st.Job.Origin == OriginAPI:
			by = "the operator (agentwork cron / the jobs API)"
		case st.Job.Creator != nil:
			by = st.Job.Creator.String()
		}
		return schedule.Info{}, fmt.Errorf("job %q is not yours: it was created by %s; you may only %s the jobs you created (schedule_list shows them)", id, by, action)
	}
	switch action {
	case schedule.ActionPause:
		st, err = s.pause(ctx, id, fmt.Sprintf("paused by %s (run %s) with %s", o, o.RunID, schedule.PauseName), PausedByAgent)
	case schedule.ActionResume:
		st, err = s.resume(ctx, id, PausedByAgent)
	case schedule.ActionDelete:
		err = s.Delete(ctx, id)
	case schedule.ActionRun:
		err = a.runNow(ctx, st)
	default:
		err = fmt.Errorf("unknown action %q", action)
	}
	if err != nil {
		return schedule.Info{}, agentError(err)
	}
	return info(st), nil
}

// runNow runs an active job by hand for schedule_run: not a paused,
// disabled, expired, completed or over-budget one (an operator's manual
// run may), and at most once per cron.agent.min_interval.
func (a *AgentJobs) runNow(ctx context.Context, st Status) error {
	s, j := a.s, st.Job
	now := s.clock.Now().UTC()
	switch {
	case st.Status == StatusPaused:
		return fmt.Errorf("job %q is paused (by %s: %s): resume it first (schedule_resume lifts only a pause of schedule_pause)", j.ID, st.State.pausedBy(), st.State.PausedReason)
	case st.Status != StatusActive:
		return fmt.Errorf("job %q is %s: schedule_run runs only an active job", j.ID, st.Status)
	case st.State.overBudget(j, now):
		return fmt.Errorf("job %q has used its daily token budget (%d tokens today): it runs again tomorrow", j.ID, st.State.Spent.Tokens)
	}
	min := s.cfg.Agent.MinInterval
	var refused error
	_, err := updateState(ctx, s.bus.State, j.ID, func(st *State) bool {
		refused = nil
		if st.AgentRunAt != nil && now.Sub(*st.AgentRunAt) < min {
			refused = fmt.Errorf("job %q was run with schedule_run at %s: it may run by hand again from %s (cron.agent.min_interval %s)",
				j.ID, st.AgentRunAt.Format(time.RFC3339), st.AgentRunAt.Add(min).Format(time.RFC3339), min)
			return false
		}
		st.AgentRunAt = &now
		return true
	})
	if err != nil {
		return agentError(err)
	}
	if refused != nil {
		return refused
	}
	if _, err := s.RunNow(ctx, j.ID); err != nil {
		// Not run: give the interval back.
		_, _ = updateState(ctx, s.bus.State, j.ID, func(st *State) bool {
			if st.AgentRunAt == nil || !st.AgentRunAt.Equal(now) {
				return false
			}
			st.AgentRunAt = nil
			return true
		})
		return agentError(err)
	}
	return nil
}

// owns reports whether j is owner's: a job of origin agent it created.
func owns(o schedule.Owner, j Job) bool {
	return j.Origin == OriginAgent && j.Creator != nil && j.Creator.Same(o)
}

// agentError is an API error as the model reads it: its detail.
func agentError(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return errors.New(e.Detail)
	}
	return err
}

// minGap refuses a recurring job whose runs come closer than min: it
// looks at the gaps between its next ticks.
func minGap(j Job, min time.Duration, now time.Time) error {
	sched, err := j.Sched()
	if err != nil || min <= 0 {
		return err
	}
	prev := sched.Next(now)
	for range 100 {
		next := sched.Next(prev)
		if next.IsZero() {
			return nil
		}
		if gap := next.Sub(prev); gap < min {
			return fmt.Errorf("too frequent: %q runs %s apart; agent-created jobs run at most every %s (cron.agent.min_interval): pick a longer interval", j.Schedule, gap, min)
		}
		prev = next
	}
	return nil
}

// info is a job's Status as the schedule tools show it.
func info(st Status) schedule.Info {
	j := st.Job
	out := schedule.Info{
		ID: j.ID, Name: j.Name, Status: st.Status, Schedule: j.Schedule, Timezone: j.Timezone, Next: st.Next,
		Prompt: j.Prompt, Targets: j.Targets, DeleteAfterRun: j.DeleteAfterRun, MaxRuns: j.MaxRuns,
		ExpiresAt: j.ExpiresAt, IdempotencyKey: j.IdempotencyKey, Runs: st.State.Runs, LastOutcome: st.State.LastOutcome,
	}
	if j.At != nil {
		out.Schedule = "at " + j.At.UTC().Format(time.RFC3339)
	}
	return out
}

// finalTick reports whether the run of tick was the job's last: a
// one-shot's tick; or, once the job fires no more (max_runs fires
// published, or its schedule or expires_at has no tick after its last),
// the run of its last published tick (st.LastTick), or a run of an earlier
// tick (a queued one, a retry) that ends after the last tick's run ended.
// A run of an earlier tick is not the last even when max_runs is reached:
// the run of the last tick is still to come.
func finalTick(j Job, st State, tick time.Time) bool {
	if j.At != nil {
		return tick.Equal(*j.At)
	}
	if st.LastTick == nil || tick.After(*st.LastTick) {
		return false // (its fire is not recorded yet)
	}
	last := *st.LastTick
	if tick.Before(last) && (st.Ended == nil || st.Ended.Before(last)) {
		return false
	}
	if j.MaxRuns > 0 && st.Fires >= j.MaxRuns {
		return true
	}
	sched, err := j.Sched()
	if err != nil {
		return false
	}
	next := sched.Next(last)
	return next.IsZero() || (j.ExpiresAt != nil && next.After(*j.ExpiresAt))
}

// deleteAfterRun deletes a delete_after_run job after the run of its last
// tick ended for good (no retry pending). It runs in the observer, after
// the run's event was stored; a second observation of the same run (on
// redelivery, on another instance) finds the job gone and does nothing.
// The delete is at the revision of the definition decided on: a job
// changed meanwhile is left alone.
func (s *Scheduler) deleteAfterRun(ctx context.Context, run *agentwork.Run, j Job, rev uint64, st State) (bool, error) {
	req := run.Request
	if !j.DeleteAfterRun || j.Origin == OriginConfig || req.Manual || req.ScheduledAt == nil {
		return false, nil
	}
	attempt, _ := strconv.Atoi(req.Metadata[metaRetry])
	// A retry of its tick or of another (the fire clears a retry it published).
	retryPending := st.Retry != nil && (!st.Retry.Tick.Equal(*req.ScheduledAt) || st.Retry.Attempt > attempt)
	if retryPending || !finalTick(j, st, *req.ScheduledAt) {
		return false, nil
	}
	err := s.deleteAt(ctx, j.ID, rev)
	if bus.IsConflict(err) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}
