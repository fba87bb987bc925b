package cron

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
)

// Request metadata keys of cron.
const (
	// metaRetry is the attempt number of a retry of a failed run.
	metaRetry = "cron_retry"
	// metaCatchup marks the ticks a catch-up fired together: they run one
	// after another whatever the job's overlap policy (but allow).
	metaCatchup = "cron_catchup"
)

// timerKey is the job's timer: its next tick.
func timerKey(id string) string { return "cron." + id }

// retryKey is the timer of the job's pending retry.
func retryKey(id string) string { return "cron." + id + ".retry" }

// parseTimerKey returns the job of a cron timer key, and whether it is the
// retry timer.
func parseTimerKey(key string) (id string, retry, ok bool) {
	rest, ok := strings.CutPrefix(key, "cron.")
	if !ok {
		return "", false, false
	}
	id, suffix, _ := strings.Cut(rest, ".")
	switch suffix {
	case "":
		return id, false, bus.ValidToken(id)
	case "retry":
		return id, true, bus.ValidToken(id)
	}
	return "", false, false
}

// timerData is what a cron timer carries.
type timerData struct {
	// Tick is the tick the timer is due for (without jitter), or the tick
	// a retry runs again.
	Tick time.Time `json:"tick"`
	// UpdatedAt is the job definition the timer was armed for.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// Attempt is the retry's attempt number.
	Attempt int `json:"attempt,omitempty"`
}

// handle is the handler of the cron timers' fires. Any bus failure is
// retried with backoff: the fire is handed out again (here or on another
// instance) and worked out again from the job's state; publishes are kept
// once by their message ids.
func (s *Scheduler) handle(ctx context.Context, m jetstream.Msg) bus.Verdict {
	t, err := s.timers.DecodeTimer(m.Subject(), m.Data())
	if err != nil {
		s.log.Error("not a cron timer; dropped", zap.String("subject", m.Subject()), zap.Error(err))
		return bus.Terminate()
	}
	attempt := 1
	if md, err := m.Metadata(); err == nil {
		attempt = int(md.NumDelivered)
	}
	id, retry, ok := parseTimerKey(t.Key)
	if !ok {
		s.log.Error("not a cron timer key; dropped", zap.String("key", t.Key))
		return bus.Terminate()
	}
	var d timerData
	if len(t.Data) > 0 {
		if err := json.Unmarshal(t.Data, &d); err != nil {
			s.log.Warn("cron timer data unreadable; the job's state decides", zap.String("job", id), zap.Error(err))
		}
	}
	log := s.log.With(zap.String("job", id))
	if retry {
		err = s.busy(ctx, func() error { return s.fireRetry(ctx, log, id, d) })
	} else {
		err = s.fireJob(ctx, log, id, attempt)
	}
	if errors.Is(err, errDefinedElsewhere) && ctx.Err() == nil {
		// A rolling config change: another instance's config defines the
		// job. The fire is handed out again until one of those takes it.
		wait := s.backoff(attempt)
		log.Info("fire of a job this instance's config does not define, but the config jobs' index lists; handed out again for an instance that defines it",
			zap.Duration("retry_in", wait))
		return bus.Retry(wait)
	}
	s.mu.Lock()
	if err == nil {
		delete(s.lastErr, id)
	} else if ctx.Err() == nil {
		s.lastErr[id] = err.Error()
	}
	s.mu.Unlock()
	switch {
	case err == nil:
		return bus.Done()
	case ctx.Err() != nil:
		return bus.Defer(0)
	}
	wait := s.backoff(attempt)
	log.Warn("cron fire failed (bus trouble?); handed out again", zap.Bool("retry_of_a_run", retry), zap.Int("attempt", attempt),
		zap.Duration("retry_in", wait), zap.Error(err))
	return bus.Retry(wait)
}

