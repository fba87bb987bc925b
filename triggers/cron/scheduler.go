package cron

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/internal/clock"
)

// Skip reasons of cron, beside agentwork's.
const (
	// ReasonMissed: the tick passed while no instance was up, or could not
	// be claimed or published (JetStream trouble) until it was too late,
	// and the job's catch-up policy did not run it.
	ReasonMissed = "missed"
	// ReasonExpired: the job's expires_at has passed.
	ReasonExpired = "expired"
	// ReasonDeleted: the job was deleted after the tick was published.
	ReasonDeleted = "deleted"
)

// Producer is the CloudEvents source of what the scheduler publishes.
const Producer = "agentwork/cron"

// maxEnumerate bounds how many missed ticks of one job are looked at after
// downtime; beyond it one summary skip event covers the rest.
const maxEnumerate = 1000

// maxScan bounds how many ticks of one job are counted after downtime
// (about 28 hours of a per-second job).
const maxScan = 100000

// metaRetry is the request metadata key of a retry's attempt number.
const metaRetry = "cron_retry"

// Backoff of a tick that could not be claimed or published: the first
// retry after defaultRetryBase, doubling up to defaultRetryMax.
const (
	defaultRetryBase = time.Second
	defaultRetryMax  = time.Minute
)

// opTimeout bounds one claim, publish or settle on the bus.
const opTimeout = 10 * time.Second

// Scheduler fires cron jobs: it keeps the jobs of the agentwork_jobs bucket
// (config jobs written at start, API jobs kept), computes their ticks with an
// injected clock, and publishes each tick once across all instances (a claim
// in agentwork_locks, then a publish with Nats-Msg-Id <job>:<tick>). A tick
// that cannot be claimed or published (JetStream trouble) is kept and
// retried with backoff until it is published, or until the job's catch-up
// policy would no longer run it: then it is recorded as a skip event with
// reason missed. Ticks kept are also written to the job's state, so an
// instance that starts takes up what a stopped one left waiting. Its
// Policy gates and observes the runs; its API (NATS service, HTTP routes)
// manages the jobs. Safe for concurrent use.
type Scheduler struct {
	bus   *bus.Bus
	cfg   Config
	log   *zap.Logger
	clock clock.Clock

	queuePoll time.Duration    // how soon a queued run looks again
	onTick    func(TickResult) // test hook, called after each handled tick
	stats     struct{ fired, missed, lost, failed atomic.Int64 }

	retryBase, retryMax time.Duration      // backoff of ticks put off
	lockKV              jetstream.KeyValue // test seam; nil: bus.Locks
	stateKV             jetstream.KeyValue // test seam for writes; nil: bus.State

	mu      sync.Mutex
	entries map[string]*entry
	queue   entryHeap
	loaded  bool
	wake    chan struct{}
	ready   chan struct{}

	// deferred are tasks put off: ticks this instance could not claim or
	// publish, and ticks another instance had claimed (s.mu).
	deferred []deferredTask
	// held are the tasks of each job that are put off or handed to a
	// worker, by hold id: what the job's state lists as this instance's
	// waiting ticks: kept ones (ticks that failed) always, others (ticks
	// being handled for the first time) once this instance wrote a later
	// last tick (wrote) (s.mu).
	held    map[string]map[uint64]task
	lastHID uint64
	wrote   map[string]time.Time
	// adopted are the instances whose waiting ticks of a job this one took
	// up at start: its next write of the job's state removes their lists (s.mu).
	adopted map[string][]string
}

// TickResult says what one instance did with one tick.
type TickResult struct {
	Job  string
	Tick time.Time
	// What is "fired", "missed", "lost" (another instance claimed it) or
	// "failed" (not claimed or published this time: logged, kept, written
	// to the job's state and tried again with backoff; a later result for
	// the same tick follows, on this instance or, after a restart, on the
	// next one to start).
	What string
	// At is when the instance was done with the tick (for a fired tick:
	// when JetStream acknowledged the request). At - Tick is the lateness.
	At time.Time
}

// Stats counts what this instance did with ticks.
type Stats struct {
	Fired, Missed, Lost, Failed int64
}

// Option configures a Scheduler.
type Option func(*Scheduler)

// WithLogger sets the logger (default zap.NewNop()).
func WithLogger(l *zap.Logger) Option { return func(s *Scheduler) { s.log = l } }

// WithTickObserver sets a function told about every tick this instance
// handled (for metrics and tests). It is called from the scheduler's
// workers and must not block.
func WithTickObserver(f func(TickResult)) Option { return func(s *Scheduler) { s.onTick = f } }

// WithClock sets the clock (default the system clock).
func WithClock(c clock.Clock) Option { return func(s *Scheduler) { s.clock = c } }

