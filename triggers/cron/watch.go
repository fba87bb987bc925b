package cron

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/agentwork/agentwork/bus"
)

// watchJobs follows the jobs bucket: every instance sees every change, so
// a job added through one instance is listed everywhere, and its timer is
// armed (or re-armed, or cancelled) by every instance that sees the change
// (the time engine keeps one timer per job, and arming twice is harmless).
func (s *Scheduler) watchJobs(ctx context.Context, loaded chan<- struct{}) error {
	if err := s.bus.Follow(ctx, s.bus.Jobs, ">", loaded, s.jobChanged); err != nil {
		return fmt.Errorf("cron: watch jobs: %w", err)
	}
	return nil
}

// jobChanged takes u, an entry of the jobs bucket, into the cache.
func (s *Scheduler) jobChanged(u jetstream.KeyValueEntry) {
	id := u.Key()
	if u.Operation() != jetstream.KeyValuePut {
		s.mu.Lock()
		if _, ok := s.defined[id]; ok {
			delete(s.legacy, id) // the config's job stays
			s.mu.Unlock()
			return
		}
		if _, ok := s.entries[id]; ok {
			s.dropEntry(id)
			s.markDirty(id)
		}
		s.mu.Unlock()
		return
	}
	var j Job
	if err := json.Unmarshal(u.Value(), &j); err != nil {
		s.log.Error("job in the jobs bucket is not valid JSON; ignored", zap.String("job", id), zap.Error(err))
		return
	}
	s.setJob(j, u.Revision())
}

// setJob puts j into the cache; a new or changed definition has its timer
// checked.
func (s *Scheduler) setJob(j Job, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.defined[j.ID]; ok {
		// The config defines it and wins: a record of it is one an
		// earlier version wrote, or an API job reconcileConfig removes.
		s.legacy[j.ID] = legacyRecord{job: j, rev: rev}
		return
	}
	e, ok := s.entries[j.ID]
	if !ok {
		e = &entry{}
		s.putEntry(j.ID, e)
	}
	if e.job == nil || !e.job.updatedAt.Equal(j.UpdatedAt) {
		s.markDirty(j.ID)
	}
	e.job = hold(&j)
}

// watchStates follows the cron.* keys of the state bucket: what the fires
// and runs recorded, pauses, pending retries. A pause, a resumption or a
// new retry has the job's timers checked.
func (s *Scheduler) watchStates(ctx context.Context, loaded chan<- struct{}) error {
	if err := s.bus.Follow(ctx, s.bus.State, "cron.*", loaded, s.stateChanged); err != nil {
		return fmt.Errorf("cron: watch state: %w", err)
	}
	return nil
}

// stateChanged takes u, an entry of a job's state, into the cache.
func (s *Scheduler) stateChanged(u jetstream.KeyValueEntry) {
	id, ok := idFromStateKey(u.Key())
	if !ok {
		return
	}
	var st State
	if u.Operation() == jetstream.KeyValuePut {
		if err := json.Unmarshal(u.Value(), &st); err != nil {
			s.log.Error("job state is not valid JSON; treated as empty", zap.String("job", id), zap.Error(err))
		}
	}
	s.mu.Lock()
	e, ok := s.entries[id]
	switch {
	case !ok && u.Operation() != jetstream.KeyValuePut:
	case !ok:
		// State can arrive before its job; keep it for when the job does.
		s.putEntry(id, &entry{state: &st})
	case u.Operation() != jetstream.KeyValuePut && e.job == nil:
		s.dropEntry(id) // the state of a deleted job
	default:
		old := e.st()
		e.state = &st
		if old.Paused != st.Paused || !sameTime(old.ResumedAt, st.ResumedAt) || (st.Retry != nil && !st.Retry.same(old.Retry)) {
			s.markDirty(id)
		}
	}
	s.mu.Unlock()
}

func sameTime(a, b *time.Time) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Equal(*b))
}

// markDirty queues a check of the job's timers, once Run has loaded the
// jobs (before, the sweep checks them all). s.mu held.
func (s *Scheduler) markDirty(id string) {
	if !s.loaded {
		return
	}
	s.dirty[id] = true
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// keepArmed checks the timers of the jobs marked dirty, until ctx ends.
// Checks that fail (bus trouble) are tried again with backoff.
func (s *Scheduler) keepArmed(ctx context.Context) error {
	var wait time.Duration
	for {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		} else {
			select {
			case <-ctx.Done():
				return nil
			case <-s.kick:
			}
		}
		s.mu.Lock()
		ids := slices.Collect(maps.Keys(s.dirty))
		clear(s.dirty)
		s.mu.Unlock()
		failed := s.checkTimers(ctx, ids)
		if len(failed) == 0 {
			wait = 0
			continue
		}
		wait = min(max(2*wait, time.Second), time.Minute)
		s.log.Warn("cron timers not checked (bus trouble?); trying again", zap.Int("jobs", len(failed)), zap.Duration("retry_in", wait))
		s.mu.Lock()
		for _, id := range failed {
			s.dirty[id] = true
		}
		s.mu.Unlock()
	}
}