// backoff is how soon a fire handed out again for the attempt-th time
// comes back: retryBase, doubling, up to retryMax.
func (s *Scheduler) backoff(attempt int) time.Duration {
	return min(s.retryBase<<min(max(attempt, 1)-1, 30), s.retryMax)
}

// fireJob handles a fire of the job's timer: it publishes the ticks due
// since the job's anchor (and records the missed ones), records them in
// the job's state and arms the timer for the next tick. A job that is
// deleted, paused, disabled or done is left without a timer: resuming or
// changing it arms it again.
//
// The timer fires fireLead ahead of the tick: the fire reads the job and
// its state then, waits for the tick without holding one of the
// cron.concurrency slots, and publishes an on-time tick at once, however
// many other jobs share the instant; what follows (the state, the next
// timer) and any catch-up take a slot again.
func (s *Scheduler) fireJob(ctx context.Context, log *zap.Logger, id string, attempt int) error {
	turnDone, err := s.firing(ctx, id)
	if err != nil {
		return err
	}
	defer turnDone()
	release, err := s.slot(ctx)
	if err != nil {
		return err
	}
	defer func() { release() }()
	var (
		j     Job
		rev   uint64 // of j
		st    State
		sched Schedule
	)
	// load reads the job and its state; false: nothing to fire.
	load := func() (bool, error) {
		var err error
		j, rev, err = s.readJob(ctx, id)
		if errors.Is(err, ErrNotFound) {
			return false, s.elsewhere(ctx, id)
		}
		if err != nil {
			return false, err
		}
		if st, err = readState(ctx, s.bus.State, id); err != nil {
			return false, err
		}
		if sched, err = j.Sched(); err != nil {
			log.Error("job cannot be scheduled; fix it with cron update", zap.Error(err))
			return false, nil
		}
		return active(j, st), nil
	}
	if ok, err := load(); !ok || err != nil {
		return err
	}
	now := s.clock.Now()
	waited := false
	publishing := func() {} // counted from shortly before the tick until it is out
	defer func() { publishing() }()
	if next := nextTick(j, sched, st); !next.IsZero() {
		due := next.Add(jitter(j.ID, next, time.Duration(j.Jitter)))
		if wait := due.Sub(now); wait > 0 && wait <= fireLead+fireLeadSlack {
			release()
			if early := wait - tickHeadsUp; early > 0 {
				if err := s.waitUntil(ctx, early); err != nil {
					return err
				}
			}
			// The start's arming pass yields from now until the tick is
			// out (sweepWidth): its writes would be queued before it.
			publishing = s.publishing.add()
			if err := s.waitUntil(ctx, due.Sub(s.clock.Now())); err != nil {
				return err
			}
			waited, now = true, s.clock.Now()
			if s.changedSince(id, j.UpdatedAt) {
				publishing()
				// Changed (or deleted) while the fire waited: the tick it
				// waited for may be no tick of the job any more (a
				// one-shot moved). Work from the job as it is now; the
				// runs' job gate sees pauses and deletions.
				if release, err = s.slot(ctx); err != nil {
					return err
				}
				waited = false
				if ok, err := load(); !ok || err != nil {
					return err
				}
				now = s.clock.Now()
			}
		}
	}
	if st.Paused && st.PausedUntil != nil && !now.Before(*st.PausedUntil) {
		if st, err = s.lift(ctx, id, *st.PausedUntil); err != nil {
			return err
		}
		log.Info("job resumed: its pause ended", zap.Time("paused_until", *st.ResumedAt))
	}
	left := -1
	if j.MaxRuns > 0 {
		left = j.MaxRuns - st.Fires
	}
	b := plan(j, sched, anchor(j, st), now, s.cfg.Grace, left)
	if waited && !b.onTime() {
		// Not the one tick it waited for after all: a catch-up works in a slot.
		if release, err = s.slot(ctx); err != nil {
			return err
		}
	}
	// A catch-up (after a stop or an outage) knows the job's next tick
	// before it writes: armed first, that tick does not wait behind the
	// catch-up's writes, nor behind those of the other jobs catching up
	// with it (a restart's first round of ticks was late so).
	early := s.armEarly(ctx, log, j, st, b)
	// failed: the fire is handed out again with backoff, and the next
	// tick's timer armed early goes, or its fire (which replaces this one:
	// one fired copy a key) would try the catch-up again at once, as a
	// first attempt, however long the bus fails.
	failed := func(err error) error {
		if !early.IsZero() {
			if cerr := s.timers.Cancel(ctx, timerKey(id)); cerr != nil {
				log.Debug("next tick's timer armed before the failed catch-up not cancelled", zap.Error(cerr))
			}
		}
		return err
	}
	var done progress
	err = s.publish(ctx, log, j, b, attempt, &done)
	publishing()
	if waited && b.onTime() {
		// The tick is out; what is left is bookkeeping.
		var serr error
		if release, serr = s.slot(ctx); serr != nil {
			return errors.Join(err, serr)
		}
	}
	if done.any() || (err == nil && !b.last.IsZero()) {
		if err == nil {
			done.last = b.last // and the ticks max_runs left out
		}
		var werr error
		st, werr = s.record(ctx, j, sched, done)
		if err == nil && werr != nil {
			return failed(werr)
		}
	}
	if err != nil {
		return failed(err)
	}
	if s.endedBeforeRecorded(j, sched, st) {
		// The run of its last tick ended before this fire recorded the
		// tick, so the observer could not know it was the last: the
		// delete_after_run is done here (at the revision read: a job
		// changed meanwhile is left alone).
		if err := s.deleteAt(ctx, id, rev); err != nil && !bus.IsConflict(err) && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return err
		}
		log.Info("job deleted after its last run (delete_after_run)")
		return nil
	}
	if !early.IsZero() && nextTick(j, sched, st).Equal(early) {
		return nil // armed before the catch-up
	}
	return s.arm(ctx, j, sched, st)
}

