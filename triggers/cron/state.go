package cron

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/triggers/budget"
)

// State is a job's state in the agentwork_state bucket, key cron.<id>. It
// is written by the instance that handles a fire of the job's timer, by
// the observer of the run (on whichever instance ran it) and by
// pause/resume, always with a compare-and-set on the key's revision.
type State struct {
	// LastTick is the latest tick handled (fired or recorded as missed):
	// the next fire looks at the ticks after it.
	LastTick *time.Time `json:"last_tick,omitempty"`
	// LastFired is when the latest tick was published.
	LastFired *time.Time `json:"last_fired,omitempty"`
	// NextFire is the next tick as of the last fire.
	NextFire *time.Time `json:"next_fire,omitempty"`
	// Fires counts scheduled fires (not manual runs); max_runs limits it.
	Fires int `json:"fires"`
	// Missed counts ticks recorded as missed.
	Missed int `json:"missed,omitempty"`

	// LastRunAt, LastRunID, LastOutcome (done, skip, error), LastReason
	// (skip reason or error class) and LastError describe the last run's
	// result: the model's outcome, not the publish.
	LastRunAt   *time.Time `json:"last_run_at,omitempty"`
	LastRunID   string     `json:"last_run_id,omitempty"`
	LastOutcome string     `json:"last_outcome,omitempty"`
	LastReason  string     `json:"last_reason,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	// Ended is the latest tick whose scheduled run ended for good (done,
	// skipped, or failed with no retry to follow): delete_after_run waits
	// for the run of the last tick.
	Ended *time.Time `json:"ended,omitempty"`
	// Runs counts runs that reached the model.
	Runs int `json:"runs"`
	// ConsecutiveFailures counts error outcomes since the last success.
	ConsecutiveFailures int `json:"consecutive_failures"`

	// Paused stops the job from firing; PausedReason says why (a person's
	// note, or the failures that paused it).
	Paused       bool       `json:"paused,omitempty"`
	PausedReason string     `json:"paused_reason,omitempty"`
	PausedAt     *time.Time `json:"paused_at,omitempty"`
	// PausedUntil, on a pause that lifts itself (the budget's), is when:
	// the job's next midnight in its time zone. The first fire of its
	// timer from then on resumes the job.
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	// PausedBy is who paused the job: PausedByOperator (cron pause, the
	// jobs API), PausedByFailures (pause_after), PausedByBudget, or
	// PausedByAgent (schedule_pause: the only pause the schedule tools
	// may lift). Empty on a pause recorded before it was kept: not the
	// agent's.
	PausedBy string `json:"paused_by,omitempty"`
	// ResumedAt: ticks before it are not caught up.
	ResumedAt *time.Time `json:"resumed_at,omitempty"`
	// AgentRunAt is when schedule_run last ran the job by hand: it may run
	// it again cron.agent.min_interval after.
	AgentRunAt *time.Time `json:"agent_run_at,omitempty"`

	// Spent is what the job's runs spent today, for its budget.
	Spent *budget.Spent `json:"spent,omitempty"`

	// Retry is a pending re-run of a failed tick (its timer is
	// cron.<id>.retry).
	Retry *RetryState `json:"retry,omitempty"`
}

// Who paused a job (State.PausedBy).
const (
	PausedByOperator = "operator"
	PausedByFailures = "failures"
	PausedByBudget   = "budget"
	PausedByAgent    = "agent"
)

// pausedBy says who paused the job, for a refusal: "the operator", ...
func (st *State) pausedBy() string {
	switch st.PausedBy {
	case PausedByOperator:
		return "the operator"
	case PausedByFailures:
		return "the runtime after its failed runs (cron.pause_after)"
	case PausedByBudget:
		return "its daily token budget"
	case PausedByAgent:
		return "schedule_pause"
	}
	return "the operator or the runtime"
}

// overBudget reports whether the job's next run would pass its daily
// budget: today's tokens plus those of its last run.
func (st *State) overBudget(j Job, now time.Time) bool {
	return j.Budget.Over(st.Spent, now, j.Location())
}

// pausedAt reports whether the job is paused at now: paused, and not a
// pause that lifted itself by now.
func (st *State) pausedAt(now time.Time) bool {
	return st.Paused && (st.PausedUntil == nil || now.Before(*st.PausedUntil))
}

// RetryState is a pending re-run of a failed tick.
type RetryState struct {
	Tick    time.Time `json:"tick"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
}

// same reports whether o is the same retry.
func (r *RetryState) same(o *RetryState) bool {
	return o != nil && r.Tick.Equal(o.Tick) && r.Attempt == o.Attempt && r.At.Equal(o.At)
}

func stateKey(id string) string { return "cron." + id }

func idFromStateKey(key string) (string, bool) {
	if len(key) > 5 && key[:5] == "cron." {
		return key[5:], true
	}
	return "", false
}

// updateState applies fn to the job's state with compare-and-set, retrying
// on conflicts. fn returns false to leave the state unchanged.
func updateState(ctx context.Context, kv jetstream.KeyValue, id string, fn func(*State) bool) (State, error) {
	key := stateKey(id)
	st, _, err := bus.Update(ctx, kv, key, func(st *State, _ bool) (bool, error) { return fn(st), nil })
	var corrupt *bus.CorruptError
	switch {
	case errors.As(err, &corrupt):
		return State{}, fmt.Errorf("cron: state of %s is not valid JSON (delete key %s in agentwork_state to reset it): %w", id, key, corrupt.Err)
	case bus.IsConflict(err):
		return State{}, fmt.Errorf("cron: state of %s: too many concurrent updates: %w", id, err)
	case err != nil:
		return st, fmt.Errorf("cron: write state of %s: %w", id, err)
	}
	return st, nil
}

func readState(ctx context.Context, kv jetstream.KeyValue, id string) (State, error) {
	var st State
	e, err := kv.Get(ctx, stateKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("cron: read state of %s: %w", id, err)
	}
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return st, fmt.Errorf("cron: state of %s: %w", id, err)
	}
	return st, nil
}

func ptr[T any](v T) *T { return &v }

// states is the state bucket the fires write to.
func (s *Scheduler) states() jetstream.KeyValue {
	if s.stateKV != nil {
		return s.stateKV
	}
	return s.bus.State
}
