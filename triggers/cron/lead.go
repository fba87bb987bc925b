package cron

// How a fire waits for its tick: the timer fires fireLead ahead, the fire
// gives its slot back while it waits, and a change to the job meanwhile
// is noticed.

import (
	"context"
	"sync"
	"time"
)

// fireLead is how long before a tick its timer fires: longer than the
// time engine's firing passes (250 ms) and a fire's reads under load, so
// that the tick is published on time; fireLeadSlack is how much earlier a
// fire may come (a pass that caught it early) and still wait for its tick.
const (
	fireLead      = time.Second
	fireLeadSlack = 500 * time.Millisecond
)

// waitSlots is how many fires per cron.concurrency slot may wait for
// their ticks at once: the jobs that share one instant wait together.
const waitSlots = 64

// slot takes one of the cron.concurrency slots that bound the fires'
// reads and writes on the bus; release gives it back (once; later calls
// do nothing).
func (s *Scheduler) slot(ctx context.Context) (release func(), err error) {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return func() {}, ctx.Err()
	}
	var once sync.Once
	return func() { once.Do(func() { <-s.slots }) }, nil
}

// firing notes that this instance handles a fire of job id until done is
// called: the fire arms the job's next timer, so a check of its timers
// meanwhile (which finds none pending) is put off until the fire is done,
// instead of arming a second timer for the tick in hand.
func (s *Scheduler) firing(id string) (done func()) {
	s.mu.Lock()
	s.inFire[id]++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.inFire[id]--; s.inFire[id] > 0 {
			return
		}
		delete(s.inFire, id)
		if s.fired != nil {
			s.fired[id] = true // it armed its next timer: the sweep's listing is out of date
		}
		if s.putOff[id] {
			delete(s.putOff, id)
			s.markDirty(id)
		}
	}
}

// busy runs fn in a slot.
func (s *Scheduler) busy(ctx context.Context, fn func() error) error {
	release, err := s.slot(ctx)
	if err != nil {
		return err
	}
	defer release()
	return fn()
}

// waitUntil waits d on the scheduler's clock, or until ctx is done.
func (s *Scheduler) waitUntil(ctx context.Context, d time.Duration) error {
	select {
	case <-s.clock.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// changedSince reports whether the job's definition, as the jobs watch
// last saw it, is no longer the one updated at updated (or is gone).
func (s *Scheduler) changedSince(id string, updated time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[id]
	return !ok || e.job.ID == "" || !e.job.UpdatedAt.Equal(updated)
}