// New returns a scheduler for cfg. It validates cfg and does no I/O.
func New(b *bus.Bus, cfg Config, opts ...Option) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{
		bus: b, cfg: cfg.WithDefaults(), log: zap.NewNop(), clock: clock.Real{},
		queuePoll: 2 * time.Second, retryBase: defaultRetryBase, retryMax: defaultRetryMax,
		entries: map[string]*entry{}, wake: make(chan struct{}, 1), ready: make(chan struct{}),
		held: map[string]map[uint64]task{}, adopted: map[string][]string{},
	}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Started is closed once Run has loaded every job and started firing.
func (s *Scheduler) Started() <-chan struct{} { return s.ready }

// Stats returns this instance's counters.
func (s *Scheduler) Stats() Stats {
	return Stats{Fired: s.stats.fired.Load(), Missed: s.stats.missed.Load(), Lost: s.stats.lost.Load(), Failed: s.stats.failed.Load()}
}

// Run loads the jobs, writes the config's jobs, takes up the ticks that
// stopped instances left waiting and fires ticks until ctx is done (the
// API on NATS is Service, served beside Run). On its way out it writes
// the waiting ticks whose last write failed (for at most 10 seconds). It
// returns nil after a clean stop. Call it once per Scheduler.
func (s *Scheduler) Run(parent context.Context) error {
	g, ctx := errgroup.WithContext(parent)
	jobsLoaded, statesLoaded := make(chan struct{}), make(chan struct{})
	g.Go(func() error { return s.watchJobs(ctx, jobsLoaded) })
	g.Go(func() error { return s.watchStates(ctx, statesLoaded) })
	tasks := make(chan task, s.cfg.Concurrency)
	for range s.cfg.Concurrency {
		g.Go(func() error {
			for t := range tasks {
				s.handle(ctx, t)
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(tasks)
		for _, ch := range []chan struct{}{jobsLoaded, statesLoaded} {
			select {
			case <-ch:
			case <-ctx.Done():
				return nil
			}
		}
		if err := s.reconcileConfig(ctx); err != nil {
			return err
		}
		s.mu.Lock()
		s.loaded = true
		now := s.clock.Now()
		for _, e := range s.entries {
			s.adopt(e, now)
			s.reschedule(e)
		}
		s.mu.Unlock()
		close(s.ready)
		s.log.Info("cron scheduler started", zap.Int("jobs", len(s.entries)))
		return s.loop(ctx, tasks)
	})
	err := g.Wait()
	s.flush(context.WithoutCancel(parent))
	if parent.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		return nil
	}
	return err
}

// entry is one job as this instance schedules it.
type entry struct {
	job   Job
	sched Schedule // nil: unusable definition (logged)
	state State
	// cursor is the latest tick this instance handed to a worker: ticks up
	// to it are not handed out again before the state says so.
	cursor time.Time
	// retryDone is the retry this instance already handed out.
	retryDone RetryState
	next      time.Time // next tick to handle
	due       time.Time // when to act: next + jitter, or a retry's time
	retry     bool      // due is for state.Retry
	index     int       // in queue; -1 when not queued
}

func (e *entry) anchor() time.Time {
	a := e.job.UpdatedAt
	for _, t := range []*time.Time{e.state.LastTick, e.state.ResumedAt} {
		if t != nil && t.After(a) {
			a = *t
		}
	}
	if e.cursor.After(a) {
		a = e.cursor
	}
	return a
}

// active reports whether the job fires on its schedule at all.
func (e *entry) active() bool {
	j := &e.job
	return e.sched != nil && j.IsEnabled() && !e.state.Paused && (j.MaxRuns == 0 || e.state.Fires < j.MaxRuns)
}

// reschedule recomputes e's next tick and its place in the queue. s.mu held.
func (s *Scheduler) reschedule(e *entry) {
	e.next, e.due, e.retry = time.Time{}, time.Time{}, false
	if s.loaded && e.active() {
		if n := e.sched.Next(e.anchor()); !n.IsZero() && (e.job.ExpiresAt == nil || !n.After(*e.job.ExpiresAt)) {
			e.next, e.due = n, n.Add(jitter(e.job.ID, n, time.Duration(e.job.Jitter)))
		}
		if r := e.state.Retry; r != nil && *r != e.retryDone && (e.due.IsZero() || r.At.Before(e.due)) {
			e.due, e.retry = r.At, true
		}
	}
	switch {
	case e.due.IsZero() && e.index >= 0:
		heap.Remove(&s.queue, e.index)
	case !e.due.IsZero() && e.index >= 0:
		heap.Fix(&s.queue, e.index)
	case !e.due.IsZero():
		heap.Push(&s.queue, e)
	}
	s.poke()
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// jitter is a delay in [0, max) that every instance computes alike.
func jitter(id string, tick time.Time, max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	_, _ = h.Write([]byte(strconv.FormatInt(tick.Unix(), 10)))
	return time.Duration(h.Sum64() % uint64(max))
}

// loop waits for the earliest due entry and hands its ticks to workers.
func (s *Scheduler) loop(ctx context.Context, tasks chan<- task) error {
	timer := s.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := s.clock.Now()
		var batch []task
		var next time.Time
		s.mu.Lock()
		// Ticks put off first: they are older than what is due now.
		keep := s.deferred[:0]
		for _, d := range s.deferred {
			if !d.at.After(now) {
				if t, ok := s.revisit(d.t, now); ok {
					s.hold(&t) // in flight now, as revisit left it
					batch = append(batch, t)
				} else {
					s.unhold(d.t)
				}
				continue
			}
			keep = append(keep, d)
			if next.IsZero() || d.at.Before(next) {
				next = d.at
			}
		}
		clear(s.deferred[len(keep):])
		s.deferred = keep
		for s.queue.Len() > 0 && !s.queue[0].due.After(now) {
			e := s.queue[0]
			if t, ok := s.take(e, now); ok {
				s.track(&t)
				batch = append(batch, t)
			}
			s.reschedule(e)
		}
		if s.queue.Len() > 0 && (next.IsZero() || s.queue[0].due.Before(next)) {
			next = s.queue[0].due
		}
		s.mu.Unlock()
		for _, t := range batch {
			select {
			case tasks <- t:
			case <-ctx.Done():
				return nil
			}
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = next.Sub(s.clock.Now())
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
		case <-s.wake:
		}
	}
}

// task is the work for one job that the loop hands to a worker: ticks to
// fire and ticks to record as missed, in order.
type task struct {
	job    Job
	fire   []time.Time
	missed []time.Time
	// stale are ticks that could not be published until the catch-up
	// policy no longer ran them: recorded as missed, with cause.
	stale []time.Time
	// missed ticks beyond the enumeration bound: count and range.
	moreMissed       int
	moreAtLeast      bool // too many to count: moreMissed is a lower bound
	moreFrom, moreTo time.Time
	moreCause        string // some of them could not be published: why
	retry            *RetryState
	next             time.Time
	// again: the task was put off before (its next is stale); recheck: its
	// tick was reported lost to another instance already.
	again, recheck bool
	failures       int    // attempts in a row that failed
	cause          string // the last failure
	// kept: its ticks failed before and are held (listed in the job's
	// state) until published or recorded; hid is its id in s.held.
	kept bool
	hid  uint64
}

// take collects what is due of e at now and moves e's cursor. s.mu held.
func (s *Scheduler) take(e *entry, now time.Time) (task, bool) {
	t := task{job: e.job}
	if e.retry {
		r := *e.state.Retry
		e.retryDone = r
		t.retry = &r
		return t, true
	}
	// due keeps the most recent maxEnumerate ticks; older ones are counted
	// into one summary (they are late whatever the policy).
	var due []time.Time
	tick := e.next
	for scanned := 0; !tick.IsZero() && !tick.After(now) && (e.job.ExpiresAt == nil || !tick.After(*e.job.ExpiresAt)); scanned++ {
		if scanned == maxScan {
			// Too many to look at one by one: count the rest as one gap
			// and go on from the grace period.
			from := now.Add(-s.cfg.Grace - time.Second)
			t.addMore(tick, from, 0)
			t.moreAtLeast = true
			e.cursor = from
			tick = e.sched.Next(from)
			continue
		}
		if len(due) == maxEnumerate {
			t.addMore(due[0], due[0], 1)
			due = due[1:]
		}
		due = append(due, tick)
		e.cursor = tick
		tick = e.sched.Next(tick)
	}
	t.next = tick
	s.applyCatchup(&t, due, now)
	if e.job.MaxRuns > 0 {
		// Ticks put off still count: they fire once the bus is back.
		if left := e.job.MaxRuns - e.state.Fires - s.deferredFires(e.job.ID); left < len(t.fire) {
			t.fire = t.fire[:max(left, 0)]
		}
	}
	return t, len(t.fire)+len(t.missed)+t.moreMissed > 0 || t.moreAtLeast
}

// deferredFires counts the ticks of job id this instance failed to fire
// and will try again. s.mu held.
func (s *Scheduler) deferredFires(id string) int {
	n := 0
	for _, d := range s.deferred {
		if d.t.job.ID == id && d.t.retry == nil && d.t.failures > 0 {
			n += len(d.t.fire)
		}
	}
	return n
}

// addMore counts n ticks (from..to) into the summary of missed ticks.
func (t *task) addMore(from, to time.Time, n int) {
	if (t.moreMissed == 0 && !t.moreAtLeast) || from.Before(t.moreFrom) {
		t.moreFrom = from
	}
	t.moreMissed += n
	if to.After(t.moreTo) {
		t.moreTo = to
	}
}

// applyCatchup splits due ticks into fired and missed per the job's policy:
// ticks older than the grace period are late.
func (s *Scheduler) applyCatchup(t *task, due []time.Time, now time.Time) {
	cut := now.Add(-s.cfg.Grace)
	var late, onTime []time.Time
	for _, d := range due {
		if d.Before(cut) {
			late = append(late, d)
		} else {
			onTime = append(onTime, d)
		}
	}
	t.fire = onTime
	switch t.job.Catchup.Policy {
	case CatchupSkip:
		t.missed = late
	case CatchupRunAll:
		n := max(t.job.Catchup.Max, 1)
		if len(late) > n {
			t.missed = late[:len(late)-n]
			late = late[len(late)-n:]
		}
		t.fire = append(late, onTime...)
	default: // run_once
		if len(late) > 0 && len(onTime) == 0 {
			t.fire = late[len(late)-1:]
			late = late[:len(late)-1]
		}
		t.missed = late
	}
}

// deferredTask is a task put off until at.
type deferredTask struct {
	t  task
	at time.Time
}

// putOff ends the task t came from (t.hid) and keeps t, what is left of
// it after err, to try it again with backoff; its ticks stay held, so the
// job's state lists them until they are published or recorded as missed.
// When the scheduler is stopping, t is not tried again but stays held, so
// the last write of the job's state keeps it for the next start.
func (s *Scheduler) putOff(ctx context.Context, log *zap.Logger, t task, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unhold(t)
	t.hid = 0
	if t.retry == nil && len(t.fire)+len(t.missed)+len(t.stale) == 0 && !t.hasMore() {
		return // all done
	}
	// A job's retry is not a tick: its state keeps it (State.Retry).
	t.kept = t.retry == nil
	if ctx.Err() != nil {
		if t.kept {
			if t.cause == "" {
				t.cause = "the instance stopped before it was done"
			}
			s.hold(&t)
		}
		return
	}
	if err == nil {
		err = errors.New("the task ended before its ticks were done")
	}
	t.failures++
	t.cause = err.Error()
	wait := s.retryMax
	if n := t.failures - 1; n < 30 {
		wait = min(s.retryBase<<n, s.retryMax)
	}
	first, n := t.span()
	log.Warn("tick not fired yet (bus trouble?); kept and tried again", zap.Time("tick", first), zap.Int("ticks", n),
		zap.Int("failures", t.failures), zap.Duration("retry_in", wait), zap.Error(err))
	s.addDeferredLocked(t, s.clock.Now().Add(wait))
}

// hold records t as in s.held (when kept), giving it a hold id if it has
// none. s.mu held.
func (s *Scheduler) hold(t *task) {
	if t.kept {
		s.track(t)
	}
}

// track records t, a task being handed to a worker, in s.held. s.mu held.
func (s *Scheduler) track(t *task) {
	if t.retry != nil {
		return
	}
	if t.hid == 0 {
		s.lastHID++
		t.hid = s.lastHID
	}
	if s.held == nil {
		s.held = map[string]map[uint64]task{}
	}
	m := s.held[t.job.ID]
	if m == nil {
		m = map[uint64]task{}
		s.held[t.job.ID] = m
	}
	m[t.hid] = *t
}

// unhold forgets t in s.held: it is done, or replaced. s.mu held.
func (s *Scheduler) unhold(t task) {
	if m := s.held[t.job.ID]; m != nil && t.hid != 0 {
		delete(m, t.hid)
		if len(m) == 0 {
			delete(s.held, t.job.ID)
		}
	}
}

// recheckLater looks at one's tick again once another instance's claim on
// it has expired: if that instance died before publishing, this one takes
// the tick over.
func (s *Scheduler) recheckLater(one task, held *tickClaim) {
	one.recheck, one.failures, one.cause = true, 0, ""
	s.addDeferred(one, held.Expires.Add(time.Second))
}

// addDeferred queues t until at.
func (s *Scheduler) addDeferred(t task, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addDeferredLocked(t, at)
}

// addDeferredLocked queues t until at. The failed ticks of a job are kept
// as one task on its backoff, so an outage costs one attempt per job per
// backoff step (beside each new tick's own) however many ticks pass
// meanwhile. s.mu held.
func (s *Scheduler) addDeferredLocked(t task, at time.Time) {
	defer s.poke()
	t.hid = 0 // a new hold, or merged into one
	if t.failures > 0 && t.retry == nil {
		for i := range s.deferred {
			d := &s.deferred[i]
			if d.t.job.ID == t.job.ID && d.t.failures > 0 && d.t.retry == nil && d.t.recheck == t.recheck {
				d.t.merge(t)
				s.hold(&d.t)
				return
			}
		}
	}
	s.hold(&t)
	s.deferred = append(s.deferred, deferredTask{t: t, at: at})
}

// hurry brings the failed ticks of job id forward to now: one of its
// ticks was just published or recorded, so the bus is back.
func (s *Scheduler) hurry(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for i := range s.deferred {
		if d := &s.deferred[i]; d.t.job.ID == id && d.t.failures > 0 && d.at.After(now) {
			d.at = now
			s.poke()
		}
	}
}

// revisit prepares a task put off for another attempt at now: ticks the
// job's catch-up policy would no longer run become stale (recorded as
// missed). It reports false when nothing is left to do. s.mu held.
func (s *Scheduler) revisit(t task, now time.Time) (task, bool) {
	t.again = true
	e := s.entries[t.job.ID]
	if t.retry != nil {
		// A retry is wanted while the job's state asks for it: a later
		// success clears it, a later failure replaces it.
		if r := t.retry; e == nil || e.state.Retry == nil || !e.state.Retry.Tick.Equal(r.Tick) || e.state.Retry.Attempt != r.Attempt {
			s.log.Info("retry of a failed tick no longer pending; not published", zap.String("job", t.job.ID), zap.Time("tick", r.Tick), zap.Int("retry", r.Attempt))
			return t, false
		}
		return t, true
	}
	if t.recheck && t.failures == 0 {
		// Another instance's expired claim: its holder may have published
		// before it died, so fire (a duplicate of its Nats-Msg-Id is
		// dropped) rather than record the tick as missed.
		return t, true
	}
	sched := Schedule(nil)
	if e != nil && e.sched != nil && e.job.UpdatedAt.Equal(t.job.UpdatedAt) {
		sched = e.sched
	} else if sc, err := t.job.Sched(); err == nil {
		sched = sc
	}
	var fire []time.Time
	for _, f := range t.fire {
		if sched != nil && s.stillRuns(t.job, sched, f, now) {
			fire = append(fire, f)
		} else {
			t.stale = append(t.stale, f)
		}
	}
	t.fire = fire
	if e != nil && t.job.MaxRuns > 0 {
		if left := max(t.job.MaxRuns-e.state.Fires, 0); left < len(t.fire) {
			s.log.Info("ticks put off not fired: the job reached max_runs", zap.String("job", t.job.ID), zap.Int("ticks", len(t.fire)-left))
			t.fire = t.fire[:left]
		}
	}
	slices.SortFunc(t.stale, time.Time.Compare)
	t.fold()
	return t, len(t.fire)+len(t.missed)+len(t.stale) > 0 || t.hasMore()
}

// stillRuns reports whether j's catch-up policy would still run tick at
// now: on time (within the grace period) always; late, as applyCatchup
// decides given the ticks that followed it.
func (s *Scheduler) stillRuns(j Job, sched Schedule, tick, now time.Time) bool {
	cut := now.Add(-s.cfg.Grace)
	if !tick.Before(cut) {
		return true
	}
	valid := func(n time.Time) bool { return !n.IsZero() && (j.ExpiresAt == nil || !n.After(*j.ExpiresAt)) }
	switch j.Catchup.Policy {
	case CatchupSkip:
		return false
	case CatchupRunAll:
		// Runs the newest Max late ticks.
		n, later := sched.Next(tick), 0
		for ; valid(n) && n.Before(cut); n = sched.Next(n) {
			if later++; later >= max(j.Catchup.Max, 1) {
				return false
			}
		}
		return true
	default: // run_once: the newest tick, when no later one is due
		n := sched.Next(tick)
		return !valid(n) || n.After(now)
	}
}

// merge adds o's ticks to t.
func (t *task) merge(o task) {
	t.fire = mergeTimes(t.fire, o.fire)
	t.missed = mergeTimes(t.missed, o.missed)
	t.stale = mergeTimes(t.stale, o.stale)
	if o.hasMore() {
		t.addMore(o.moreFrom, o.moreTo, o.moreMissed)
		t.moreAtLeast = t.moreAtLeast || o.moreAtLeast
		if o.moreCause != "" {
			t.moreCause = o.moreCause
		}
	}
	if o.job.UpdatedAt.After(t.job.UpdatedAt) {
		t.job = o.job
	}
	t.failures, t.cause = max(t.failures, o.failures), o.cause
	t.kept = t.kept || o.kept
}

// mergeTimes returns the sorted union of a and b.
func mergeTimes(a, b []time.Time) []time.Time {
	out := slices.Concat(a, b)
	slices.SortFunc(out, time.Time.Compare)
	return slices.CompactFunc(out, time.Time.Equal)
}

// fold keeps at most maxEnumerate missed and stale ticks listed; older
// ones are counted into the summary.
func (t *task) fold() {
	for len(t.missed)+len(t.stale) > maxEnumerate {
		if len(t.stale) == 0 || (len(t.missed) > 0 && t.missed[0].Before(t.stale[0])) {
			t.addMore(t.missed[0], t.missed[0], 1)
			t.missed = t.missed[1:]
			continue
		}
		t.addMore(t.stale[0], t.stale[0], 1)
		t.moreCause = t.cause
		t.stale = t.stale[1:]
	}
}

func (t *task) hasMore() bool { return t.moreMissed > 0 || t.moreAtLeast }

// span returns t's first tick and how many ticks it has (for logs).
func (t *task) span() (time.Time, int) {
	if t.retry != nil {
		return t.retry.Tick, 1
	}
	var first time.Time
	for _, l := range [][]time.Time{t.fire, t.missed, t.stale, {t.moreFrom}} {
		if len(l) > 0 && !l[0].IsZero() && (first.IsZero() || l[0].Before(first)) {
			first = l[0]
		}
	}
	return first, len(t.fire) + len(t.missed) + len(t.stale) + t.moreMissed
}

// tickClaim is the record tick.cron.<job>.<unix> in agentwork_locks.
type tickClaim struct {
	State string `json:"state"` // claimed | done
	What  string `json:"what"`  // fire | missed
	bus.Lease
}

const claimTTL = 30 * time.Second

func tickKey(id string, tick time.Time, retry int) string {
	k := "tick.cron." + id + "." + strconv.FormatInt(tick.Unix(), 10)
	if retry > 0 {
		k += ".r" + strconv.Itoa(retry)
	}
	return k
}

func (s *Scheduler) locks() jetstream.KeyValue {
	if s.lockKV != nil {
		return s.lockKV
	}
	return s.bus.Locks
}

// claim takes the tick for this instance: mine is the claim written at
// rev. It returns a nil mine when another instance has it (or had it and
// finished); held is then that instance's claim. An error means it could
// not tell (the bus failed): try again later.
func (s *Scheduler) claim(ctx context.Context, key, what string) (mine *tickClaim, rev uint64, held *tickClaim, err error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	now := s.clock.Now()
	c := tickClaim{State: "claimed", What: what, Lease: s.bus.NewLease(now.Add(claimTTL))}
	took := true // unless the create conflicts
	take := func(old *tickClaim, found bool) (bool, error) {
		took, held = false, nil
		if found && (old.State == "done" || s.bus.Held(old.Lease, now)) {
			h := *old
			held = &h
			return false, nil
		}
		// Released since, or the holder died between claim and publish:
		// take the tick over (the publish is idempotent by its Nats-Msg-Id).
		*old, took = c, true
		return true, nil
	}
	_, rev, err = bus.UpdateAt(ctx, s.locks(), key, c, 0, take)
	var corrupt *bus.CorruptError
	if errors.As(err, &corrupt) {
		// No instance writes this: nobody holds the tick.
		s.log.Warn("tick claim is not valid JSON; taken over", zap.String("key", key), zap.Error(err))
		took = true
		_, rev, err = bus.UpdateAt(ctx, s.locks(), key, c, corrupt.Revision, take)
	}
	switch {
	case bus.IsConflict(err):
		return nil, 0, nil, fmt.Errorf("claim %s: changed by other instances again and again: %w", key, err)
	case err != nil:
		return nil, 0, nil, fmt.Errorf("claim %s: %w", key, err)
	case !took:
		return nil, 0, held, nil
	}
	return &c, rev, nil, nil
}

// settle records the tick done, unless the claim was taken over meanwhile.
func (s *Scheduler) settle(ctx context.Context, key string, mine tickClaim, rev uint64) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	done := tickClaim{State: "done", What: mine.What, Lease: bus.Lease{Owner: mine.Owner, Token: mine.Token}}
	if _, _, err := bus.UpdateAt(ctx, s.locks(), key, done, rev, func(c *tickClaim, found bool) (bool, error) {
		if !found || c.Token != mine.Token {
			return false, nil
		}
		*c = done
		return true, nil
	}); err != nil {
		// The claim expires; the Nats-Msg-Id (or the event's id) keeps a
		// second publish by a taking-over instance a duplicate.
		s.log.Debug("settle tick claim", zap.String("key", key), zap.Error(err))
	}
}

