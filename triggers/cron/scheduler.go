package cron

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/internal/clock"
)

// Skip reasons of cron, beside agentwork's.
const (
	// ReasonMissed: the tick passed while no instance was up, or could not
	// be published (JetStream trouble) until it was too late, and the
	// job's catch-up policy did not run it.
	ReasonMissed = "missed"
	// ReasonExpired: the job's expires_at has passed.
	ReasonExpired = "expired"
	// ReasonDeleted: the job was deleted after the tick was published.
	ReasonDeleted = "deleted"
	// ReasonForbidden: a job a webhook credential's task created has
	// targets the credential's grant no longer allows (or the credential
	// is gone).
	ReasonForbidden = "forbidden"
)

// Producer is the CloudEvents source of what the scheduler publishes.
const Producer = "agentwork/cron"

// ConsumerName is the durable consumer of the cron timers' fires, shared
// by every instance.
const ConsumerName = "cron-timers"

// Backoff of a fire that failed (bus trouble): it is handed out again
// after defaultRetryBase, doubling up to defaultRetryMax.
const (
	defaultRetryBase = time.Second
	defaultRetryMax  = time.Minute
)

// opTimeout bounds one publish or write on the bus.
const opTimeout = 10 * time.Second

// Scheduler fires cron jobs. It keeps the jobs of the agentwork_jobs bucket
// (config jobs written at start, API jobs kept) and arms one timer of the
// time engine (bus.Timers) per job, key cron.<id>, due at the job's next
// tick plus its jitter; a pending retry of a failed run is the timer
// cron.<id>.retry. The timers' fires go to one durable consumer shared by
// every instance, so each fire is handled once: the handler publishes the
// ticks due since the job's last tick (catch-up policy applied; Nats-Msg-Id
// <job>:<tick>), records them in the job's state and arms the next tick. A
// fire that fails (bus trouble) is handed out again with backoff and
// worked out again from the state, so nothing is kept in memory. Its
// Policy gates and observes the runs; its API (NATS service, HTTP routes)
// manages the jobs. Safe for concurrent use.
type Scheduler struct {
	bus    *bus.Bus
	cfg    Config
	log    *zap.Logger
	clock  clock.Clock
	timers *bus.Timers

	connectors []string // the runtime's, for the targets of agent jobs (nil: not checked)
	grants     Grants   // the webhook grants, for the targets of agent jobs (nil: not checked)

	queuePoll time.Duration    // how soon a queued run looks again
	onTick    func(TickResult) // told about each tick handled
	stats     struct{ fired, missed, failed atomic.Int64 }

	retryBase, retryMax time.Duration      // backoff of a fire that failed
	stateKV             jetstream.KeyValue // test seam for the fires' state writes; nil: bus.State
	publishReq          publishFunc        // test seam for the ticks' publishes; nil: agentwork.Publish

	slots      chan struct{} // cron.concurrency: the fires at work on the bus
	queued     workGate      // fires waiting for a slot
	publishing workGate      // fires about to publish an on-time tick, or publishing it

	mu      sync.Mutex
	entries map[string]*entry    // the jobs and states, as the watches last saw them (putEntry, dropEntry)
	order   []string             // the ids of entries, sorted, for the pages of List; nil: to sort again
	inFire  map[string]*fireTurn // jobs whose timer's fire is in hand here (see firing)
	putOff  map[string]bool      // jobs whose timers to check once their fire is done
	loaded  bool                 // the watches' first values are in: changes check timers
	ready   chan struct{}
	dirty   map[string]bool   // jobs whose timers to check
	kick    chan struct{}     // dirty has work
	lastErr map[string]string // job: why its last fire here failed

	models []string // the models jobs may name; nil: any (WithModels)

	wfJobs []Job // the workflows' cron triggers (WithWorkflows)

	defined    map[string]bool         // the ids of the config's and the workflows' jobs (set in New, read-only after)
	legacy     map[string]legacyRecord // bucket records of defined jobs, written by earlier versions
	configured chan struct{}           // closed once the defined jobs are in entries
	swept      chan struct{}           // closed once the start's missing timers are armed
	fired      map[string]bool         // jobs whose fire was done here since the sweep listed the timers (nil: no sweep)
	recheck    map[string]bool         // jobs whose pending timer the sweep checks: it may be an old definition's (see rearmKey)
	rearmRev   uint64                  // the re-arm mark's revision this start read or wrote (0: none)
	starter    Starter                 // starts their runs

	ahead       time.Duration // only ticks due within this are armed (WithArmAhead)
	sweepMu     sync.Mutex    // one arming pass at a time here
	passesUntil atomic.Int64  // the latest pass this instance set or saw pending
}

