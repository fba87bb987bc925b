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
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/agentwork/agentwork/bus"
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
	// Legacy is when a start first found the record an earlier version
	// wrote of the job in the jobs bucket, at revision LegacyRev (zero:
	// none); the record is removed legacyKeep after (dropRecords).
	Legacy    time.Time `json:"l,omitzero"`
	LegacyRev uint64    `json:"lr,omitempty"`
}

// legacyKeep is how long an earlier version's record of a config job
// stays in the jobs bucket after a start of this version first found it
// (and took its times into the index). That version read a config job's
// record at every fire of it: an instance of it still running beside
// this one (a rolling upgrade) drops the job once its record is gone
// (fires nothing, arms no next tick). The first start at least this long
// after removes the record, so that a restart does not read it.
const legacyKeep = 24 * time.Hour

// legacyRecord is a record of the jobs bucket of a job the config
// defines, written by an earlier version (or through the API), and its
// revision.
type legacyRecord struct {
	job Job
	rev uint64
}

// legacyMark returns the index entry e with its mark of the earlier
// version's record l: the mark of the index (old) if it is for the same
// revision, else now; and whether the record is due for removal.
func legacyMark(e, old indexEntry, inIndex bool, l legacyRecord, now time.Time) (indexEntry, bool) {
	if inIndex && !old.Legacy.IsZero() && old.LegacyRev == l.rev {
		e.Legacy, e.LegacyRev = old.Legacy, old.LegacyRev
		return e, now.Sub(old.Legacy) >= legacyKeep
	}
	e.Legacy, e.LegacyRev = now, l.rev
	return e, false
}

