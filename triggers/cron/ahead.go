package cron

// How far ahead timers are armed: a job's next tick is derived from its
// definition and its state (anchor, nextTick), so a timer is only needed
// once the tick comes near. Jobs whose next tick is further away than
// the scheduler's arm-ahead window have no timer; an arming pass — at
// start, and from then on on a timer of its own every half window —
// arms those that came within it.

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
)

// DefaultArmAhead is how far ahead of a job's next tick its timer is
// armed by default: a deployment of 100,000 daily jobs keeps about a
// 24th of them armed, and the arming pass runs every half hour.
const DefaultArmAhead = time.Hour

// aheadKey is the timer of the arming pass. A job's timers are
// cron.<id> and cron.<id>.retry: a key of three tokens other than a
// retry's is no job's.
const aheadKey = "cron.scheduler.ahead"

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

// pass is one arming pass: it arms the timers missing for the ticks
// within the window (sweepOnce), then makes sure the next pass has its
// timer: a start keeps one already pending within half a window (a
// restart writes nothing it need not), the pass of that timer's fire
// sets the next.
func (s *Scheduler) pass(ctx context.Context, fired bool) (int, error) {
	n, err := s.sweepOnce(ctx)
	if err != nil || s.ahead <= 0 {
		return n, err
	}
	if !fired {
		p, err := s.timers.Pending(ctx, aheadKey)
		if err == nil && !p.Due.After(s.clock.Now().Add(s.ahead/2)) {
			return n, nil
		}
		if err != nil && !errors.Is(err, bus.ErrNoTimer) {
			return n, err
		}
	}
	return n, s.armAhead(ctx)
}

// armAhead sets the arming pass's timer half a window from now. The key
// holds one timer, so the cluster runs about one pass every half window.
func (s *Scheduler) armAhead(ctx context.Context) error {
	return s.timers.Set(ctx, aheadKey, s.clock.Now().Add(s.ahead/2), nil)
}

// aheadFired handles a fire of the arming pass's timer: it arms the
// timers of the jobs whose next tick came within the window, and sets
// the pass's next timer. A pass that fails (bus trouble) is handed out
// again. Before this instance's start is done its own start's pass and
// timer stand for it.
func (s *Scheduler) aheadFired(ctx context.Context, attempt int) bus.Verdict {
	select {
	case <-s.swept:
	default:
		return bus.Done()
	}
	n, err := s.pass(ctx, true)
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