// checkTimers makes the timers of the jobs ids agree with the jobs as last seen:
// armed for the definition of an active job, cancelled for a deleted,
// paused, disabled or finished one; a pending retry armed. It returns the
// ids it could not check.
func (s *Scheduler) checkTimers(ctx context.Context, ids []string) (failed []string) {
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, id := range ids {
		g.Go(func() error {
			if err := s.checkOne(gctx, id); err != nil && ctx.Err() == nil {
				s.log.Debug("check timers", zap.String("job", id), zap.Error(err))
				mu.Lock()
				failed = append(failed, id)
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	return failed
}

func (s *Scheduler) checkOne(ctx context.Context, id string) error {
	s.mu.Lock()
	e, ok := s.entries[id]
	var cp entry
	if ok {
		cp = *e
	}
	done, free := s.tryTurn(id)
	s.mu.Unlock()
	if !free {
		return nil // a fire here is at work on it: checked once it is done
	}
	defer done()
	if !ok || cp.job == nil {
		// Deleted: its timers go too (a fire that comes anyway finds no job).
		return errors.Join(s.timers.Cancel(ctx, timerKey(id)), s.timers.Cancel(ctx, retryKey(id)))
	}
	job, st := cp.job.job(), cp.st()
	sched, err := job.Sched()
	if err != nil {
		s.log.Error("job cannot be scheduled; fix it with cron update", zap.String("job", id), zap.Error(err))
		return s.timers.Cancel(ctx, timerKey(id))
	}
	if nextTick(job, sched, st).IsZero() {
		if err := s.timers.Cancel(ctx, timerKey(id)); err != nil {
			return err
		}
	} else if err := s.ensure(ctx, job, sched, st); err != nil {
		return err
	}
	if r := st.Retry; r != nil {
		return s.ensureRetry(ctx, id, r)
	}
	return nil
}

// ensure arms the job's timer unless one is pending for its definition
// and not later than its next tick (a pause until a time lifted early
// leaves one for the first tick after the pause: the job's ticks come
// sooner).
func (s *Scheduler) ensure(ctx context.Context, j Job, sched Schedule, st State) error {
	p, err := s.timers.Pending(ctx, timerKey(j.ID))
	if err == nil {
		var d timerData
		if json.Unmarshal(p.Data, &d) == nil && d.UpdatedAt.Equal(j.UpdatedAt) && !d.Tick.After(nextTick(j, sched, st)) {
			return nil
		}
	} else if !errors.Is(err, bus.ErrNoTimer) {
		return err
	}
	return s.arm(ctx, j, sched, st)
}

// ensureRetry arms the retry timer for r unless it is pending.
func (s *Scheduler) ensureRetry(ctx context.Context, id string, r *RetryState) error {
	p, err := s.timers.Pending(ctx, retryKey(id))
	if err == nil {
		var d timerData
		if json.Unmarshal(p.Data, &d) == nil && d.Tick.Equal(r.Tick) && d.Attempt == r.Attempt {
			return nil
		}
	} else if !errors.Is(err, bus.ErrNoTimer) {
		return err
	}
	return s.armRetry(ctx, id, r)
}

// sweep makes sure at start that every active job has its timer, and every
// pending retry its own: the timers left pending survive restarts, but an
// instance may have stopped between a change and arming its timer, and on
// the first start no job has one. One listing of the pending timers finds
// those missing; they are armed soonest tick first, so that a job fires
// as soon as its own timer is armed. The pending timers of the jobs whose
// definition changed (at this start, or at one killed before it re-armed
// them: see rearmKey) are read, and re-armed if they are for the old
// definition; no other timer is read. Every instance does this, and arming
// twice is harmless. It retries until it succeeds, and reports how many
// jobs it armed, and false when ctx ended first.
func (s *Scheduler) sweep(ctx context.Context) (int, bool) {
	armed := 0
	for wait := time.Second; ; wait = min(2*wait, time.Minute) {
		n, err := s.pass(ctx, 0)
		armed += n
		if err == nil {
			return armed, true
		}
		if ctx.Err() != nil {
			return armed, false
		}
		s.log.Warn("cron timers not checked at start (bus trouble?); trying again", zap.Duration("retry_in", wait), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return armed, false
		case <-t.C:
		}
	}
}

// sweepParallel is how many timers the sweep arms at once: enough to
// keep the disk busy with fsync on every write.
const sweepParallel = 64

// sweepShare is how many timers the sweep arms at once while fires wait
// for a slot: about as many as work in the slots (cron.concurrency 16),
// so that the pass neither stalls nor crowds them out.
const sweepShare = 16

// sweepWidth is how many timers the start's arming pass may arm at once
// now. The fires come first: from tickHeadsUp before an on-time tick
// until it is published one (not none: under a load of fires that never lets up, the soonest
// ticks still get their timers); while fires wait for a slot
// sweepShare; else sweepParallel. A fire in hand of a job the pass
// comes to keeps the job: the pass leaves it, and the job's timers are
// checked once the fire is done (armMissing, tryTurn).
func (s *Scheduler) sweepWidth() int {
	switch {
	case s.publishing.busy():
		return 1
	case s.queued.busy():
		return sweepShare
	}
	return sweepParallel
}

func (s *Scheduler) sweepOnce(ctx context.Context) (int, error) {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	s.mu.Lock()
	s.fired = map[string]bool{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.fired = nil
		s.mu.Unlock()
	}()
	// Read before the listing: a fired copy at or below the floor was
	// handled before the listing, so whatever its handler armed is listed.
	floor, err := s.timers.AckFloor(ctx, ConsumerName)
	if err != nil {
		return 0, err
	}
	pending, err := s.timers.PendingKeys(ctx, "cron")
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	ids := slices.Collect(maps.Keys(s.entries))
	s.mu.Unlock()
	todo := s.missing(ids, pending)
	if len(todo) == 0 {
		return 0, nil
	}
	s.log.Info("arming the timers of jobs that have none (or may have one of an old definition)", zap.Int("jobs", len(todo)))
	slices.SortFunc(todo, func(a, b toArm) int {
		switch {
		case a.next.IsZero() != b.next.IsZero():
			if a.next.IsZero() {
				return 1
			}
			return -1
		}
		return a.next.Compare(b.next)
	})
	var mu sync.Mutex
	failed := 0
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(sweepParallel)
	// Fires come first (see sweepWidth); an arm that ends lets the pass
	// look again.
	var inFlight atomic.Int32
	ended := make(chan struct{}, 1)
arming:
	for _, a := range todo {
		for int(inFlight.Load()) >= s.sweepWidth() {
			select {
			case <-ended:
			case <-ctx.Done():
				break arming
			}
		}
		inFlight.Add(1)
		g.Go(func() error {
			defer func() {
				inFlight.Add(-1)
				select {
				case ended <- struct{}{}:
				default:
				}
			}()
			var err error
			if a.check || a.next.IsZero() {
				err = s.checkOne(gctx, a.id)
			} else {
				err = s.armMissing(gctx, a.id, floor)
			}
			if err != nil && ctx.Err() == nil {
				s.log.Debug("arm timer", zap.String("job", a.id), zap.Error(err))
				mu.Lock()
				failed++
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if failed > 0 {
		return len(todo) - failed, fmt.Errorf("%d jobs' timers not armed", failed)
	}
	return len(todo), nil
}

// toArm is a job the arming pass arms.
type toArm struct {
	id    string
	next  time.Time // zero: check (retry timer missing)
	check bool      // check the pending timer (recheck)
}

// missing returns the jobs among ids without the timers they need now:
// the next tick's within the arm-ahead window (further ones are left to
// a later pass), a pending retry's; and those whose pending timer may be
// an old definition's (recheck). It reads a chunk of jobs at a time under
// s.mu (fires wait on it, and a pass looks at every job) and works out
// their next ticks without it, on every core: at 100,000 jobs that is
// most of a start's arming pass.
func (s *Scheduler) missing(ids []string, pending map[string]bool) []toArm {
	var (
		mu   sync.Mutex
		todo []toArm
	)
	inChunks(len(ids), func(lo, hi int) {
		s.mu.Lock()
		seen := s.seenJobs(ids[lo:hi], pending)
		s.mu.Unlock()
		var arm []toArm
		for _, a := range seen {
			if t, ok := s.timerFor(a); ok {
				arm = append(arm, t)
			}
		}
		mu.Lock()
		todo = append(todo, arm...)
		mu.Unlock()
	})
	return todo
}

// seenJob is a job as the arming pass saw it under s.mu: a job and its
// state are replaced when they change, never changed in place, so what
// they point to stays as seen.
type seenJob struct {
	id                  string
	job                 *held
	state               *State
	timer, retry, check bool // a timer, a retry timer pending; check the timer (recheck)
}

// seenJobs returns the jobs among ids as seen now. s.mu held.
func (s *Scheduler) seenJobs(ids []string, pending map[string]bool) []seenJob {
	out := make([]seenJob, 0, len(ids))
	for _, id := range ids {
		e, ok := s.entries[id]
		if !ok || e.job == nil {
			continue
		}
		timer := pending[timerKey(id)]
		out = append(out, seenJob{id: id, job: e.job, state: e.state, timer: timer, retry: pending[retryKey(id)], check: timer && s.recheck[id]})
	}
	return out
}

// timerFor returns what the arming pass arms for a, if anything.
func (s *Scheduler) timerFor(a seenJob) (toArm, bool) {
	var next time.Time
	if !a.timer || a.check {
		j := a.job.job()
		var st State
		if a.state != nil {
			st = *a.state
		}
		if sched, err := j.Sched(); err == nil {
			next = nextTick(j, sched, st)
		}
		if !a.check && !next.IsZero() && s.beyond(due(j, next)) {
			next = time.Time{} // a later pass arms it
		}
	}
	if a.check || !next.IsZero() || (a.state != nil && a.state.Retry != nil && !a.retry) {
		return toArm{a.id, next, a.check}, true
	}
	return toArm{}, false
}

// armMissing arms the timer of job id, which the listing found without
// one (no read of it first), from the job as last seen, and checks a
// retry timer too. It never arms a tick a fire has in hand or has done:
// it defers to a fire at work here (the job is checked once it is done);
// a job whose fire was done since the listing armed its next timer
// itself (its state as seen here may not have the tick yet), so it is
// checked instead; and a tick already due whose timer fired while no
// instance handled it (its fire waits in the consumer, above its ack
// floor, and arms the next tick) is left to that fire. A tick whose fire
// was handled (acked, at or below floor) and left no timer — an instance
// whose config did not define the job dropped it — is armed from the
// job's state as stored (not as seen here, which may lag).
func (s *Scheduler) armMissing(ctx context.Context, id string, floor uint64) error {
	s.mu.Lock()
	if s.fired[id] {
		s.mu.Unlock()
		return s.checkOne(ctx, id)
	}
	e, ok := s.entries[id]
	var cp entry
	if ok {
		cp = *e
	}
	done, free := s.tryTurn(id)
	s.mu.Unlock()
	if !free {
		return nil
	}
	defer done()
	if !ok || cp.job == nil {
		return nil // deleted meanwhile: its watch event cancels
	}
	job, st := cp.job.job(), cp.st()
	sched, err := job.Sched()
	if err != nil {
		return nil
	}
	if tick := nextTick(job, sched, st); !tick.IsZero() {
		if !due(job, tick).After(s.clock.Now().Add(fireLead)) {
			f, err := s.firedFor(ctx, job, tick)
			if err != nil {
				return err
			}
			if f.Seq > floor {
				return nil
			}
			if f.Seq > 0 {
				if st, err = readState(ctx, s.bus.State, id); err != nil {
					return err
				}
			}
		}
	}
	if err := s.arm(ctx, job, sched, st); err != nil {
		return err
	}
	if r := st.Retry; r != nil {
		return s.ensureRetry(ctx, id, r)
	}
	return nil
}

// firedFor returns the fired copy of the job's timer for tick (and its
// definition) the time engine keeps (its newest), or a zero Timer. Above
// the consumer's ack floor the tick is the fire's to handle (it records
// the tick and arms the next).
func (s *Scheduler) firedFor(ctx context.Context, j Job, tick time.Time) (bus.Timer, error) {
	f, err := s.timers.Fired(ctx, timerKey(j.ID))
	if errors.Is(err, bus.ErrNoTimer) {
		return bus.Timer{}, nil
	}
	if err != nil {
		return bus.Timer{}, err
	}
	var d timerData
	if json.Unmarshal(f.Data, &d) != nil || !d.Tick.Equal(tick) || !d.UpdatedAt.Equal(j.UpdatedAt) {
		return bus.Timer{}, nil
	}
	return f, nil
}