func (s *Scheduler) release(ctx context.Context, key string, mine tickClaim, rev uint64) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	_ = bus.Release(ctx, s.locks(), key, mine.Token, rev)
}

// tickItem is one tick of a task: to fire, missed, or stale.
type tickItem struct {
	at   time.Time
	kind int
}

const (
	kindFire = iota
	kindMissed
	kindStale
)

// items returns t's ticks in order.
func (t *task) items() []tickItem {
	out := make([]tickItem, 0, len(t.fire)+len(t.missed)+len(t.stale))
	for kind, l := range [][]time.Time{kindFire: t.fire, kindMissed: t.missed, kindStale: t.stale} {
		for _, at := range l {
			out = append(out, tickItem{at, kind})
		}
	}
	slices.SortStableFunc(out, func(a, b tickItem) int { return a.at.Compare(b.at) })
	return out
}

// with returns t carrying only items (and its summary when more is true).
func (t task) with(items []tickItem, more bool) task {
	t.fire, t.missed, t.stale = nil, nil, nil
	for _, it := range items {
		switch it.kind {
		case kindFire:
			t.fire = append(t.fire, it.at)
		case kindMissed:
			t.missed = append(t.missed, it.at)
		default:
			t.stale = append(t.stale, it.at)
		}
	}
	if !more {
		t.moreMissed, t.moreAtLeast, t.moreFrom, t.moreTo, t.moreCause = 0, false, time.Time{}, time.Time{}, ""
	}
	return t
}