// dropRecords removes the earlier version's records of config jobs
// (id -> revision), each at its revision (a record written since stays),
// and returns the ids removed. It purges the key's messages from the
// bucket's stream, leaving no delete marker for the jobs watch to read
// at the next start (nor an event for the watches running: this
// version ignores these records). A record it cannot remove (bus
// trouble, no permission to purge) is logged and tried again at the next
// start.
func (s *Scheduler) dropRecords(ctx context.Context, drops map[string]uint64) []string {
	if len(drops) == 0 {
		return nil
	}
	bucket := s.bus.Jobs.Bucket()
	st, err := s.bus.JetStream().Stream(ctx, "KV_"+bucket)
	if err != nil {
		s.log.Warn("earlier version's records of config jobs not removed; the next start tries again", zap.Int("jobs", len(drops)), zap.Error(err))
		return nil
	}
	var mu sync.Mutex
	var dropped []string
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for id, rev := range drops {
		g.Go(func() error {
			err := st.Purge(gctx, jetstream.WithPurgeSubject("$KV."+bucket+"."+id), jetstream.WithPurgeSequence(rev+1))
			if err != nil {
				s.log.Warn("earlier version's record of a config job not removed; the next start tries again", zap.String("job", id), zap.Error(err))
				return nil
			}
			mu.Lock()
			dropped = append(dropped, id)
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	if len(dropped) > 0 {
		s.log.Info("removed the earlier version's records of config jobs (the index has their times)", zap.Int("jobs", len(dropped)))
	}
	return dropped
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

// definitionHashes returns the definitionHash of each of jobs, worked
// out on every core (at 100,000 jobs, a third of a start's reconcile).
func definitionHashes(jobs []Job) []string {
	out := make([]string, len(jobs))
	inChunks(len(jobs), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = definitionHash(jobs[i])
		}
	})
	return out
}

// chunk is how many jobs inChunks gives a core at a time.
const chunk = 1000

// inChunks calls fn for [0, n) a chunk at a time, as many at once as
// there are cores, and returns once every call has: for work over every
// job that is CPU alone (a start's, an arming pass's).
func inChunks(n int, fn func(lo, hi int)) {
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for lo := 0; lo < n; lo += chunk {
		g.Go(func() error {
			fn(lo, min(lo+chunk, n))
			return nil
		})
	}
	_ = g.Wait()
}

// definedJobs returns copies of the config's jobs and the workflows'
// cron jobs, normalized, with their origin.
func (s *Scheduler) definedJobs() []Job {
	out := make([]Job, 0, len(s.cfg.Jobs)+len(s.wfJobs))
	for _, j := range s.cfg.Jobs {
		j.Origin, j.Workflow = OriginConfig, ""
		j.normalize()
		out = append(out, j)
	}
	for _, j := range s.wfJobs {
		j.Origin = OriginWorkflow
		j.normalize()
		out = append(out, j)
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

// readIndex reads every shard of the index: shard number -> content.
func (s *Scheduler) readIndex(ctx context.Context) (map[int]indexShard, error) {
	r, err := s.readIndexAt(ctx)
	return r.shards, err
}

// indexRead is the index as a start read it.
type indexRead struct {
	shards map[int]indexShard // shard number -> content
	// revs is shard number -> revision (of unreadable shards too, which
	// have no content: the jobs in them count as new, and the shard is
	// written again).
	revs     map[int]uint64
	rearm    *rearmMark // nil: none
	rearmRev uint64
}

// readIndexAt reads every shard of the index, their revisions, and the
// re-arm mark.
func (s *Scheduler) readIndexAt(ctx context.Context) (indexRead, error) {
	all, err := s.bus.Latest(ctx, s.bus.State, indexPrefix+"*", false)
	if err != nil {
		return indexRead{}, fmt.Errorf("cron: read the config jobs' index: %w", err)
	}
	out := indexRead{shards: map[int]indexShard{}, revs: map[int]uint64{}}
	for key, u := range all {
		if key == rearmKey {
			// Unreadable: checked from the start of time.
			m := rearmMark{}
			_ = json.Unmarshal(u.Value(), &m)
			out.rearm, out.rearmRev = &m, u.Revision()
			continue
		}
		var n int
		if _, err := fmt.Sscanf(key, indexPrefix+"%d", &n); err != nil {
			continue
		}
		out.revs[n] = u.Revision()
		var sh indexShard
		if err := json.Unmarshal(u.Value(), &sh); err != nil {
			continue
		}
		out.shards[n] = sh
	}
	return out, nil
}

// rearmKey is the mark of a start that changed config jobs' definitions
// in the index: written before the index, removed once the start's
// arming pass has re-armed their timers. A start killed in between leaves
// it, and the next start checks the timers of the jobs updated since it
// (one may still be armed for the old definition: the job is not changed
// any more, the index has the new one). A restart that finds no mark
// reads no timer.
const rearmKey = indexPrefix + "rearm"

// rearmMark is the value at rearmKey.
type rearmMark struct {
	// Since is the earliest UpdatedAt a start that left the mark gave the
	// jobs it changed.
	Since time.Time `json:"since"`
}

// markRearm writes the re-arm mark of a start that changes definitions
// at now, keeping an earlier mark's Since. It writes even when that is
// unchanged: the new revision keeps another start that read the mark
// before from removing it while this one has not re-armed its jobs yet.
func (s *Scheduler) markRearm(ctx context.Context, now time.Time) (*rearmMark, uint64, error) {
	m, rev, err := bus.Update(ctx, s.bus.State, rearmKey, func(m *rearmMark, found bool) (bool, error) {
		if !found || m.Since.IsZero() || now.Before(m.Since) {
			m.Since = now
		}
		return true, nil
	})
	var corrupt *bus.CorruptError
	if errors.As(err, &corrupt) {
		// Unreadable: checked from the start of time (see readIndexAt).
		m = rearmMark{}
		rev, err = s.bus.State.Update(ctx, rearmKey, []byte(`{"since":"0001-01-01T00:00:00Z"}`), corrupt.Revision)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("cron: mark the config jobs' timers to re-arm: %w", err)
	}
	return &m, rev, nil
}

// clearRearm removes the re-arm mark the start read or wrote (rev), once
// its arming pass has checked the timers it asked for. A mark another
// start wrote since stays for that start (or the next) to remove.
func (s *Scheduler) clearRearm(ctx context.Context) {
	s.mu.Lock()
	rev := s.rearmRev
	s.recheck, s.rearmRev = nil, 0
	s.mu.Unlock()
	if rev == 0 {
		return
	}
	err := s.bus.State.Delete(ctx, rearmKey, jetstream.LastRevision(rev))
	if err != nil && !bus.IsConflict(err) && !errors.Is(err, jetstream.ErrKeyNotFound) && ctx.Err() == nil {
		s.log.Warn("cron: the re-arm mark not removed (bus trouble?); the next start checks the changed jobs' timers again", zap.Error(err))
	}
}

// indexed returns the jobs of the index shards idx by id. A job in two
// shards (a start that spread the index over another number of shards
// stopped halfway) is taken from the one changed last: the newest
// UpdatedAt, the lowest shard number on a tie, whatever order the shards
// were read in. The next write leaves it in its own shard only
// (writeIndex writes every shard that differs from what it should hold).
func indexed(idx map[int]indexShard) map[string]indexEntry {
	out := map[string]indexEntry{}
	for _, n := range slices.Sorted(maps.Keys(idx)) {
		for id, e := range idx[n] {
			if cur, ok := out[id]; !ok || e.UpdatedAt.After(cur.UpdatedAt) {
				out[id] = e
			}
		}
	}
	return out
}

// writeIndex writes the shards of want that differ from have, each with
// compare-and-set at the revision read (revs), and deletes those no job
// maps to any more. Another instance that wrote a shard meanwhile (two
// starting together) had its entries kept where they are for the same
// definition: every instance ends with the same times for a job, so the
// same request ids for its ticks. It returns the shards as written.
func (s *Scheduler) writeIndex(ctx context.Context, have, want map[int]indexShard, revs map[int]uint64) (map[int]indexShard, error) {
	var mu sync.Mutex
	out := make(map[int]indexShard, len(want))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for n, sh := range want {
		if _, read := have[n]; read && maps.Equal(have[n], sh) {
			out[n] = sh
			continue
		}
		g.Go(func() error {
			written, _, err := bus.UpdateAt(gctx, s.bus.State, shardKey(n), sh, revs[n], func(cur *indexShard, _ bool) (bool, error) {
				next := make(indexShard, len(sh))
				for id, e := range sh {
					if c, ok := (*cur)[id]; ok {
						e.CreatedAt = c.CreatedAt
						if c.Hash == e.Hash {
							e.UpdatedAt = c.UpdatedAt
						}
						if !e.Legacy.IsZero() && !c.Legacy.IsZero() && c.LegacyRev == e.LegacyRev && c.Legacy.Before(e.Legacy) {
							e.Legacy = c.Legacy
						}
					}
					next[id] = e
				}
				if maps.Equal(*cur, next) {
					return false, nil
				}
				*cur = next
				return true, nil
			})
			if err != nil {
				return fmt.Errorf("cron: write the config jobs' index: %w", err)
			}
			mu.Lock()
			out[n] = written
			mu.Unlock()
			return nil
		})
	}
	for n, rev := range revs {
		if _, ok := want[n]; ok {
			continue
		}
		g.Go(func() error {
			// At the revision read: a shard written meanwhile is another
			// start's, and stays.
			err := s.bus.State.Delete(gctx, shardKey(n), jetstream.LastRevision(rev))
			if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) && !bus.IsConflict(err) {
				return fmt.Errorf("cron: write the config jobs' index: %w", err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
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
	if e, ok := s.entries[id]; ok && e.job != nil {
		return e.job.job(), true, nil
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
