package cron

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
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

	// Waiting holds, by instance (its bus connection's id), the ticks that
	// instance could not claim, publish or record as missed yet (bus
	// trouble) and is retrying. Written when a tick fails, cleared when it
	// is published or recorded as missed; an instance that starts takes
	// up what it finds here, so a tick is not lost when its instance stops
	// before the bus recovers.
	Waiting map[string]Waiting `json:"waiting,omitempty"`
}

// Waiting is what one instance holds of a job's ticks put off.
type Waiting struct {
	// Ticks are the ticks, oldest first; at most 1,000 (maxWaiting).
	Ticks []time.Time `json:"ticks,omitempty"`
	// More counts older ticks beyond Ticks, from MoreFrom to MoreTo; they
	// become one summary missed event. MoreAtLeast: More is a lower bound.
	More        int        `json:"more,omitempty"`
	MoreAtLeast bool       `json:"more_at_least,omitempty"`
	MoreFrom    *time.Time `json:"more_from,omitempty"`
	MoreTo      *time.Time `json:"more_to,omitempty"`
	// Error is the last failure.
	Error string `json:"error,omitempty"`
}

// maxWaiting bounds the ticks one instance lists per job in Waiting.
const maxWaiting = maxEnumerate

func (w Waiting) empty() bool { return len(w.Ticks) == 0 && w.More == 0 && !w.MoreAtLeast }

// same reports whether w and o hold the same ticks (the error aside: a
// new error alone is not worth a write).
func (w Waiting) same(o Waiting) bool {
	return slices.EqualFunc(w.Ticks, o.Ticks, time.Time.Equal) && w.More == o.More && w.MoreAtLeast == o.MoreAtLeast &&
		sameTime(w.MoreFrom, o.MoreFrom) && sameTime(w.MoreTo, o.MoreTo)
}

func sameTime(a, b *time.Time) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Equal(*b))
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

// states is the state bucket the scheduler writes to.
func (s *Scheduler) states() jetstream.KeyValue {
	if s.stateKV != nil {
		return s.stateKV
	}
	return s.bus.State
}

// waitingOf is what this instance holds of job id's ticks (s.held), as the
// job's state lists it: the ticks, oldest first, the oldest beyond
// maxWaiting counted into the summary. Kept ticks (that failed) are all
// listed; ticks being handled for the first time only up to upTo, the
// latest last tick this instance writes: a tick the job's last tick has
// passed is listed until it is done, so that even a process killed while
// it is being published leaves it to the next start. s.mu held.
func (s *Scheduler) waitingOf(id string, upTo time.Time) Waiting {
	held := s.held[id]
	if len(held) == 0 {
		return Waiting{}
	}
	var ticks []time.Time
	var sum task // only its summary
	cause := ""
	for _, hid := range slices.Sorted(maps.Keys(held)) { // the newest cause last
		t := held[hid]
		if !t.kept {
			for _, l := range [][]time.Time{t.fire, t.missed, t.stale} {
				for _, tk := range l {
					if !tk.After(upTo) {
						ticks = append(ticks, tk)
					}
				}
			}
			if t.hasMore() && !t.moreFrom.After(upTo) {
				sum.addMore(t.moreFrom, t.moreTo, t.moreMissed)
				sum.moreAtLeast = sum.moreAtLeast || t.moreAtLeast
			}
			continue
		}
		ticks = slices.Concat(ticks, t.fire, t.missed, t.stale)
		if t.hasMore() {
			sum.addMore(t.moreFrom, t.moreTo, t.moreMissed)
			sum.moreAtLeast = sum.moreAtLeast || t.moreAtLeast
		}
		if t.cause != "" {
			cause = t.cause
		}
	}
	slices.SortFunc(ticks, time.Time.Compare)
	ticks = slices.CompactFunc(ticks, time.Time.Equal)
	if n := len(ticks) - maxWaiting; n > 0 {
		sum.addMore(ticks[0], ticks[n-1], n)
		ticks = ticks[n:]
	}
	w := Waiting{Error: cause}
	for _, tk := range ticks {
		w.Ticks = append(w.Ticks, tk.UTC())
	}
	if sum.hasMore() {
		w.More, w.MoreAtLeast = sum.moreMissed, sum.moreAtLeast
		w.MoreFrom, w.MoreTo = ptr(sum.moreFrom.UTC()), ptr(sum.moreTo.UTC())
	}
	return w
}

