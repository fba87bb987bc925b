package cron

// How far ahead timers are armed: a job's next tick is derived from its
// definition and its state (anchor, nextTick), so a timer is only needed
// once the tick comes near. Jobs whose next tick is further away than
// the scheduler's arm-ahead window have no timer; an arming pass — at
// start, and from then on every quarter window on timers of its own —
// arms those that came within it.
//
// The passes' timers are cronahead.<n>, due at the n-th quarter window
// since the Unix epoch; every pass makes sure the next three are
// pending, and so does every fire that leaves its job without a timer
// (its next tick beyond the window: a pass must come), so a pass that
// is lost leaves the next ones. They fire
// to a consumer of their own (cron-ahead): the jobs' consumer, shared
// with instances of earlier versions during a rolling upgrade, never sees
// them.

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
)

// DefaultArmAhead is how far ahead of a job's next tick its timer is
// armed by default: a deployment of 100,000 daily jobs keeps about a
// 24th of them armed, and the arming pass runs every quarter hour.
const DefaultArmAhead = time.Hour

// aheadKind is the first token of the passes' timer keys.
const aheadKind = "cronahead"

// AheadConsumerName is the durable consumer of the arming passes' timers,
// shared by every instance.
const AheadConsumerName = "cron-ahead"

// passes is how many of the passes' timers are kept pending.
const passes = 3

// due is when the timer of the job's tick fires: the tick plus its
// jitter, fireLead ahead.
func due(j Job, tick time.Time) time.Time {
	return tick.Add(jitter(j.ID, tick, time.Duration(j.Jitter))).Add(-fireLead)
}

// beyond reports whether a timer due at d is further away than the
// arm-ahead window: it is not armed now, a later pass arms it.
func (s *Scheduler) beyond(d time.Time) bool {
	return s.ahead > 0 && d.After(s.clock.Now().Add(s.ahead))
}

// every is how often an arming pass runs: a quarter window, so that a
// tick is armed a quarter window ahead even when one pass is lost.
func (s *Scheduler) every() time.Duration { return s.ahead / 4 }

// passKey is the timer of the n-th pass since the Unix epoch.
func passKey(n int64) string { return aheadKind + "." + strconv.FormatInt(n, 10) }

// pass is one arming pass: it arms the timers missing for the ticks
// within the window (sweepOnce), then makes sure the next passes have
// their timers (a restart that finds them pending writes none).
func (s *Scheduler) pass(ctx context.Context) (int, error) {
	n, err := s.sweepOnce(ctx)
	if err != nil {
		return n, err
	}
	return n, s.armPasses(ctx)
}

// armPasses sets the timers of the next passes that are not pending.
func (s *Scheduler) armPasses(ctx context.Context) error {
	if s.ahead <= 0 {
		return nil
	}
	pending, err := s.timers.PendingKeys(ctx, aheadKind)
	if err != nil {
		return err
	}
	every := s.every()
	now := s.clock.Now().UnixNano() / int64(every)
	for k := now + 1; k <= now+passes; k++ {
		if pending[passKey(k)] {
			continue
		}
		if err := s.timers.Set(ctx, passKey(k), time.Unix(0, k*int64(every)), nil); err != nil {
			return err
		}
	}
	return nil
}

// handleAhead is the handler of the passes' timers: it runs the pass. A
// pass that fails (bus trouble), or that comes to an instance whose
// start is not done, is handed out again.
func (s *Scheduler) handleAhead(ctx context.Context, m jetstream.Msg) bus.Verdict {
	if _, err := s.timers.DecodeTimer(m.Subject(), m.Data()); err != nil {
		s.log.Error("not an arming pass's timer; dropped", zap.String("subject", m.Subject()), zap.Error(err))
		return bus.Terminate()
	}
	attempt := 1
	if md, err := m.Metadata(); err == nil {
		attempt = int(md.NumDelivered)
	}
	select {
	case <-s.swept:
	case <-ctx.Done():
		return bus.Defer(0)
	default:
		// Starting: its own start's pass runs; this one may be another
		// instance's to run now.
		return bus.Defer(time.Second)
	}
	n, err := s.pass(ctx)
	switch {
	case err == nil:
		if n > 0 {
			s.log.Info("cron timers armed for the ticks coming within reach", zap.Int("armed", n), zap.Duration("ahead", s.ahead))
		}
		return bus.Done()
	case ctx.Err() != nil:
		return bus.Defer(0)
	}
	wait := min(s.retryBase<<min(attempt-1, 30), s.retryMax)
	s.log.Warn("cron arming pass failed (bus trouble?); handed out again", zap.Duration("retry_in", wait), zap.Error(err))
	return bus.Retry(wait)
}
