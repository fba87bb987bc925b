package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/triggers/budget"
)

// State is what the heartbeat remembers in the agentwork_state bucket under
// heartbeat.<name>. Every instance reads and writes it (compare-and-set), so
// the rhythm and the last outcome survive restarts and are the same for all.
type State struct {
	// LastFire is the scheduled time of the last tick that was published.
	LastFire time.Time `json:"last_fire,omitzero"`
	// Passed is the latest tick passed over while paused: the rhythm goes
	// on from it (the later of LastFire and Passed), so the ticks of a
	// pause are not caught up.
	Passed time.Time `json:"passed,omitzero"`
	// NextFire is when the next tick is due (zero when disabled).
	NextFire time.Time `json:"next_fire,omitzero"`
	// LastRun is the outcome of the last run that ended (scheduled or wake).
	LastRun *LastRun `json:"last_run,omitempty"`
	// ConsecutiveErrors counts runs that ended in an error since the last
	// run in which the model answered.
	ConsecutiveErrors int `json:"consecutive_errors"`

	// Paused passes over the scheduled heartbeats (wake still runs);
	// PausedReason says why (a person's note, or the budget).
	Paused       bool       `json:"paused,omitempty"`
	PausedReason string     `json:"paused_reason,omitempty"`
	PausedAt     *time.Time `json:"paused_at,omitempty"`
	// PausedUntil, on a pause that lifts itself (the budget's), is when:
	// the next midnight in the budget's time zone. The first tick from
	// then on lifts it and runs.
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	// Spent is what the heartbeat's runs spent on its day, for its budget.
	Spent *budget.Spent `json:"spent,omitempty"`
}

// rhythm is the tick the next one follows: the last published or passed
// over.
func (st *State) rhythm() time.Time {
	if st.Passed.After(st.LastFire) {
		return st.Passed
	}
	return st.LastFire
}

// pausedAt reports whether the heartbeat is paused at now: paused, and not
// a pause that lifted itself by now.
func (st *State) pausedAt(now time.Time) bool {
	return st.Paused && (st.PausedUntil == nil || now.Before(*st.PausedUntil))
}

// unpause ends the pause, whichever it was.
func (st *State) unpause() {
	st.Paused, st.PausedReason, st.PausedAt, st.PausedUntil = false, "", nil, nil
}

// LastRun is the outcome of one run.
type LastRun struct {
	RunID     string    `json:"run_id"`
	RequestID string    `json:"request_id,omitempty"`
	Ended     time.Time `json:"ended"`
	// Outcome is done, skip or error.
	Outcome string `json:"outcome"`
	// Reason is the skip reason or the error class.
	Reason string `json:"reason,omitempty"`
	// Detail is the skip detail or the error message.
	Detail string `json:"detail,omitempty"`
	// Text is the notification sent (done).
	Text        string     `json:"text,omitempty"`
	Manual      bool       `json:"manual,omitempty"`
	ScheduledAt *time.Time `json:"scheduled_at,omitempty"`
}

func (h *Heartbeat) stateKey() string { return "heartbeat." + h.cfg.Name }

// loadState reads the state; a missing key is the zero State.
func (h *Heartbeat) loadState(ctx context.Context) (State, uint64, error) {
	var st State
	e, err := h.bus.State.Get(ctx, h.stateKey())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return st, 0, nil
	}
	if err != nil {
		return st, 0, fmt.Errorf("heartbeat: read state %s: %w", h.stateKey(), err)
	}
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		// A corrupt record must not stop the heartbeat: start afresh.
		h.log.Warn("state record unreadable; starting afresh", zap.Error(err))
		return State{}, e.Revision(), nil
	}
	return st, e.Revision(), nil
}

// updateState applies fn to the stored state with compare-and-set, retrying
// when another instance wrote in between. fn returns false to write nothing.
func (h *Heartbeat) updateState(ctx context.Context, fn func(*State) bool) error {
	write := func(st *State, _ bool) (bool, error) { return fn(st), nil }
	_, _, err := bus.Update(ctx, h.bus.State, h.stateKey(), write)
	var corrupt *bus.CorruptError
	if errors.As(err, &corrupt) {
		// A corrupt record must not stop the heartbeat: start afresh.
		h.log.Warn("state record unreadable; starting afresh", zap.Error(err))
		var st State
		if !fn(&st) {
			return nil
		}
		_, _, err = bus.UpdateAt(ctx, h.bus.State, h.stateKey(), st, corrupt.Revision, write)
	}
	if err != nil {
		return fmt.Errorf("heartbeat: write state %s: %w", h.stateKey(), err)
	}
	return nil
}
