package cron

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
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
	// ReasonMissed: the tick passed while no instance was up, and the job's
	// catch-up policy did not run it.
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

// Scheduler fires cron jobs: it keeps the jobs of the agentwork_jobs bucket
// (config jobs written at start, API jobs kept), computes their ticks with an
// injected clock, and publishes each tick once across all instances (a claim
// in agentwork_locks, then a publish with Nats-Msg-Id <job>:<tick>). Its
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

	mu      sync.Mutex
	entries map[string]*entry
	queue   entryHeap
	loaded  bool
	wake    chan struct{}
	ready   chan struct{}

	rechecks []recheckTick // ticks to look at again (s.mu)

	leases sync.Map // run id -> lease revision
}

// TickResult says what one instance did with one tick.
type TickResult struct {
	Job  string
	Tick time.Time
	// What is "fired", "missed", "lost" (another instance claimed it) or
	// "failed" (not published; logged).
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
		queuePoll: 2 * time.Second,
		entries:   map[string]*entry{}, wake: make(chan struct{}, 1), ready: make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Ready is closed once Run has loaded every job and started firing.
func (s *Scheduler) Ready() <-chan struct{} { return s.ready }

// Stats returns this instance's counters.
func (s *Scheduler) Stats() Stats {
	return Stats{Fired: s.stats.fired.Load(), Missed: s.stats.missed.Load(), Lost: s.stats.lost.Load(), Failed: s.stats.failed.Load()}
}

// Run loads the jobs, writes the config's jobs, serves the API on NATS and
// fires ticks until ctx is done. It returns nil after a clean stop. Call it
// once per Scheduler.
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
		for _, e := range s.entries {
			s.reschedule(e)
		}
		s.mu.Unlock()
		close(s.ready)
		s.log.Info("cron scheduler started", zap.Int("jobs", len(s.entries)))
		return s.loop(ctx, tasks)
	})
	g.Go(func() error { return s.serve(ctx) })
	err := g.Wait()
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
		s.mu.Lock()
		for s.queue.Len() > 0 && !s.queue[0].due.After(now) {
			e := s.queue[0]
			if t, ok := s.take(e, now); ok {
				batch = append(batch, t)
			}
			s.reschedule(e)
		}
		var next time.Time
		if s.queue.Len() > 0 {
			next = s.queue[0].due
		}
		keep := s.rechecks[:0]
		for _, r := range s.rechecks {
			if !r.at.After(now) {
				t := task{job: r.job, recheck: true}
				if r.retry > 0 {
					t.retry = &RetryState{Tick: r.tick, Attempt: r.retry}
				} else {
					t.fire = []time.Time{r.tick}
				}
				batch = append(batch, t)
				continue
			}
			keep = append(keep, r)
			if next.IsZero() || r.at.Before(next) {
				next = r.at
			}
		}
		s.rechecks = keep
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
	// missed ticks beyond the enumeration bound: count and range.
	moreMissed       int
	moreAtLeast      bool // too many to count: moreMissed is a lower bound
	moreFrom, moreTo time.Time
	retry            *RetryState
	next             time.Time
	recheck          bool // a tick another instance had claimed
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
		if left := e.job.MaxRuns - e.state.Fires; left < len(t.fire) {
			t.fire = t.fire[:max(left, 0)]
		}
	}
	return t, len(t.fire)+len(t.missed)+t.moreMissed > 0 || t.moreAtLeast
}