// handle does one task: claims each tick, publishes it or its missed
// event, and records the result in the job's state. What fails is put off
// and tried again.
func (s *Scheduler) handle(ctx context.Context, t task) {
	id := t.job.ID
	log := s.log.With(zap.String("job", id))
	if t.retry != nil {
		key := tickKey(id, t.retry.Tick, t.retry.Attempt)
		ok, err := s.publishTick(ctx, log, t, key, t.retry.Tick, t.retry.Attempt)
		if err != nil {
			s.putOff(ctx, log, t, err)
			return
		}
		if ok {
			_, err := updateState(context.WithoutCancel(ctx), s.states(), id, func(st *State) bool {
				if st.Retry == nil || !st.Retry.Tick.Equal(t.retry.Tick) || st.Retry.Attempt != t.retry.Attempt {
					return false
				}
				st.Retry = nil
				return true
			})
			if err != nil {
				log.Warn("clear retry", zap.Error(err))
			}
		}
		return
	}
	var fired, missed int
	var last, lastFired *time.Time
	var resolved []time.Time // fired or recorded as missed here
	items := t.items()
	var err error
	done := 0
	for _, it := range items {
		if ctx.Err() != nil {
			break
		}
		one := t.with([]tickItem{it}, false)
		key := tickKey(id, it.at, 0)
		var ok bool
		switch it.kind {
		case kindFire:
			if ok, err = s.publishTick(ctx, log, one, key, it.at, 0); ok {
				fired++
				resolved = append(resolved, it.at)
				last, lastFired = later(last, ptr(it.at)), ptr(s.clock.Now().UTC())
			}
		default:
			if ok, err = s.recordMissed(ctx, log, one, key, it.at, t.missedDetail(it)); ok {
				missed++
				resolved = append(resolved, it.at)
				last = later(last, ptr(it.at))
			}
		}
		if err != nil {
			break
		}
		done++
	}
	moreDone := !t.hasMore()
	if err == nil && ctx.Err() == nil && t.hasMore() {
		key := tickKey(id, t.moreFrom, 0) + ".more"
		var ok bool
		if ok, err = s.recordMissed(ctx, log, t.with(nil, true), key, t.moreFrom, t.moreDetail()); ok {
			missed += t.moreMissed
			last = later(last, ptr(t.moreTo))
		}
		moreDone = err == nil
	}
	// What is left (after an error, or cut short by a stop) stays held.
	s.putOff(ctx, log, t.with(items[done:], !moreDone), err)
	if err == nil && fired+missed > 0 {
		s.hurry(id)
	}
	var progress func(*State) bool
	if fired+missed > 0 {
		progress = func(st *State) bool {
			st.LastTick = later(st.LastTick, last)
			st.LastFired = later(st.LastFired, lastFired)
			st.Fires += fired
			st.Missed += missed
			switch {
			case t.again:
			case !t.next.IsZero():
				st.NextFire = ptr(t.next.UTC())
			default:
				st.NextFire = nil
			}
			return true
		}
	}
	// One write: the progress, and the job's waiting ticks as they are
	// now (with what just failed, without what was just done).
	if err := s.save(context.WithoutCancel(ctx), id, progress, resolved); err != nil {
		if progress != nil {
			log.Warn("record tick in state", zap.Error(err))
		} else {
			log.Debug("write waiting ticks to state; written with the next write that succeeds", zap.Error(err))
		}
	}
}

