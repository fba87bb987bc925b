package cron

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
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
	w, err := s.bus.Jobs.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("cron: watch jobs: %w", err)
	}
	defer func() { _ = w.Stop() }()
	initial := true
	// Drain until the watcher closes (on ctx end): its callback must never
	// block on a full channel.
	for u := range w.Updates() {
		if ctx.Err() != nil {
			continue
		}
		if u == nil {
			if initial {
				initial = false
				close(loaded)
			}
			continue
		}
		id := u.Key()
		if u.Operation() != jetstream.KeyValuePut {
			s.mu.Lock()
			if _, ok := s.entries[id]; ok {
				delete(s.entries, id)
				s.markDirty(id)
			}
			s.mu.Unlock()
			continue
		}
		var j Job
		if err := json.Unmarshal(u.Value(), &j); err != nil {
			s.log.Error("job in the jobs bucket is not valid JSON; ignored", zap.String("job", id), zap.Error(err))
			continue
		}
		s.setJob(j)
	}
	if ctx.Err() == nil {
		return errors.New("cron: the jobs watch ended unexpectedly (connection closed?)")
	}
	return nil
}

// setJob puts j into the cache; a new or changed definition has its timer
// checked.
func (s *Scheduler) setJob(j Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[j.ID]
	if !ok {
		e = &entry{}
		s.entries[j.ID] = e
	}
	if e.job.ID == "" || !e.job.UpdatedAt.Equal(j.UpdatedAt) {
		s.markDirty(j.ID)
	}
	e.job = j
}