// entry is one job as the watches last saw it. Both are kept by pointer
// and never changed in place (a change puts a new one): a copy of an
// entry reads them without the lock. A config job points into the
// scheduler's copy of the config's jobs, and a job that never fired has
// no state, so at 100,000 jobs an entry costs a pointer pair, not a job
// and a state (docs/BENCHMARKS.md).
type entry struct {
	job   *held  // nil while only its state has been seen
	state *State // nil: none stored
}

// st returns the entry's state (the zero State when none is stored).
func (e *entry) st() State {
	if e.state == nil {
		return State{}
	}
	return *e.state
}

// TickResult says what this instance did with one tick.
type TickResult struct {
	Job  string
	Tick time.Time
	// What is "fired", "missed" (recorded as a missed skip event; for a
	// summary of many, Tick is the oldest) or "failed" (the fire could not
	// publish it this time: it is handed out again with backoff, here or
	// on another instance, and a later result for the tick follows) or
	// "duplicate" (another fire of the tick had published it: it is
	// reported fired there).
	What string
	// At is when the instance was done with the tick (for a fired tick:
	// when JetStream acknowledged the request). At - Tick is the lateness.
	At time.Time
}

// Stats counts what this instance did with ticks.
type Stats struct {
	Fired, Missed, Failed int64
}

// Option configures a Scheduler.
type Option func(*Scheduler)

// WithLogger sets the logger (default zap.NewNop()).
func WithLogger(l *zap.Logger) Option { return func(s *Scheduler) { s.log = l } }

// WithModels sets the names of the models jobs may name (model, fallback):
// the API refuses a job that names another, and lists one as invalid.
// Default: no check (the runner fails such a job's runs, saying why).
func WithModels(names ...string) Option { return func(s *Scheduler) { s.models = names } }

// WithTickObserver sets a function told about every tick this instance
// handled (for metrics and tests). It is called from the handlers of the
// timers' fires and must not block.
func WithTickObserver(f func(TickResult)) Option { return func(s *Scheduler) { s.onTick = f } }

// WithArmAhead sets how far ahead a job's timer is armed (default
// DefaultArmAhead): a job whose next tick is further away has no timer
// until an arming pass finds it within reach.
func WithArmAhead(d time.Duration) Option { return func(s *Scheduler) { s.ahead = d } }

// WithClock sets the clock (default the system clock). Timers fire on the
// server's clock: give a running scheduler the real one.
func WithClock(c clock.Clock) Option { return func(s *Scheduler) { s.clock = c } }

// New returns a scheduler for cfg. It validates cfg and does no I/O.
func New(b *bus.Bus, cfg Config, opts ...Option) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{
		bus: b, cfg: cfg.WithDefaults(), log: zap.NewNop(), clock: clock.Real{}, timers: bus.NewTimers(b),
		queuePoll: 2 * time.Second, ahead: DefaultArmAhead, retryBase: defaultRetryBase, retryMax: defaultRetryMax,
		entries: map[string]*entry{}, inFire: map[string]*fireTurn{}, putOff: map[string]bool{}, ready: make(chan struct{}), slots: make(chan struct{}, cfg.WithDefaults().Concurrency),
		dirty: map[string]bool{}, kick: make(chan struct{}, 1), lastErr: map[string]string{},
	}
	for _, o := range opts {
		o(s)
	}
	if err := s.checkWorkflowJobs(); err != nil {
		return nil, err
	}
	s.defined, s.legacy, s.configured, s.swept = s.definedIDs(), map[string]legacyRecord{}, make(chan struct{}), make(chan struct{})
	return s, nil
}

// Started is closed once Run has loaded every job (the config's
// reconciled) and handles fires. The timers of jobs that have none (all of
// them on the first start) are armed after, soonest tick first: a job
// fires as soon as its timer is armed, without waiting for the others.
func (s *Scheduler) Started() <-chan struct{} { return s.ready }

// Armed is closed once the timers that were missing at start (all of them
// on the first start) are armed, after Started.
func (s *Scheduler) Armed() <-chan struct{} { return s.swept }

// Stats returns this instance's counters.
func (s *Scheduler) Stats() Stats {
	return Stats{Fired: s.stats.fired.Load(), Missed: s.stats.missed.Load(), Failed: s.stats.failed.Load()}
}