// missedDetail is the detail of the missed event of a missed or stale tick.
func (t *task) missedDetail(it tickItem) string {
	at := it.at.UTC().Format(time.RFC3339)
	if it.kind == kindStale {
		return fmt.Sprintf("the tick of %s could not be published (last error: %s) until catch-up policy %s no longer ran it", at, t.cause, t.job.Catchup.Policy)
	}
	return fmt.Sprintf("the tick of %s passed while no instance was up; catch-up policy %s did not run it", at, t.job.Catchup.Policy)
}

// moreDetail is the detail of the summary of missed ticks.
func (t *task) moreDetail() string {
	n := strconv.Itoa(t.moreMissed)
	if t.moreAtLeast {
		n = "more than " + strconv.Itoa(maxScan)
	}
	from, to := t.moreFrom.UTC().Format(time.RFC3339), t.moreTo.UTC().Format(time.RFC3339)
	if t.moreCause != "" {
		return fmt.Sprintf("%s ticks from %s to %s passed while no instance was up or could not be published (last error: %s); catch-up policy %s did not run them", n, from, to, t.moreCause, t.job.Catchup.Policy)
	}
	return fmt.Sprintf("%s ticks from %s to %s passed while no instance was up (catch-up policy %s)", n, from, to, t.job.Catchup.Policy)
}