// watchStates follows the cron.* keys of the state bucket: what the fires
// and runs recorded, pauses, pending retries. A pause, a resumption or a
// new retry has the job's timers checked.
func (s *Scheduler) watchStates(ctx context.Context, loaded chan<- struct{}) error {
	w, err := s.bus.State.Watch(ctx, "cron.*")
	if err != nil {
		return fmt.Errorf("cron: watch state: %w", err)
	}
	defer func() { _ = w.Stop() }()
	initial := true
	for u := range w.Updates() {
		if ctx.Err() != nil {
			continue
		}
		if u == nil {
			if initial {
				initial = false
				close(loaded)
			}
			continue
		}
		id, ok := idFromStateKey(u.Key())
		if !ok {
			continue
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
			s.entries[id] = &entry{state: st}
		case u.Operation() != jetstream.KeyValuePut && e.job.ID == "":
			delete(s.entries, id) // the state of a deleted job
		default:
			old := e.state
			e.state = st
			if old.Paused != st.Paused || !sameTime(old.ResumedAt, st.ResumedAt) || (st.Retry != nil && !st.Retry.same(old.Retry)) {
				s.markDirty(id)
			}
		}
		s.mu.Unlock()
	}
	if ctx.Err() == nil {
		return errors.New("cron: the state watch ended unexpectedly (connection closed?)")
	}
	return nil
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
	if s.inFire[id] > 0 {
		// A fire here is at work on it: check once it is done.
		s.putOff[id] = true
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	if !ok || cp.job.ID == "" {
		// Deleted: its timers go too (a fire that comes anyway finds no job).
		return errors.Join(s.timers.Cancel(ctx, timerKey(id)), s.timers.Cancel(ctx, retryKey(id)))
	}
	sched, err := cp.job.Sched()
	if err != nil {
		s.log.Error("job cannot be scheduled; fix it with cron update", zap.String("job", id), zap.Error(err))
		return s.timers.Cancel(ctx, timerKey(id))
	}
	if nextTick(cp.job, sched, cp.state).IsZero() {
		if err := s.timers.Cancel(ctx, timerKey(id)); err != nil {
			return err
		}
	} else if err := s.ensure(ctx, cp.job, sched, cp.state); err != nil {
		return err
	}
	if r := cp.state.Retry; r != nil {
		return s.ensureRetry(ctx, id, r)
	}
	return nil
}

// ensure arms the job's timer unless one is pending for its definition.
func (s *Scheduler) ensure(ctx context.Context, j Job, sched Schedule, st State) error {
	p, err := s.timers.Pending(ctx, timerKey(j.ID))
	if err == nil {
		var d timerData
		if json.Unmarshal(p.Data, &d) == nil && d.UpdatedAt.Equal(j.UpdatedAt) {
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
// instance may have stopped between a change and arming its timer. One
// listing of the pending timers finds those missing; every instance does
// this, and arming twice is harmless. It retries until it succeeds, and
// reports false when ctx ended first.
func (s *Scheduler) sweep(ctx context.Context) bool {
	for wait := time.Second; ; wait = min(2*wait, time.Minute) {
		err := s.sweepOnce(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		s.log.Warn("cron timers not checked at start (bus trouble?); trying again", zap.Duration("retry_in", wait), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

func (s *Scheduler) sweepOnce(ctx context.Context) error {
	pending, err := s.timers.PendingKeys(ctx, "cron")
	if err != nil {
		return err
	}
	var ids []string
	s.mu.Lock()
	for id, e := range s.entries {
		if e.job.ID == "" {
			continue
		}
		missing := !pending[timerKey(id)]
		if missing {
			sched, err := e.job.Sched()
			missing = err == nil && !nextTick(e.job, sched, e.state).IsZero()
		}
		if missing || (e.state.Retry != nil && !pending[retryKey(id)]) {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	if len(ids) > 0 {
		s.log.Info("arming the timers of jobs that have none", zap.Int("jobs", len(ids)))
	}
	if failed := s.checkTimers(ctx, ids); len(failed) > 0 {
		return fmt.Errorf("%d jobs' timers not armed", len(failed))
	}
	return nil
}

// reconcileConfig writes the config's jobs and the workflows' cron jobs
// to the bucket (only those that differ) and removes those of either
// origin the config no longer has.
func (s *Scheduler) reconcileConfig(ctx context.Context) error {
	now := s.clock.Now().UTC()
	want := make(map[string]bool, len(s.cfg.Jobs)+len(s.wfJobs))
	var puts []Job
	s.mu.Lock()
	defined := make([]Job, 0, len(s.cfg.Jobs)+len(s.wfJobs))
	for _, j := range s.cfg.Jobs {
		j.Origin, j.Workflow = OriginConfig, ""
		defined = append(defined, j)
	}
	for _, j := range s.wfJobs {
		j.Origin = OriginWorkflow
		defined = append(defined, j)
	}
	for _, j := range defined {
		j.normalize()
		want[j.ID] = true
		e, ok := s.entries[j.ID]
		if ok && e.job.ID != "" {
			if e.job.Origin == j.Origin && sameDefinition(e.job, j) {
				continue
			}
			if e.job.Origin != OriginConfig && e.job.Origin != OriginWorkflow {
				s.log.Warn("config defines a job that was added through the API; the config wins", zap.String("job", j.ID))
			}
			j.CreatedAt = e.job.CreatedAt
		} else {
			j.CreatedAt = now
		}
		j.UpdatedAt = now
		puts = append(puts, j)
	}
	var stale []string
	for id, e := range s.entries {
		if (e.job.Origin == OriginConfig || e.job.Origin == OriginWorkflow) && !want[id] {
			stale = append(stale, id)
		}
	}
	s.mu.Unlock()

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for _, j := range puts {
		g.Go(func() error {
			data, err := json.Marshal(j)
			if err != nil {
				return err
			}
			if _, err := s.bus.Jobs.Put(gctx, j.ID, data); err != nil {
				return fmt.Errorf("cron: write config job %s: %w", j.ID, err)
			}
			s.setJob(j)
			return nil
		})
	}
	for _, id := range stale {
		g.Go(func() error {
			s.log.Info("removing a config or workflow job the config no longer defines", zap.String("job", id))
			if err := s.bus.Jobs.Delete(gctx, id); err != nil {
				return fmt.Errorf("cron: remove job %s: %w", id, err)
			}
			_ = s.bus.State.Delete(gctx, stateKey(id))
			return nil
		})
	}
	return g.Wait()
}