// save writes job id's state: what progress changes (nil: nothing) and
// this instance's waiting ticks of the job (s.held) where the stored list
// differs, removing the lists it took up at start and, from the lists of
// other instances, the ticks it has just fired or recorded as missed
// (resolved). With nothing to change it writes nothing. The waiting ticks
// are read at each compare-and-set attempt, so the write that lands last
// carries the latest of them; a write that fails (the bus is down) leaves
// them to the next one.
func (s *Scheduler) save(ctx context.Context, id string, progress func(*State) bool, resolved []time.Time) error {
	me := s.bus.Instance()
	if progress == nil {
		// The common case when nothing was done: skip the round trip if the
		// state as last seen already lists what this instance holds.
		s.mu.Lock()
		e := s.entries[id]
		skip := e == nil || e.job.ID == "" || (len(s.adopted[id]) == 0 && s.waitingOf(id, s.wrote[id]).same(e.state.Waiting[me]))
		s.mu.Unlock()
		if skip {
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	var adopted []string
	var upTo time.Time
	_, err := updateState(ctx, s.states(), id, func(st *State) bool {
		var before time.Time
		if st.LastTick != nil {
			before = *st.LastTick
		}
		changed := progress != nil && progress(st)
		s.mu.Lock()
		e := s.entries[id]
		known := e != nil && e.job.ID != ""
		upTo = s.wrote[id]
		if st.LastTick != nil && st.LastTick.After(before) && st.LastTick.After(upTo) {
			upTo = *st.LastTick // this write moves the last tick
		}
		w := s.waitingOf(id, upTo)
		adopted = s.adopted[id]
		s.mu.Unlock()
		if !known {
			// A deleted job: its state is not brought back for its ticks.
			return changed
		}
		for _, k := range adopted {
			if _, ok := st.Waiting[k]; ok && k != me {
				delete(st.Waiting, k)
				changed = true
			}
		}
		if len(resolved) > 0 && len(st.Waiting) > 0 {
			done := make(map[int64]bool, len(resolved))
			for _, tk := range resolved {
				done[tk.UnixNano()] = true
			}
			for k, w := range st.Waiting {
				if k == me {
					continue
				}
				n := len(w.Ticks)
				w.Ticks = slices.DeleteFunc(slices.Clone(w.Ticks), func(tk time.Time) bool { return done[tk.UnixNano()] })
				switch {
				case len(w.Ticks) == n:
				case w.empty():
					delete(st.Waiting, k)
					changed = true
				default:
					st.Waiting[k] = w
					changed = true
				}
			}
		}
		if !w.same(st.Waiting[me]) {
			if w.empty() {
				delete(st.Waiting, me)
			} else {
				if st.Waiting == nil {
					st.Waiting = map[string]Waiting{}
				}
				st.Waiting[me] = w
			}
			changed = true
		}
		if len(st.Waiting) == 0 {
			st.Waiting = nil
		}
		return changed
	})
	if err == nil {
		s.mu.Lock()
		delete(s.adopted, id)
		if upTo.After(s.wrote[id]) {
			if s.wrote == nil {
				s.wrote = map[string]time.Time{}
			}
			s.wrote[id] = upTo
		}
		s.mu.Unlock()
	}
	return err
}

// flush writes the waiting ticks of every job whose state does not list
// them yet (their last write failed), so the next start finds them. It
// gives up after opTimeout: the bus may be down.
func (s *Scheduler) flush(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	s.mu.Lock()
	ids := slices.Collect(maps.Keys(s.held))
	for id := range s.adopted {
		if _, ok := s.held[id]; !ok {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		if err := s.save(ctx, id, nil, nil); err != nil {
			s.log.Warn("waiting ticks not written at stop; the next start finds the older list (or, without one, starts from the last tick recorded)",
				zap.String("job", id), zap.Error(err))
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// adopt takes up at start the ticks of e that instances (stopped ones, or
// live ones: claims keep each tick once) listed in its state as waiting:
// they are tried at once, then as any tick put off. Ticks after the job's
// anchor are left out: the catch-up from the anchor finds them again. A
// summary of older ticks is kept whole when it starts at or before the
// anchor (the catch-up then starts after it). s.mu held.
func (s *Scheduler) adopt(e *entry, now time.Time) {
	if len(e.state.Waiting) == 0 || e.job.ID == "" {
		return
	}
	id := e.job.ID
	keys := slices.Sorted(maps.Keys(e.state.Waiting))
	s.adopted[id] = keys
	t := task{job: e.job, again: true, kept: true, failures: 1}
	var ticks []time.Time
	for _, k := range keys {
		w := e.state.Waiting[k]
		ticks = append(ticks, w.Ticks...)
		if (w.More > 0 || w.MoreAtLeast) && w.MoreFrom != nil && w.MoreTo != nil {
			if t.hasMore() && !w.MoreFrom.After(t.moreTo) && !w.MoreTo.Before(t.moreFrom) {
				// Overlapping summaries: most likely the same ticks, kept
				// by two instances.
				n := max(t.moreMissed, w.More)
				t.addMore(*w.MoreFrom, *w.MoreTo, 0)
				t.moreMissed = n
			} else {
				t.addMore(*w.MoreFrom, *w.MoreTo, w.More)
			}
			t.moreAtLeast = t.moreAtLeast || w.MoreAtLeast
		}
		if w.Error != "" {
			t.cause = w.Error
		}
	}
	if t.cause == "" {
		t.cause = "its instance stopped before it was published"
	}
	anchor := e.anchor()
	if t.hasMore() {
		if t.moreFrom.After(anchor) {
			t = t.with(nil, false) // the catch-up counts these
		} else {
			t.moreCause = t.cause
			if t.moreTo.After(anchor) {
				e.cursor, anchor = t.moreTo, t.moreTo
			}
		}
	}
	slices.SortFunc(ticks, time.Time.Compare)
	for _, tk := range slices.CompactFunc(ticks, time.Time.Equal) {
		if tk.After(anchor) || (t.hasMore() && !tk.Before(t.moreFrom) && !tk.After(t.moreTo)) {
			continue // found by the catch-up, or counted in the summary
		}
		t.fire = append(t.fire, tk)
	}
	if len(t.fire) == 0 && !t.hasMore() {
		return
	}
	first, n := t.span()
	s.log.Info("taking up ticks left waiting by an instance that stopped", zap.String("job", id), zap.Time("tick", first),
		zap.Int("ticks", n), zap.String("last_error", t.cause))
	s.addDeferredLocked(t, now)
}