// publishTick claims and publishes the tick of one (retry > 0: a retry of
// it). It reports whether this instance published it. Another instance's
// claim is looked at again when it expires; an error (bus trouble) means
// the tick is to be tried again.
func (s *Scheduler) publishTick(ctx context.Context, log *zap.Logger, one task, key string, tick time.Time, retry int) (bool, error) {
	j := one.job
	mine, rev, held, err := s.claim(ctx, key, "fire")
	if err != nil {
		s.failed(ctx, j.ID, tick)
		return false, err
	}
	if mine == nil {
		if held != nil && held.State == "claimed" {
			s.recheckLater(one, held)
		}
		if !one.recheck {
			s.report(j.ID, tick, "lost")
		}
		return false, nil
	}
	req := s.request(j, tick, false)
	msgID := j.ID + ":" + tick.UTC().Format(time.RFC3339)
	if retry > 0 {
		req.Metadata[metaRetry] = strconv.Itoa(retry)
		msgID += ":retry" + strconv.Itoa(retry)
	}
	pctx, cancel := context.WithTimeout(ctx, opTimeout)
	_, err = agentwork.Publish(pctx, s.bus, req, agentwork.PublishOptions{MsgID: msgID, Producer: Producer, Now: s.clock.Now()})
	cancel()
	if err != nil {
		// Released, so another instance may fire it meanwhile; a publish
		// that did land is deduplicated by its Nats-Msg-Id.
		s.release(context.WithoutCancel(ctx), key, *mine, rev)
		s.failed(ctx, j.ID, tick)
		return false, fmt.Errorf("publish: %w", err)
	}
	s.settle(context.WithoutCancel(ctx), key, *mine, rev)
	log.Debug("tick fired", zap.Time("tick", tick), zap.Int("retry", retry), zap.Bool("put_off", one.again))
	s.report(j.ID, tick, "fired")
	return true, nil
}

