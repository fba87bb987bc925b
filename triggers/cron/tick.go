package cron

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
)

// What a fire writes for one tick: its request (ids, the publish) or the
// record that it was missed, and the words of that record.

// MsgID is the Nats-Msg-Id of the request of a job's tick:
// <job>:<tick, RFC 3339 UTC>, and :retry<n> for a retry of it.
func MsgID(id string, tick time.Time, retry int) string {
	m := id + ":" + tick.UTC().Format(time.RFC3339)
	if retry > 0 {
		m += ":retry" + strconv.Itoa(retry)
	}
	return m
}

// requestID is the request id of a tick of j (retry > 0: of a retry of
// it): the envelope id of its request, and so the key of its run claim.
// Derived from MsgID and the job's creation, every publish of the tick is
// the same request — a publish again after a lost ack, even past the
// duplicate window, runs once under the run claim — and a fire that
// records the tick as missed can find and forgo that request (forgo); a
// job deleted and created again under its id has other requests. It is a
// UUIDv7 whose time is the tick's and whose other bits are a hash.
func requestID(j Job, tick time.Time, retry int) string {
	sum := sha256.Sum256([]byte(MsgID(j.ID, tick, retry) + " " + j.CreatedAt.UTC().Format(time.RFC3339Nano)))
	var u uuid.UUID
	ms := uint64(tick.UnixMilli())
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	copy(u[6:], sum[:10])
	u[6] = u[6]&0x0f | 0x70 // version 7
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return u.String()
}

// forgo settles the run claim of the request of a tick about to be
// recorded as missed, so that a copy of it stored by an earlier try (its
// ack lost) is never run: the tick ends in the missed event. False: a run
// has the request already; the tick ends in the run's event instead.
// A workflow job's tick is settled by its Starter (ForgoTick).
func (s *Scheduler) forgo(ctx context.Context, j Job, tick time.Time) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if j.Workflow != "" {
		// A workflow job's tick has no request: its run is what a try
		// may have started.
		if s.starter == nil {
			return true, nil
		}
		ok, err := s.starter.ForgoTick(ctx, j, tick, MsgID(j.ID, tick, 0))
		if err != nil {
			return false, fmt.Errorf("settle the run of workflow %s for the missed tick of %s: %w", j.Workflow, tick.UTC().Format(time.RFC3339), err)
		}
		return ok, nil
	}
	ok, err := agentwork.Forgo(ctx, s.bus, requestID(j, tick, 0))
	if err != nil {
		return false, fmt.Errorf("settle the request of the missed tick of %s: %w", tick.UTC().Format(time.RFC3339), err)
	}
	return ok, nil
}

// publishFunc publishes a request (agentwork.Publish).
type publishFunc func(context.Context, *bus.Bus, agentwork.Request, agentwork.PublishOptions) (agentwork.Published, error)

// publishTick publishes the request of a tick of j (retry > 0: a retry of
// it) with its message id. dup: the bus had it already (another fire of
// the tick published it).
func (s *Scheduler) publishTick(ctx context.Context, j Job, tick time.Time, retry int, catchup bool) (dup bool, err error) {
	if j.Workflow != "" {
		// A workflow's cron trigger: the tick starts a run, once per tick
		// (its key is the tick's message id).
		if _, err := s.startWorkflow(ctx, j, tick, false); err != nil {
			return false, fmt.Errorf("start the run of workflow %s for the tick of %s: %w", j.Workflow, tick.UTC().Format(time.RFC3339), err)
		}
		return false, nil
	}
	req := s.request(j, tick, false)
	if retry > 0 {
		req.Metadata[metaRetry] = strconv.Itoa(retry)
	}
	if catchup {
		req.Metadata[metaCatchup] = "true"
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	pub := s.publishReq
	if pub == nil {
		pub = agentwork.Publish
	}
	o := agentwork.PublishOptions{MsgID: MsgID(j.ID, tick, retry), EventID: requestID(j, tick, retry), Producer: Producer, Now: s.clock.Now()}
	p, err := pub(ctx, s.bus, req, o)
	if err != nil {
		return false, fmt.Errorf("publish the tick of %s: %w", tick.UTC().Format(time.RFC3339), err)
	}
	return p.Duplicate, nil
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
	if j.Creator != nil {
		// A job a credential's task created acts for that credential.
		req.Credential = j.Creator.Credential
	}
	if j.DedupWindow > 0 {
		req.DedupWindow = j.DedupWindow.String()
	}
	return req
}

// recordMissed publishes the skip event, reason missed, of the ticks from
// tick to last (one tick, or a summary), with its own message id.
func (s *Scheduler) recordMissed(ctx context.Context, j Job, tick, last time.Time, detail string) error {
	at := tick.UTC()
	msgID := j.ID + ":" + at.Format(time.RFC3339) + ":missed"
	if !last.Equal(tick) {
		msgID = j.ID + ":" + at.Format(time.RFC3339) + ".." + last.UTC().Format(time.RFC3339) + ":missed"
	}
	res := agentwork.Result{Source: bus.SourceCron, Name: j.ID, Outcome: bus.OutcomeSkip, Reason: ReasonMissed, Detail: detail, ScheduledAt: &at, Metadata: j.Metadata}
	ev, err := bus.NewEvent(Producer, bus.TypeOf(bus.SourceCron, res.Outcome), res.Name, s.clock.Now(), res)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if _, err := s.bus.Publish(ctx, s.bus.Subjects.Event(bus.SourceCron, res.Outcome), ev, msgID); err != nil {
		return fmt.Errorf("record the missed tick of %s: %w", at.Format(time.RFC3339), err)
	}
	return nil
}

// missedDetail is the detail of the missed event of a tick. A fire handed
// out again (attempt > 1) failed before: its ticks waited for the bus.
func missedDetail(j Job, tick time.Time, attempt int, cause string) string {
	at := tick.UTC().Format(time.RFC3339)
	if attempt > 1 {
		return fmt.Sprintf("the tick of %s could not be published in time (%s); catch-up policy %s did not run it", at, attempts(attempt, cause), j.Catchup.Policy)
	}
	return fmt.Sprintf("the tick of %s passed while no instance was up; catch-up policy %s did not run it", at, j.Catchup.Policy)
}

// moreDetail is the detail of the summary of missed ticks.
func moreDetail(j Job, b batch, attempt int, cause string) string {
	n := strconv.Itoa(b.moreN)
	if b.moreAtLeast {
		n = "more than " + strconv.Itoa(maxScan)
	}
	from, to := b.moreFrom.UTC().Format(time.RFC3339), b.moreTo.UTC().Format(time.RFC3339)
	if attempt > 1 {
		return fmt.Sprintf("%s ticks from %s to %s passed while no instance was up or could not be published (%s); catch-up policy %s did not run them", n, from, to, attempts(attempt, cause), j.Catchup.Policy)
	}
	return fmt.Sprintf("%s ticks from %s to %s passed while no instance was up (catch-up policy %s)", n, from, to, j.Catchup.Policy)
}

func attempts(n int, cause string) string {
	s := strconv.Itoa(n-1) + " failed attempts"
	if cause != "" {
		s += "; last error: " + cause
	}
	return s
}
