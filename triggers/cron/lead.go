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

// tickHeadsUp is how long before its tick a fire that waits for it has
// the start's arming pass yield (sweepWidth): long enough for the arms
// at work to be done when the tick is published.
const tickHeadsUp = 250 * time.Millisecond

// waitSlots is how many fires per cron.concurrency slot may wait for
// their ticks at once: the jobs that share one instant wait together.
const waitSlots = 64

// slot takes one of the cron.concurrency slots that bound the fires'
// reads and writes on the bus; release gives it back (once; later calls
// do nothing). A fire that has to wait for a slot counts as queued
// meanwhile (the start's arming pass yields to it: sweepWidth).
func (s *Scheduler) slot(ctx context.Context) (release func(), err error) {
	select {
	case s.slots <- struct{}{}:
	default:
		queued := s.queued.add()
		select {
		case s.slots <- struct{}{}:
			queued()
		case <-ctx.Done():
			queued()
			return func() {}, ctx.Err()
		}
	}
	var once sync.Once
	return func() { once.Do(func() { <-s.slots }) }, nil
}

// workGate counts the fires' work that the start's arming pass yields to
// (sweepWidth): fires waiting for a slot, or on-time ticks about to be
// published or being published (outside the slots).
type workGate struct {
	mu sync.Mutex
	n  int
}

// add counts one piece of work until done is called (once).
func (g *workGate) add() (done func()) {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			g.n--
			g.mu.Unlock()
		})
	}
}

// busy reports whether any work is counted.
func (g *workGate) busy() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n > 0
}

// fireTurn is the turn of one job's fires on this instance: one at a time
// holds it (turn has a token), the others wait; refs counts them all.
type fireTurn struct {
	turn chan struct{}
	refs int
}

// firing waits until no other fire of job id is in hand on this instance
// and notes that this one is, until done is called. Two fires of a job
// (the stored fire of a tick and a spare one a start armed for it) are so
// handled one after the other: the second reads the state the first
// recorded and does not publish and report the tick again. The fire arms
// the job's next timer, so a check of its timers meanwhile (which finds
// none pending) is put off until the fire is done, instead of arming a
// second timer for the tick in hand.
func (s *Scheduler) firing(ctx context.Context, id string) (done func(), err error) {
	s.mu.Lock()
	ft := s.inFire[id]
	if ft == nil {
		ft = &fireTurn{turn: make(chan struct{}, 1)}
		s.inFire[id] = ft
	}
	ft.refs++
	s.mu.Unlock()
	select {
	case ft.turn <- struct{}{}:
	case <-ctx.Done():
		s.mu.Lock()
		s.leave(id, ft, false)
		s.mu.Unlock()
		return nil, ctx.Err()
	}
	return func() {
		<-ft.turn
		s.mu.Lock()
		defer s.mu.Unlock()
		s.leave(id, ft, true)
	}, nil
}

// leave drops one fire of job id from ft; the last one out forgets ft
// and has the timers checked that were put off meanwhile. s.mu held.
func (s *Scheduler) leave(id string, ft *fireTurn, handled bool) {
	if ft.refs--; ft.refs > 0 {
		return
	}
	delete(s.inFire, id)
	if handled && s.fired != nil {
		s.fired[id] = true // it armed its next timer: the sweep's listing is out of date
	}
	if s.putOff[id] {
		delete(s.putOff, id)
		s.markDirty(id)
	}
}

// tryTurn takes the turn of job id's fires if no fire of it is in hand
// here; false: one is (and the job's timers are checked once it is
// done). For the start's arming pass, which must not arm a tick a fire
// is handling. s.mu held; release with done.
func (s *Scheduler) tryTurn(id string) (done func(), ok bool) {
	if s.inFire[id] != nil {
		s.putOff[id] = true
		return nil, false
	}
	ft := &fireTurn{turn: make(chan struct{}, 1), refs: 1}
	ft.turn <- struct{}{}
	s.inFire[id] = ft
	return func() {
		<-ft.turn
		s.mu.Lock()
		defer s.mu.Unlock()
		s.leave(id, ft, false)
	}, true
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
	return !ok || e.job == nil || !e.job.updatedAt.Equal(updated)
}