// addMore counts n ticks (from..to) into the summary of missed ticks.
func (t *task) addMore(from, to time.Time, n int) {
	if t.moreMissed == 0 && !t.moreAtLeast {
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

// recheck is a tick another instance claimed but had not published yet.
type recheckTick struct {
	job   Job
	tick  time.Time
	retry int
	at    time.Time
}

func (s *Scheduler) addRecheck(r recheckTick) {
	s.mu.Lock()
	s.rechecks = append(s.rechecks, r)
	s.mu.Unlock()
	s.poke()
}

// tickClaim is the record tick.cron.<job>.<unix> in agentwork_locks.
type tickClaim struct {
	Owner   string    `json:"owner"`
	State   string    `json:"state"` // claimed | done
	What    string    `json:"what"`  // fire | missed
	Expires time.Time `json:"expires"`
}

const claimTTL = 30 * time.Second

func tickKey(id string, tick time.Time, retry int) string {
	k := "tick.cron." + id + "." + strconv.FormatInt(tick.Unix(), 10)
	if retry > 0 {
		k += ".r" + strconv.Itoa(retry)
	}
	return k
}

// claim takes the tick for this instance. It reports false when another
// instance has it (or had it and finished); held is that instance's claim
// when it could be read.
func (s *Scheduler) claim(ctx context.Context, key, what string) (rev uint64, ok bool, held *tickClaim, err error) {
	kv := s.bus.Locks
	c := tickClaim{Owner: s.bus.Instance(), State: "claimed", What: what, Expires: s.clock.Now().Add(claimTTL)}
	data, _ := json.Marshal(c)
	rev, err = kv.Create(ctx, key, data)
	if err == nil {
		return rev, true, nil, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return 0, false, nil, fmt.Errorf("claim %s: %w", key, err)
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return 0, false, nil, nil
	}
	var old tickClaim
	if json.Unmarshal(e.Value(), &old) != nil {
		return 0, false, nil, nil
	}
	if old.State == "done" || s.clock.Now().Before(old.Expires) {
		return 0, false, &old, nil
	}
	// The holder died between claim and publish: take the tick over (the
	// publish is idempotent by its Nats-Msg-Id).
	rev, err = kv.Update(ctx, key, data, e.Revision())
	if err != nil {
		return 0, false, &old, nil
	}
	return rev, true, nil, nil
}

func (s *Scheduler) settle(ctx context.Context, key, what string, rev uint64) {
	c := tickClaim{Owner: s.bus.Instance(), State: "done", What: what}
	data, _ := json.Marshal(c)
	if _, err := s.bus.Locks.Update(ctx, key, data, rev); err != nil {
		s.log.Debug("settle tick claim", zap.String("key", key), zap.Error(err))
	}
}

func (s *Scheduler) release(ctx context.Context, key string, rev uint64) {
	_ = s.bus.Locks.Delete(ctx, key, jetstream.LastRevision(rev))
}

// handle does one task: claims each tick, publishes it or its missed
// event, and records the result in the job's state.
func (s *Scheduler) handle(ctx context.Context, t task) {
	id := t.job.ID
	log := s.log.With(zap.String("job", id))
	var fired, missed int
	var last, lastFired *time.Time
	if t.retry != nil {
		key := tickKey(id, t.retry.Tick, t.retry.Attempt)
		if s.publishTick(ctx, log, t.job, key, t.retry.Tick, t.retry.Attempt, t.recheck) {
			_, err := updateState(ctx, s.bus.State, id, func(st *State) bool {
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
	ticks := make([]struct {
		at   time.Time
		fire bool
	}, 0, len(t.fire)+len(t.missed))
	for _, f := range t.fire {
		ticks = append(ticks, struct {
			at   time.Time
			fire bool
		}{f, true})
	}
	for _, m := range t.missed {
		ticks = append(ticks, struct {
			at   time.Time
			fire bool
		}{m, false})
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].at.Before(ticks[j].at) })
	for _, tk := range ticks {
		if ctx.Err() != nil {
			return
		}
		key := tickKey(id, tk.at, 0)
		if tk.fire {
			if s.publishTick(ctx, log, t.job, key, tk.at, 0, t.recheck) {
				fired++
				last, lastFired = ptr(tk.at), ptr(s.clock.Now().UTC())
			}
			continue
		}
		if s.recordMissed(ctx, log, t.job, key, tk.at, "") {
			missed++
			last = ptr(tk.at)
		}
	}
	if t.moreMissed > 0 || t.moreAtLeast {
		key := tickKey(id, t.moreFrom, 0) + ".more"
		n := strconv.Itoa(t.moreMissed)
		if t.moreAtLeast {
			n = "more than " + strconv.Itoa(maxScan)
		}
		detail := fmt.Sprintf("%s ticks from %s to %s passed while no instance was up (catch-up policy %s)", n, t.moreFrom.UTC().Format(time.RFC3339), t.moreTo.UTC().Format(time.RFC3339), t.job.Catchup.Policy)
		if s.recordMissed(ctx, log, t.job, key, t.moreFrom, detail) {
			missed += t.moreMissed
			last = later(last, ptr(t.moreTo))
		}
	}
	if fired+missed == 0 {
		return
	}
	_, err := updateState(context.WithoutCancel(ctx), s.bus.State, id, func(st *State) bool {
		st.LastTick = later(st.LastTick, last)
		st.LastFired = later(st.LastFired, lastFired)
		st.Fires += fired
		st.Missed += missed
		switch {
		case t.recheck:
		case !t.next.IsZero():
			st.NextFire = ptr(t.next.UTC())
		default:
			st.NextFire = nil
		}
		return true
	})
	if err != nil {
		log.Warn("record tick in state", zap.Error(err))
	}
}

// publishTick claims and publishes one tick (retry > 0: a retry of it).
// A recheck (recheck true) that finds the tick done reports nothing.
func (s *Scheduler) publishTick(ctx context.Context, log *zap.Logger, j Job, key string, tick time.Time, retry int, recheck bool) bool {
	rev, ok, held, err := s.claim(ctx, key, "fire")
	if err != nil {
		log.Error("tick not fired: claim failed", zap.Time("tick", tick), zap.Error(err))
		s.report(j.ID, tick, "failed")
		return false
	}
	if !ok {
		if held != nil && held.State == "claimed" {
			// Look again once the holder's claim expires: if it died
			// before publishing, this instance fires the tick.
			s.addRecheck(recheckTick{job: j, tick: tick, retry: retry, at: held.Expires.Add(time.Second)})
		}
		if !recheck {
			s.report(j.ID, tick, "lost")
		}
		return false
	}
	req := s.request(j, tick, false)
	msgID := j.ID + ":" + tick.UTC().Format(time.RFC3339)
	if retry > 0 {
		req.Metadata[metaRetry] = strconv.Itoa(retry)
		msgID += ":retry" + strconv.Itoa(retry)
	}
	var perr error
	for attempt := range 3 {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, perr = agentwork.Publish(pctx, s.bus, req, agentwork.PublishOptions{MsgID: msgID, Producer: Producer, Now: s.clock.Now()})
		cancel()
		if perr == nil || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-s.clock.After(time.Duration(attempt+1) * 500 * time.Millisecond):
		}
	}
	if perr != nil {
		log.Error("tick not fired: publish failed; the claim is released", zap.Time("tick", tick), zap.Error(perr))
		s.release(context.WithoutCancel(ctx), key, rev)
		s.report(j.ID, tick, "failed")
		return false
	}
	s.settle(context.WithoutCancel(ctx), key, "fire", rev)
	log.Debug("tick fired", zap.Time("tick", tick), zap.Int("retry", retry))
	s.report(j.ID, tick, "fired")
	return true
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
	return agentwork.Request{
		Source: bus.SourceCron, Name: j.ID, Prompt: j.Prompt, Targets: targets, Deliver: j.Deliver,
		ScheduledAt: &at, Manual: manual, Metadata: md,
	}
}

// recordMissed claims a tick and publishes its skip event, reason missed.
func (s *Scheduler) recordMissed(ctx context.Context, log *zap.Logger, j Job, key string, tick time.Time, detail string) bool {
	rev, ok, _, err := s.claim(ctx, key, "missed")
	if err != nil || !ok {
		s.report(j.ID, tick, "lost")
		return false
	}
	at := tick.UTC()
	if detail == "" {
		detail = fmt.Sprintf("the tick of %s passed while no instance was up; catch-up policy %s did not run it", at.Format(time.RFC3339), j.Catchup.Policy)
	}
	res := agentwork.Result{Source: bus.SourceCron, Name: j.ID, Outcome: bus.OutcomeSkip, Reason: ReasonMissed, Detail: detail, ScheduledAt: &at, Metadata: j.Metadata}
	if err := s.emit(ctx, res, key); err != nil {
		log.Error("missed tick not recorded", zap.Time("tick", tick), zap.Error(err))
		s.release(context.WithoutCancel(ctx), key, rev)
		s.report(j.ID, tick, "failed")
		return false
	}
	s.settle(context.WithoutCancel(ctx), key, "missed", rev)
	s.report(j.ID, tick, "missed")
	return true
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
