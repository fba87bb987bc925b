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
// The create is fenced: the lease is renewed by compare-and-set right
// before the job is written, so a create that stalled past its lease and
// was taken over writes nothing (see check for the window left).
// The price is one lease round trip and a read of the jobs bucket per
// create of a schedule tool, a rare call; creates through the API and the
// config do not take the lease (they are not under the quotas).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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
	s   *Scheduler
	rec quotaRecord
	rev uint64
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
	h.rev = rev
	return h, nil
}

// check fences the create: it renews the lease by compare-and-set at the
// revision this create took (or last renewed) it at, right before the job
// is written. When another create took the lease over meanwhile (this one
// stalled past its lease while it counted), the count may be stale and
// the renewal fails: the create is refused, to be tried again. A lease
// that lapsed with nobody taking it over is renewed: nobody counted in
// between, so the count still holds.
//
// The window left: the job's write is in another bucket, so it cannot be
// conditional on the lease's revision. After the renewal the lease is
// this create's for quotaLease; only a stall of longer than that between
// the renewal and the job's write landing (a frozen process, a partition)
// lets another create count without this job.
func (h *quotaHold) check(ctx context.Context) error {
	rev, err := bus.Renew(ctx, h.s.bus.Locks, QuotaLeaseKey, &h.rec, h.rev, quotaLease)
	switch {
	case errors.As(err, new(*bus.HeldError)):
		return errors.New("the jobs could not be counted in time (another create took the count over); try again later")
	case err != nil:
		return fmt.Errorf("the jobs cannot be counted now (%w); try again later", err)
	}
	h.rev = rev
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
	all, err := s.bus.Latest(ctx, s.bus.Jobs, ">", false)
	if err != nil {
		return 0, 0, fmt.Errorf("the jobs cannot be counted now (%w); try again later", err)
	}
	for _, e := range all {
		var j Job
		if json.Unmarshal(e.Value(), &j) != nil || j.Origin != OriginAgent {
			continue
		}
		total++
		if owns(o, j) {
			mine++
		}
	}
	return mine, total, nil
}
