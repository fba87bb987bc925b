package cron

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// watchJobs follows the jobs bucket: every instance sees every change, so
// a job added through one instance fires without a restart anywhere.
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
			if e, ok := s.entries[id]; ok {
				e.sched = nil
				s.reschedule(e)
				delete(s.entries, id)
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

// setJob puts j into the schedule (or replaces it).
func (s *Scheduler) setJob(j Job) {
	// Jobs are validated when written; here only the schedule matters.
	sched, err := j.Sched()
	if err != nil {
		s.log.Error("job cannot be scheduled; fix it with cron update", zap.String("job", j.ID), zap.Error(err))
		sched = nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[j.ID]
	if !ok {
		e = &entry{index: -1}
		s.entries[j.ID] = e
	} else if !j.UpdatedAt.Equal(e.job.UpdatedAt) {
		e.cursor = time.Time{} // a new definition: ticks count from its UpdatedAt
	}
	e.job, e.sched = j, sched
	s.reschedule(e)
}

// watchStates follows the cron.* keys of the state bucket: what other
// instances fired, pauses, pending retries.
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
		if !ok {
			// State can arrive before its job; keep it for when the job does.
			e = &entry{index: -1}
			s.entries[id] = e
		}
		if u.Operation() != jetstream.KeyValuePut && e.job.ID == "" {
			delete(s.entries, id) // the state of a deleted job
		} else {
			e.state = st
			s.reschedule(e)
		}
		s.mu.Unlock()
	}
	if ctx.Err() == nil {
		return errors.New("cron: the state watch ended unexpectedly (connection closed?)")
	}
	return nil
}

// reconcileConfig writes the config's jobs to the bucket (only those that
// differ) and removes config jobs the config no longer has.
func (s *Scheduler) reconcileConfig(ctx context.Context) error {
	now := s.clock.Now().UTC()
	want := make(map[string]bool, len(s.cfg.Jobs))
	var puts []Job
	s.mu.Lock()
	for _, j := range s.cfg.Jobs {
		j.normalize()
		j.Origin = OriginConfig
		want[j.ID] = true
		e, ok := s.entries[j.ID]
		if ok && e.job.ID != "" {
			if e.job.Origin == OriginConfig && sameDefinition(e.job, j) {
				continue
			}
			if e.job.Origin != OriginConfig {
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
		if e.job.Origin == OriginConfig && !want[id] {
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
			s.log.Info("removing a config job the config no longer defines", zap.String("job", id))
			if err := s.bus.Jobs.Delete(gctx, id); err != nil {
				return fmt.Errorf("cron: remove job %s: %w", id, err)
			}
			_ = s.bus.State.Delete(gctx, stateKey(id))
			return nil
		})
	}
	return g.Wait()
}
