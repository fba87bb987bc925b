package cron

// The config's jobs at start: put into the scheduler beside the API's,
// with the times the index keeps for them.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// reconcileConfig puts the config's jobs and the workflows' cron jobs into
// the scheduler's entries (not into the jobs bucket: the config is their
// source of truth), with the times the index keeps for them; writes the
// index shards that changed; and removes what the config no longer
// defines: its state, its timers, a record an earlier version wrote. An
// API job of an id the config defines is removed (the config wins).
func (s *Scheduler) reconcileConfig(ctx context.Context) error {
	defer close(s.configured)
	now := s.clock.Now().UTC()
	read, err := s.readIndexAt(ctx)
	if err != nil {
		return err
	}
	have, revs := read.shards, read.revs
	want := map[int]indexShard{}
	known := indexed(have)
	shards := shardCount(len(s.defined))
	var override, staleRecords []string
	drops := map[string]uint64{} // earlier version's records to remove, at their revisions
	changed := map[string]bool{} // jobs defined before under another definition
	// The defined jobs, with the times to write, until the index is
	// written; then the entries hold them (hold: a third of a Job's
	// memory), and this array and the config's copy are let go.
	defs := s.definedJobs()
	s.cfg.Jobs, s.wfJobs = nil, nil
	hashes := definitionHashes(defs)
	s.mu.Lock()
	for i := range defs {
		j := &defs[i]
		id := j.ID
		h := hashes[i]
		n := shardOf(id, shards)
		old, inIndex := known[id]
		switch {
		case inIndex && old.Hash == h:
			j.CreatedAt, j.UpdatedAt = old.CreatedAt, old.UpdatedAt
		case inIndex:
			j.CreatedAt, j.UpdatedAt = old.CreatedAt, now
			changed[id] = true
		default:
			j.CreatedAt, j.UpdatedAt = now, now
			if rec, ok := s.legacy[id]; ok {
				l := rec.job
				switch {
				case l.Origin != OriginConfig && l.Origin != OriginWorkflow:
					s.log.Warn("config defines a job that was added through the API; the config wins", zap.String("job", id))
					override = append(override, id)
					j.CreatedAt = l.CreatedAt
					changed[id] = true
				case l.Origin == j.Origin && sameDefinition(l, *j):
					// Written by an earlier version: its times carry over
					// (and its pending timer, armed for them, stays).
					j.CreatedAt, j.UpdatedAt = l.CreatedAt, l.UpdatedAt
				default:
					j.CreatedAt = l.CreatedAt
					changed[id] = true
				}
			}
		}
		if want[n] == nil {
			want[n] = indexShard{}
		}
		e := indexEntry{Hash: h, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt}
		if l, ok := s.legacy[id]; ok && (l.job.Origin == OriginConfig || l.job.Origin == OriginWorkflow) {
			// The index has what the record held (its times, or a newer
			// definition's): it goes once no instance of the earlier
			// version can still read it (legacyKeep).
			var drop bool
			if e, drop = legacyMark(e, old, inIndex, l, now); drop {
				drops[id] = l.rev
			}
		}
		want[n][id] = e
	}
	// Dropped from the config: known from the index, or (written by an
	// earlier version) from the bucket.
	var stale []string
	for id := range known {
		if _, ok := s.defined[id]; !ok {
			stale = append(stale, id)
		}
	}
	for id, e := range s.entries {
		if e.job != nil && e.job.isDefined() {
			if _, ok := s.defined[id]; !ok {
				staleRecords = append(staleRecords, id)
			}
		}
	}
	s.mu.Unlock()

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for _, id := range override {
		g.Go(func() error {
			if err := s.bus.Jobs.Delete(gctx, id); err != nil {
				return fmt.Errorf("cron: remove the API job %s the config defines: %w", id, err)
			}
			return nil
		})
	}
	for _, id := range staleRecords {
		g.Go(func() error {
			s.log.Info("removing a config or workflow job the config no longer defines", zap.String("job", id))
			if err := s.bus.Jobs.Delete(gctx, id); err != nil {
				return fmt.Errorf("cron: remove job %s: %w", id, err)
			}
			_ = s.bus.State.Delete(gctx, stateKey(id))
			return nil
		})
	}
	for _, id := range stale {
		g.Go(func() error {
			s.log.Info("removing a config or workflow job the config no longer defines", zap.String("job", id))
			s.mu.Lock()
			if e, ok := s.entries[id]; ok && e.job == nil {
				s.dropEntry(id)
			}
			s.mu.Unlock()
			err := errors.Join(s.timers.Cancel(gctx, timerKey(id)), s.timers.Cancel(gctx, retryKey(id)))
			if derr := s.bus.State.Delete(gctx, stateKey(id)); derr != nil && !errors.Is(derr, jetstream.ErrKeyNotFound) {
				err = errors.Join(err, derr)
			}
			if err != nil {
				return fmt.Errorf("cron: remove job %s: %w", id, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, id := range s.dropRecords(ctx, drops) {
		n := shardOf(id, shards)
		e := want[n][id]
		e.Legacy, e.LegacyRev = time.Time{}, 0
		want[n][id] = e
		s.mu.Lock()
		delete(s.legacy, id)
		s.mu.Unlock()
	}
	mark, markRev := read.rearm, read.rearmRev
	if len(changed) > 0 {
		// Before the index: killed after writing it, this start leaves
		// the mark, and the next checks the timers it did not re-arm.
		if mark, markRev, err = s.markRearm(ctx, now); err != nil {
			return err
		}
	}
	written, err := s.writeIndex(ctx, have, want, revs)
	if err != nil {
		return err
	}
	// The times as the index has them now: another instance starting
	// meanwhile may have written them first.
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recheck, s.rearmRev = map[string]bool{}, markRev
	for i := range defs {
		j := &defs[i]
		id := j.ID
		if e, ok := written[shardOf(id, shards)][id]; ok {
			j.CreatedAt, j.UpdatedAt = e.CreatedAt, e.UpdatedAt
		}
		e, ok := s.entries[id]
		if !ok {
			e = &entry{}
			s.putEntry(id, e)
		}
		e.job = hold(j)
		if changed[id] || (mark != nil && !j.UpdatedAt.Before(mark.Since)) {
			// A pending timer may be for the old definition: the
			// start's arming pass checks it.
			s.recheck[id] = true
		}
	}
	return nil
}
