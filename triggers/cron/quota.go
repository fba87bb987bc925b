package cron

// The agent-job quotas (cron.agent.max_jobs, max_jobs_total) hold across
// goroutines and instances: a create counts the jobs and creates its own
// while it holds one lease of the runtime.
//
// Why a lease around a count read from the bucket, and not a counter kept
// in a key: a counter is a second record of what the jobs bucket already
// says, and every way a job goes (schedule_delete, the API, cron delete,
// delete_after_run, a config job written over an agent's id) would have to
// keep it right, with a crash between the delete and the decrement leaving
// it wrong until some repair recounts (and a recount races with the creates
// in flight). Under the lease nothing is kept but the lease: the count is
// read from the bucket each time, so there is nothing to leak, and a
// process that dies holding the lease frees it when the lease expires (at
// once on the embedded server: the data-dir lock proves the holder gone).
// A crash at any step therefore neither passes the quota nor shrinks it.
// The price is one lease round trip and a read of the jobs bucket per
// create of a schedule tool, a rare call; creates through the API and the
// config do not take the lease (they are not under the quotas).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools/schedule"
)

// QuotaLeaseKey is the key in agentwork_locks of the lease an agent
// create holds from counting the jobs to creating its own.
const QuotaLeaseKey = "cron.agent.quota"

// quotaLease is how long the lease lasts: far longer than a count and a
// create take. A create that finds the lease held waits until it is
// released, or until it expires when its holder died (on a cluster), up
// to quotaWait.
const (
	quotaLease = 10 * time.Second
	quotaWait  = 2 * quotaLease
)

// quotaRecord is the lease's record: who counts, for which job.
type quotaRecord struct {
	bus.Lease
	Job   string `json:"job"`
	Owner string `json:"owner"`
}

// quotaHold is a held quota lease.
type quotaHold struct {
	s     *Scheduler
	rec   quotaRecord
	rev   uint64
	taken time.Time
}

// holdQuota takes the quota lease for owner's create of job id, waiting
// while another create holds it.
func (s *Scheduler) holdQuota(ctx context.Context, o schedule.Owner, id string) (*quotaHold, error) {
	h := &quotaHold{s: s, rec: quotaRecord{Job: id, Owner: o.String()}}
	rev, err := bus.AcquireWait(ctx, s.bus, s.bus.Locks, QuotaLeaseKey, quotaLease, quotaWait, &h.rec, nil)
	switch {
	case errors.As(err, new(*bus.HeldError)):
		return nil, fmt.Errorf("other runs kept creating jobs for %s (the jobs are counted one create at a time): try again later", quotaWait)
	case err != nil:
		return nil, fmt.Errorf("the jobs cannot be counted now (%w); try again later", err)
	}
	h.rev, h.taken = rev, h.rec.Expires.Add(-quotaLease) // when the take was written
	return h, nil
}

// check reports whether the lease is still safely held: a create that
// took more than half the lease to count (a stalled process) does not
// create, since its lease may lapse before the job is written.
func (h *quotaHold) check() error {
	if time.Since(h.taken) > quotaLease/2 {
		return errors.New("the jobs could not be counted in time; try again later")
	}
	return nil
}

// release gives the lease back (it expires on its own if this fails).
func (h *quotaHold) release() {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := bus.Release(ctx, h.s.bus.Locks, QuotaLeaseKey, h.rec.Token, h.rev); err != nil && !errors.As(err, new(*bus.HeldError)) {
		h.s.log.Warn("the agent-job quota lease was not released; it expires on its own", zap.Error(err))
	}
}

// countAgentJobs counts the jobs of origin agent in the bucket: those of
// owner, and all. It reads the bucket, not the watched cache, which may
// not have seen the job another create just wrote.
func (s *Scheduler) countAgentJobs(ctx context.Context, o schedule.Owner) (mine, total int, err error) {
	w, err := s.bus.Jobs.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return 0, 0, fmt.Errorf("the jobs cannot be counted now (%w); try again later", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("the jobs cannot be counted now (%w); try again later", ctx.Err())
		case e = <-w.Updates():
		}
		if e == nil {
			return mine, total, nil
		}
		var j Job
		if json.Unmarshal(e.Value(), &j) != nil || j.Origin != OriginAgent {
			continue
		}
		total++
		if owns(o, j) {
			mine++
		}
	}
}