// armEarly arms the next tick of a recurring job whose batch b catches
// up, before the batch's writes, and returns that tick (zero: none
// armed; fireJob arms after them). Once the batch is recorded, the
// job's next tick is b.next: the tick after the latest one due.
func (s *Scheduler) armEarly(ctx context.Context, log *zap.Logger, j Job, st State, b batch) time.Time {
	// Not with a summary of missed ticks (more than maxEnumerate): its
	// range is worked out from the clock, so a second instance taking the
	// early timer's fire while this one writes could count the gap again.
	if b.onTime() || b.hasMore() || b.next.IsZero() || j.At != nil || j.MaxRuns > 0 || j.DeleteAfterRun || st.Paused {
		return time.Time{}
	}
	if err := s.armAt(ctx, j, b.next); err != nil {
		log.Debug("next tick not armed before the catch-up; armed after it", zap.Error(err))
		return time.Time{}
	}
	return b.next
}

// endedBeforeRecorded reports whether j is a delete_after_run job that
// fires no more and whose last recorded tick's run has ended for good
// (no retry pending).
func (s *Scheduler) endedBeforeRecorded(j Job, sched Schedule, st State) bool {
	return j.DeleteAfterRun && j.Origin != OriginConfig && st.Retry == nil && st.LastTick != nil &&
		st.Ended != nil && !st.Ended.Before(*st.LastTick) && nextTick(j, sched, st).IsZero()
}

// lift ends a pause that was until until (the budget's): the job fires
// again from its first tick at or after until, and its count of tokens
// starts afresh on the new day.
func (s *Scheduler) lift(ctx context.Context, id string, until time.Time) (State, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	return updateState(ctx, s.states(), id, func(st *State) bool {
		if !st.Paused || st.PausedUntil == nil || !st.PausedUntil.Equal(until) {
			return false // resumed or paused again meanwhile
		}
		resumed := until.Add(-time.Nanosecond).UTC() // the tick at until runs
		st.Paused, st.PausedReason, st.PausedAt, st.PausedUntil, st.PausedBy, st.ResumedAt = false, "", nil, nil, "", &resumed
		return true
	})
}