// Run loads the jobs, writes the config's jobs, makes sure every active
// job has its timer, handles the timers' fires (with the other instances)
// and keeps the timers in step with changes to the jobs, until ctx is done
// (the API on NATS is Service, served beside Run). It returns nil after a
// clean stop, an error when it cannot go on (a watch ended, the consumer
// was lost). Call it once per Scheduler.
func (s *Scheduler) Run(parent context.Context) error {
	w, err := bus.NewWorker(s.bus.JetStream(), bus.WorkerConfig{
		Stream: bus.StreamTimers,
		Consumer: jetstream.ConsumerConfig{
			Durable:       ConsumerName,
			Description:   "agentwork cron: the fires of the jobs' timers",
			FilterSubject: s.bus.Subjects.TimerFired("cron") + ".>",
			AckPolicy:     jetstream.AckExplicitPolicy,
			MaxDeliver:    -1,
			MaxAckPending: s.cfg.Concurrency * waitSlots,
		},
		// Fires wait for their ticks without a slot (see fireJob): many
		// more may be in hand than work at once.
		Concurrency: s.cfg.Concurrency * waitSlots,
		PullMax:     s.cfg.Concurrency * waitSlots,
		Log:         s.log,
	}, s.handle)
	if err != nil {
		return err
	}
	pw, err := bus.NewWorker(s.bus.JetStream(), bus.WorkerConfig{
		Stream: bus.StreamTimers,
		Consumer: jetstream.ConsumerConfig{
			Durable:       AheadConsumerName,
			Description:   "agentwork cron: the arming passes' timers",
			FilterSubject: s.bus.Subjects.TimerFired(aheadKind) + ".>",
			AckPolicy:     jetstream.AckExplicitPolicy,
			MaxDeliver:    -1,
		},
		Concurrency: 1,
		Log:         s.log,
	}, s.handleAhead)
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(parent)
	jobsLoaded, statesLoaded := make(chan struct{}), make(chan struct{})
	g.Go(func() error { return s.watchJobs(ctx, jobsLoaded) })
	g.Go(func() error { return s.watchStates(ctx, statesLoaded) })
	g.Go(func() error { return w.Run(ctx) })
	g.Go(func() error { return pw.Run(ctx) })
	g.Go(func() error { return s.keepArmed(ctx) })
	g.Go(func() error {
		for _, ch := range []chan struct{}{jobsLoaded, statesLoaded} {
			select {
			case <-ch:
			case <-ctx.Done():
				return nil
			}
		}
		// From now on a change to a job checks its timers, the config's
		// changes included.
		s.mu.Lock()
		s.loaded = true
		s.mu.Unlock()
		if err := s.reconcileConfig(ctx); err != nil {
			return err
		}
		s.mu.Lock()
		n := len(s.entries)
		s.mu.Unlock()
		// Ready: every job is loaded, the API answers and fires are
		// handled. Timers missing still get armed (soonest tick first),
		// each job firing as soon as its own is.
		close(s.ready)
		s.log.Info("cron scheduler started", zap.Int("jobs", n))
		start := time.Now()
		if armed, ok := s.sweep(ctx); ok {
			s.clearRearm(ctx)
			s.log.Info("cron timers armed", zap.Int("armed", armed), zap.Duration("ahead", s.ahead), zap.Duration("took", time.Since(start)))
			close(s.swept)
		}
		return nil
	})
	err = g.Wait()
	if parent.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		return nil
	}
	return err
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

// anchor is the instant after which the job's ticks count: its last tick
// handled, its resumption, or (but for one-shot jobs, whose tick counts
// even when it was already past when the job was written) the last change
// of its definition: ticks from before a change, or during a pause, were
// not wanted.
func anchor(j Job, st State) time.Time {
	var a time.Time
	if j.At == nil {
		a = j.UpdatedAt
	}
	for _, t := range []*time.Time{st.LastTick, st.ResumedAt} {
		if t != nil && t.After(a) {
			a = *t
		}
	}
	if st.Paused && st.PausedUntil != nil {
		// A pause until a time: the next tick is the first from then on.
		if u := st.PausedUntil.Add(-time.Nanosecond); u.After(a) {
			a = u
		}
	}
	return a
}

// active reports whether the job fires on its schedule at all: a pause
// that lifts itself keeps the job's timer, armed for the first tick after
// it.
func active(j Job, st State) bool {
	return j.IsEnabled() && (!st.Paused || st.PausedUntil != nil) && (j.MaxRuns == 0 || st.Fires < j.MaxRuns)
}

