package cron

// The jobs the config defines (cron.jobs and the workflows' cron
// triggers) are not written to the jobs bucket: the config is their
// source of truth, and every instance has it. What a restart needs to
// know of them that the config does not say — when each definition was
// first seen (its anchor: ticks from before a change are not caught up)
// and which ids the config had before (to remove the state of those it
// dropped) — is kept in the index: configShards values in the state
// bucket, keys cronconfig.<n>, each holding the definitions' hashes and
// times of about 500 jobs. A start writes only the values that changed:
// none on a restart with the same config, one per 500 jobs on the first.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// shardJobs is how many config jobs one index value holds, about: the
// jobs are spread over ceil(jobs/shardJobs) values by a hash of the id
// (500 jobs make about 45 KB a value). A change of their number spreads
// them again (every value is written once).
const shardJobs = 500

func shardCount(jobs int) int { return max(1, (jobs+shardJobs-1)/shardJobs) }

// indexPrefix is the state bucket's key prefix of the index: not under
// cron.*, which the state watch reads as jobs' states.
const indexPrefix = "cronconfig."

// indexEntry is one config job in the index.
type indexEntry struct {
	Hash      string    `json:"h"`
	CreatedAt time.Time `json:"c"`
	UpdatedAt time.Time `json:"u"`
}

// indexShard is one index value: id -> entry.
type indexShard map[string]indexEntry

func shardOf(id string, shards int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % uint32(shards))
}

func shardKey(n int) string { return indexPrefix + strconv.Itoa(n) }

// definitionHash identifies a job's definition (origin included,
// bookkeeping fields not).
func definitionHash(j Job) string {
	j.CreatedAt, j.UpdatedAt, j.Creator = time.Time{}, time.Time{}, nil
	data, _ := json.Marshal(j)
	h := fnv.New128a()
	_, _ = h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// definedJobs returns the config's jobs and the workflows' cron jobs,
// normalized, with their origin, by id.
func (s *Scheduler) definedJobs() map[string]Job {
	out := make(map[string]Job, len(s.cfg.Jobs)+len(s.wfJobs))
	for _, j := range s.cfg.Jobs {
		j.Origin, j.Workflow = OriginConfig, ""
		j.normalize()
		out[j.ID] = j
	}
	for _, j := range s.wfJobs {
		j.Origin = OriginWorkflow
		j.normalize()
		out[j.ID] = j
	}
	return out
}

// definedIDs returns the ids of definedJobs.
func (s *Scheduler) definedIDs() map[string]bool {
	ids := make(map[string]bool, len(s.cfg.Jobs)+len(s.wfJobs))
	for _, j := range s.cfg.Jobs {
		ids[j.ID] = true
	}
	for _, j := range s.wfJobs {
		ids[j.ID] = true
	}
	return ids
}

// readIndex reads every shard of the index: shard number -> content and
// revision.
func (s *Scheduler) readIndex(ctx context.Context) (map[int]indexShard, error) {
	w, err := s.bus.State.Watch(ctx, indexPrefix+"*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("cron: read the config jobs' index: %w", err)
	}
	defer func() { _ = w.Stop() }()
	out := map[int]indexShard{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case u, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("cron: read the config jobs' index: watch closed")
			}
			if u == nil {
				return out, nil
			}
			var n int
			if _, err := fmt.Sscanf(u.Key(), indexPrefix+"%d", &n); err != nil {
				continue
			}
			var sh indexShard
			if err := json.Unmarshal(u.Value(), &sh); err != nil {
				// Unreadable: the jobs in it count as new (their anchor
				// is now), and the shard is written again.
				continue
			}
			out[n] = sh
		}
	}
}

// writeIndex writes the shards of want that differ from have, and
// deletes those no job maps to any more.
func (s *Scheduler) writeIndex(ctx context.Context, have, want map[int]indexShard) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for n, sh := range want {
		if maps.Equal(have[n], sh) {
			continue
		}
		g.Go(func() error {
			data, err := json.Marshal(sh)
			if err != nil {
				return err
			}
			if _, err := s.bus.State.Put(gctx, shardKey(n), data); err != nil {
				return fmt.Errorf("cron: write the config jobs' index: %w", err)
			}
			return nil
		})
	}
	for n := range have {
		if _, ok := want[n]; ok {
			continue
		}
		g.Go(func() error {
			if err := s.bus.State.Delete(gctx, shardKey(n)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
				return fmt.Errorf("cron: write the config jobs' index: %w", err)
			}
			return nil
		})
	}
	return g.Wait()
}

// definedJob returns the config's job id as loaded (with its times), and
// whether the config defines id. Before the config is reconciled it
// waits for it (a timer left from the last run can fire at once).
func (s *Scheduler) definedJob(ctx context.Context, id string) (Job, bool, error) {
	if _, ok := s.defined[id]; !ok {
		return Job{}, false, nil
	}
	select {
	case <-s.configured:
	case <-ctx.Done():
		return Job{}, true, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[id]; ok && e.job.ID != "" {
		return e.job, true, nil
	}
	return Job{}, true, fmt.Errorf("cron: config job %s not loaded", id)
}

// errDefinedElsewhere is elsewhere's answer for a job the config jobs'
// index lists that this instance's config does not define.
var errDefinedElsewhere = errors.New("cron: the job is defined by another instance's config")

// elsewhere is asked of a job id that is no job here (no config job, no
// record): while instances run different configs (a rolling change),
// another instance's config may define it, and then the index lists it.
// It returns errDefinedElsewhere then (the fire or run is for such an
// instance), nil when the index does not list it either (the job was
// deleted).
func (s *Scheduler) elsewhere(ctx context.Context, id string) error {
	if s.defined[id] {
		return nil // defined here: its absence is not another config's
	}
	idx, err := s.readIndex(ctx)
	if err != nil {
		return err
	}
	for _, sh := range idx {
		if _, ok := sh[id]; ok {
			return fmt.Errorf("%w: %s", errDefinedElsewhere, id)
		}
	}
	return nil
}