// progress is what a fire did of its batch.
type progress struct {
	fired, missed []time.Time
	more          int       // ticks in the summary recorded
	last          time.Time // the latest tick done
	lastFired     time.Time // when the latest tick was published
}

func (p *progress) any() bool { return !p.last.IsZero() }

func (p *progress) done(at time.Time) {
	if at.After(p.last) {
		p.last = at
	}
}

// publish publishes the batch in time order: the summary of the oldest
// missed ticks, then each tick, fired or recorded as missed. It stops at
// the first failure; done says what got through.
func (s *Scheduler) publish(ctx context.Context, log *zap.Logger, j Job, b batch, attempt int, done *progress) error {
	cause := ""
	if attempt > 1 {
		s.mu.Lock()
		cause = s.lastErr[j.ID]
		s.mu.Unlock()
	}
	if b.hasMore() {
		if err := s.recordMissed(ctx, j, b.moreFrom, b.moreTo, moreDetail(j, b, attempt, cause)); err != nil {
			s.report(j.ID, b.moreFrom, "failed")
			return err
		}
		done.more = b.moreN
		done.done(b.moreTo)
		s.report(j.ID, b.moreFrom, "missed")
	}
	// Ticks a catch-up fires together would otherwise meet the job's
	// overlap lease of each other: they are marked to queue.
	catchup := b.late > 0 && len(b.fire) > 1
	fire, missed := b.fire, b.missed
	for len(fire)+len(missed) > 0 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if len(missed) > 0 && (len(fire) == 0 || missed[0].Before(fire[0])) {
			tick := missed[0]
			forgone, err := s.forgo(ctx, j, tick)
			if err != nil {
				s.report(j.ID, tick, "failed")
				return err
			}
			if !forgone {
				// An earlier try published the tick after all (its ack was
				// lost, or the state write after it failed) and a run has
				// it: the tick ends in the run's event.
				missed = missed[1:]
				done.fired = append(done.fired, tick)
				done.done(tick)
				log.Info("tick not recorded as missed: its request, published by an earlier try, runs", zap.Time("tick", tick))
				s.report(j.ID, tick, "fired")
				continue
			}
			if err := s.recordMissed(ctx, j, tick, tick, missedDetail(j, tick, attempt, cause)); err != nil {
				s.report(j.ID, tick, "failed")
				return err
			}
			missed = missed[1:]
			done.missed = append(done.missed, tick)
			done.done(tick)
			log.Debug("tick missed", zap.Time("tick", tick))
			s.report(j.ID, tick, "missed")
			continue
		}
		tick := fire[0]
		dup, err := s.publishTick(ctx, j, tick, 0, catchup)
		if err != nil {
			s.report(j.ID, tick, "failed")
			return err
		}
		fire = fire[1:]
		done.fired = append(done.fired, tick)
		done.done(tick)
		done.lastFired = s.clock.Now().UTC()
		if dup {
			// Another fire of the tick published it first (two instances'
			// arming passes both armed it): reported fired there.
			s.report(j.ID, tick, "duplicate")
			continue
		}
		log.Debug("tick fired", zap.Time("tick", tick), zap.Bool("catchup", catchup))
		s.report(j.ID, tick, "fired")
	}
	return nil
}

// record writes what a fire did into the job's state with compare-and-set,
// and returns the state written. A tick the state already has (another
// handler of a spare fire was first) is not counted twice.
func (s *Scheduler) record(ctx context.Context, j Job, sched Schedule, p progress) (State, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	return updateState(ctx, s.states(), j.ID, func(st *State) bool {
		newer := func(t time.Time) bool { return st.LastTick == nil || t.After(*st.LastTick) }
		if !newer(p.last) {
			return false
		}
		for _, t := range p.fired {
			if newer(t) {
				st.Fires++
			}
		}
		for _, t := range p.missed {
			if newer(t) {
				st.Missed++
			}
		}
		st.Missed += p.more
		if !p.lastFired.IsZero() {
			st.LastFired = ptr(p.lastFired)
		}
		st.LastTick = ptr(p.last.UTC())
		st.NextFire = nil
		if n := nextTick(j, sched, *st); !n.IsZero() {
			st.NextFire = ptr(n.UTC())
		}
		return true
	})
}

