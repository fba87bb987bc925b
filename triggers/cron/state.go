package cron

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// State is a job's state in the agentwork_state bucket, key cron.<id>. It
// is written by the instance that fires a tick, by the observer of the run
// (on whichever instance ran it) and by pause/resume, always with a
// compare-and-set on the key's revision.
type State struct {
	// LastTick is the latest tick handled (fired or recorded as missed).
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
	// Runs counts runs that reached the model.
	Runs int `json:"runs"`
	// ConsecutiveFailures counts error outcomes since the last success.
	ConsecutiveFailures int `json:"consecutive_failures"`

	// Paused stops the job from firing; PausedReason says why (a person's
	// note, or the failures that paused it).
	Paused       bool       `json:"paused,omitempty"`
	PausedReason string     `json:"paused_reason,omitempty"`
	PausedAt     *time.Time `json:"paused_at,omitempty"`
	// ResumedAt: ticks before it are not caught up.
	ResumedAt *time.Time `json:"resumed_at,omitempty"`

	// Retry is a pending re-run of a failed tick.
	Retry *RetryState `json:"retry,omitempty"`
}

// RetryState is a pending re-run of a failed tick.
type RetryState struct {
	Tick    time.Time `json:"tick"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
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
	for range 20 {
		var st State
		var rev uint64
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return st, fmt.Errorf("cron: read state of %s: %w", id, err)
		default:
			rev = e.Revision()
			if err := json.Unmarshal(e.Value(), &st); err != nil {
				return st, fmt.Errorf("cron: state of %s is not valid JSON (delete key %s in agentwork_state to reset it): %w", id, key, err)
			}
		}
		if !fn(&st) {
			return st, nil
		}
		data, err := json.Marshal(st)
		if err != nil {
			return st, err
		}
		if rev == 0 {
			_, err = kv.Create(ctx, key, data)
		} else {
			_, err = kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			return st, nil
		}
		if !isConflict(err) {
			return st, fmt.Errorf("cron: write state of %s: %w", id, err)
		}
	}
	return State{}, fmt.Errorf("cron: state of %s: too many concurrent updates", id)
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

func isConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

func ptr[T any](v T) *T { return &v }

func later(a, b *time.Time) *time.Time {
	switch {
	case a == nil:
		return b
	case b == nil || a.After(*b):
		return a
	default:
		return b
	}
}