// nextTick returns the job's next tick after its anchor, zero when it
// will not fire on its schedule again (inactive, expired, or done).
func nextTick(j Job, sched Schedule, st State) time.Time {
	if sched == nil || !active(j, st) {
		return time.Time{}
	}
	n := sched.Next(anchor(j, st))
	if n.IsZero() || (j.ExpiresAt != nil && n.After(*j.ExpiresAt)) {
		return time.Time{}
	}
	return n
}

// maxEnumerate bounds how many missed ticks of one job are looked at after
// downtime; beyond it one summary skip event covers the rest.
const maxEnumerate = 1000

// maxScan bounds how many ticks of one job are counted after downtime
// (about 28 hours of a per-second job).
const maxScan = 100000

// batch is what one fire of a job's timer does: the ticks due since the
// job's anchor, split by its catch-up policy.
type batch struct {
	fire   []time.Time // to publish, oldest first
	late   int         // how many of fire are late: caught up
	missed []time.Time // to record as missed, oldest first
	// More missed ticks, older than those listed, counted into one summary
	// event: moreN of them from moreFrom to moreTo (moreAtLeast: too many
	// to count, moreN is a lower bound).
	moreN            int
	moreAtLeast      bool
	moreFrom, moreTo time.Time
	// last is the latest tick looked at: the job's last tick once the
	// batch is done (zero: nothing was due).
	last time.Time
	// next is the tick after last (zero: none).
	next time.Time
}

// plan collects the ticks of j due after from up to now and splits them
// per the catch-up policy: ticks older than grace are late. left bounds the
// ticks fired (max_runs; negative: no bound).
func plan(j Job, sched Schedule, from, now time.Time, grace time.Duration, left int) batch {
	var b batch
	var due []time.Time // the most recent maxEnumerate ticks
	valid := func(t time.Time) bool { return !t.IsZero() && (j.ExpiresAt == nil || !t.After(*j.ExpiresAt)) }
	tick := sched.Next(from)
	for scanned := 0; valid(tick) && !tick.After(now); scanned++ {
		if scanned == maxScan {
			// Too many to look at one by one: count the rest as one gap
			// and go on from the grace period.
			cut := now.Add(-grace - time.Second)
			b.addMore(tick, cut, 0)
			b.moreAtLeast = true
			b.last = cut
			tick = sched.Next(cut)
			continue
		}
		if len(due) == maxEnumerate {
			b.addMore(due[0], due[0], 1)
			due = due[1:]
		}
		due = append(due, tick)
		b.last = tick
		tick = sched.Next(tick)
	}
	if valid(tick) {
		b.next = tick
	}
	b.applyCatchup(j.Catchup, due, now.Add(-grace))
	if left >= 0 && left < len(b.fire) {
		b.fire = b.fire[:left]
		b.late = min(b.late, left)
	}
	return b
}

// addMore counts n ticks (from..to) into the summary of missed ticks.
func (b *batch) addMore(from, to time.Time, n int) {
	if !b.hasMore() || from.Before(b.moreFrom) {
		b.moreFrom = from
	}
	b.moreN += n
	if to.After(b.moreTo) {
		b.moreTo = to
	}
}

func (b *batch) hasMore() bool { return b.moreN > 0 || b.moreAtLeast }

// onTime reports whether the batch is nothing but ticks due within grace:
// nothing missed, nothing caught up.
func (b *batch) onTime() bool { return b.late == 0 && len(b.missed) == 0 && !b.hasMore() }

// applyCatchup splits due ticks into fired and missed per the policy c.
// Only the latest tick is on time, and only if it is not before cut (the
// grace period): an older tick due with it was overtaken by it, so it is
// late like one older than grace, and the policy decides whether it runs.
func (b *batch) applyCatchup(c Catchup, due []time.Time, cut time.Time) {
	late, onTime := due, []time.Time(nil)
	if n := len(due); n > 0 && !due[n-1].Before(cut) {
		late, onTime = due[:n-1], due[n-1:]
	}
	switch c.Policy {
	case CatchupSkip:
		b.missed = late
		late = nil
	case CatchupRunAll:
		if n := max(c.Max, 1); len(late) > n {
			b.missed = late[:len(late)-n]
			late = late[len(late)-n:]
		}
	default: // run_once: the latest late tick, unless a tick is on time
		if len(late) > 0 {
			keep := 0
			if len(onTime) == 0 {
				keep = 1
			}
			b.missed = late[:len(late)-keep]
			late = late[len(late)-keep:]
		}
	}
	b.late = len(late)
	b.fire = slices.Concat(late, onTime)
}