// failed reports an attempt that failed, unless the scheduler is stopping.
func (s *Scheduler) failed(ctx context.Context, id string, tick time.Time) {
	if ctx.Err() == nil {
		s.report(id, tick, "failed")
	}
}

// request builds the request of a tick of j.
func (s *Scheduler) request(j Job, tick time.Time, manual bool) agentwork.Request {
	at := tick.UTC()
	md := make(map[string]string, len(j.Metadata)+1)
	for k, v := range j.Metadata {
		md[k] = v
	}
	targets := j.Targets
	if len(targets) == 0 {
		targets = s.cfg.Targets
	}
	req := agentwork.Request{
		Source: bus.SourceCron, Name: j.ID, Prompt: j.Prompt, Targets: targets, Deliver: j.Deliver,
		ScheduledAt: &at, Manual: manual, Metadata: md,
	}
	if j.DedupWindow > 0 {
		req.DedupWindow = j.DedupWindow.String()
	}
	return req
}

// recordMissed claims a tick and publishes its skip event, reason missed.
// It reports whether this instance recorded it; an error (bus trouble)
// means it is to be tried again.
func (s *Scheduler) recordMissed(ctx context.Context, log *zap.Logger, one task, key string, tick time.Time, detail string) (bool, error) {
	j := one.job
	mine, rev, held, err := s.claim(ctx, key, "missed")
	if err != nil {
		s.failed(ctx, j.ID, tick)
		return false, err
	}
	if mine == nil {
		if held != nil && held.State == "claimed" {
			s.recheckLater(one, held)
		}
		if !one.recheck {
			s.report(j.ID, tick, "lost")
		}
		return false, nil
	}
	at := tick.UTC()
	res := agentwork.Result{Source: bus.SourceCron, Name: j.ID, Outcome: bus.OutcomeSkip, Reason: ReasonMissed, Detail: detail, ScheduledAt: &at, Metadata: j.Metadata}
	if err := s.emit(ctx, res, key); err != nil {
		s.release(context.WithoutCancel(ctx), key, *mine, rev)
		s.failed(ctx, j.ID, tick)
		return false, fmt.Errorf("record missed tick: %w", err)
	}
	s.settle(context.WithoutCancel(ctx), key, *mine, rev)
	log.Debug("tick missed", zap.Time("tick", tick), zap.String("detail", detail))
	s.report(j.ID, tick, "missed")
	return true, nil
}

// emit publishes a cron event (the runner's envelope style).
func (s *Scheduler) emit(ctx context.Context, res agentwork.Result, msgID string) error {
	ev, err := bus.NewEvent(Producer, bus.TypeOf(bus.SourceCron, res.Outcome), res.Name, s.clock.Now(), res)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = s.bus.Publish(pctx, s.bus.Subjects.Event(bus.SourceCron, res.Outcome), ev, msgID)
	return err
}

func (s *Scheduler) report(id string, tick time.Time, what string) {
	switch what {
	case "fired":
		s.stats.fired.Add(1)
	case "missed":
		s.stats.missed.Add(1)
	case "lost":
		s.stats.lost.Add(1)
	default:
		s.stats.failed.Add(1)
	}
	if s.onTick != nil {
		s.onTick(TickResult{Job: id, Tick: tick, What: what, At: s.clock.Now()})
	}
}

// entryHeap orders entries by due time.
type entryHeap []*entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*h = old[:len(old)-1]
	return e
}