// arm sets the job's timer for its next tick (plus jitter), or cancels it
// when the job will not fire on its schedule again or the tick is beyond
// the arm-ahead window.
func (s *Scheduler) arm(ctx context.Context, j Job, sched Schedule, st State) error {
	return s.armAt(ctx, j, nextTick(j, sched, st))
}

// armAt arms the job's timer for tick (zero: none), or leaves it to the
// arming passes when tick is beyond the arm-ahead window.
func (s *Scheduler) armAt(ctx context.Context, j Job, tick time.Time) error {
	if tick.IsZero() {
		return s.timers.Cancel(ctx, timerKey(j.ID))
	}
	at := due(j, tick)
	if s.beyond(at) {
		// Further away than the arm-ahead window: a later arming pass
		// arms it (its timers are made sure of). A timer pending for
		// another tick or definition goes.
		if err := s.timers.Cancel(ctx, timerKey(j.ID)); err != nil {
			return err
		}
		return s.armPasses(ctx, 0)
	}
	data, err := json.Marshal(timerData{Tick: tick.UTC(), UpdatedAt: j.UpdatedAt})
	if err != nil {
		return err
	}
	return s.timers.Set(ctx, timerKey(j.ID), at, data)
}

// fireRetry handles a fire of the job's retry timer: it publishes the
// retry the job's state asks for, once, and clears it.
func (s *Scheduler) fireRetry(ctx context.Context, log *zap.Logger, id string, d timerData) error {
	j, _, err := s.readJob(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return s.elsewhere(ctx, id)
	}
	if err != nil {
		return err
	}
	st, err := readState(ctx, s.bus.State, id)
	if err != nil {
		return err
	}
	r := st.Retry
	switch {
	case r == nil:
		return nil // the job succeeded or paused meanwhile
	case !r.Tick.Equal(d.Tick) || r.Attempt != d.Attempt || s.clock.Now().Before(r.At):
		// Not the retry this timer was for (or too early): arm the one
		// the state asks for.
		return s.armRetry(ctx, id, r)
	}
	if dup, err := s.publishTick(ctx, j, r.Tick, r.Attempt, false); err != nil {
		s.report(id, r.Tick, "failed")
		return err
	} else if dup {
		s.report(id, r.Tick, "duplicate")
	} else {
		log.Debug("retry fired", zap.Time("tick", r.Tick), zap.Int("retry", r.Attempt))
		s.report(id, r.Tick, "fired")
	}
	_, err = updateState(ctx, s.states(), id, func(st *State) bool {
		if st.Retry == nil || !st.Retry.Tick.Equal(r.Tick) || st.Retry.Attempt != r.Attempt {
			return false
		}
		st.Retry = nil
		return true
	})
	return err
}

// armRetry sets the retry timer of the job for r.
func (s *Scheduler) armRetry(ctx context.Context, id string, r *RetryState) error {
	data, err := json.Marshal(timerData{Tick: r.Tick.UTC(), Attempt: r.Attempt})
	if err != nil {
		return err
	}
	return s.timers.Set(ctx, retryKey(id), r.At, data)
}

func (s *Scheduler) report(id string, tick time.Time, what string) {
	switch what {
	case "fired":
		s.stats.fired.Add(1)
	case "missed":
		s.stats.missed.Add(1)
	case "duplicate":
	default:
		s.stats.failed.Add(1)
	}
	if s.onTick != nil {
		s.onTick(TickResult{Job: id, Tick: tick, What: what, At: s.clock.Now()})
	}
}
