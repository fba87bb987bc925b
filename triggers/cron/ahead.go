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
// is lost leaves the next ones. They fire to a consumer of their own
// (cron-ahead): the jobs' consumer, shared with instances of earlier
// versions during a rolling upgrade, never sees them.

import (
	"context"
	"strconv"
	"strings"
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

// minEvery bounds how often passes run (a window of a few seconds in
// tests; WithArmAhead of nanoseconds would divide by zero).
const minEvery = 100 * time.Millisecond

// every is how often an arming pass runs: a quarter window, so that a
// tick is armed a quarter window ahead even when one pass is lost.
func (s *Scheduler) every() time.Duration { return max(s.ahead/4, minEvery) }

// passKey is the timer of the n-th pass since the Unix epoch.
func passKey(n int64) string { return aheadKind + "." + strconv.FormatInt(n, 10) }

// passOf returns the pass number of a pass's timer key.
func passOf(key string) (int64, bool) {
	rest, ok := strings.CutPrefix(key, aheadKind+".")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	return n, err == nil
}

// pass is one arming pass after pass number after (0: the start's): it
// makes sure the next passes have their timers, then arms the timers
// missing for the ticks within the window (sweepOnce).
func (s *Scheduler) pass(ctx context.Context, after int64) (int, error) {
	if err := s.armPasses(ctx, after); err != nil {
		return 0, err
	}
	return s.sweepOnce(ctx)
}

// armPasses sets the timers of the passes that follow pass number after,
// up to passes of them, but none at or before the latest pending or set
// here. after 0: the passes that follow the instance's clock, or those
// before the latest pending one if that is later (timers fire on the
// server's clock: an instance whose clock is behind must not set again a
// pass the server has fired, which would fire at once). A restart that
// finds them pending writes none; a fire that leaves its job to the
// passes finds them known and reads nothing.
func (s *Scheduler) armPasses(ctx context.Context, after int64) error {
	if s.ahead <= 0 {
		return nil
	}
	every := int64(s.every())
	if after == 0 && s.passesUntil.Load() >= s.clock.Now().UnixNano()/every+2 {
		return nil // two passes or more still to come, as this instance last saw
	}
	pending, err := s.timers.PendingKeys(ctx, aheadKind)
	if err != nil {
		return err
	}
	latest := int64(0)
	for key := range pending {
		if n, ok := passOf(key); ok {
			latest = max(latest, n)
		}
	}
	if after == 0 {
		after = max(s.clock.Now().UnixNano()/every, latest-passes)
	}
	// Only passes after the latest pending and the latest this instance
	// set: one before them that is not pending has fired (or a later one
	// stands for it), and set again it would fire again.
	from := max(after, latest, s.passesUntil.Load()) + 1
	for k := from; k <= after+passes; k++ {
		if err := s.timers.Set(ctx, passKey(k), time.Unix(0, k*every), nil); err != nil {
			return err
		}
		latest = k
	}
	s.passesUntil.Store(max(latest, s.passesUntil.Load()))
	return nil
}

// handleAhead is the handler of the passes' timers: it runs the pass. A
// pass that fails (bus trouble), or that comes to an instance whose
// start is not done, is handed out again.
func (s *Scheduler) handleAhead(ctx context.Context, m jetstream.Msg) bus.Verdict {
	t, err := s.timers.DecodeTimer(m.Subject(), m.Data())
	if err != nil {
		s.log.Error("not an arming pass's timer; dropped", zap.String("subject", m.Subject()), zap.Error(err))
		return bus.Terminate()
	}
	after, ok := passOf(t.Key)
	if !ok {
		s.log.Error("not an arming pass's timer key; dropped", zap.String("key", t.Key))
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
	n, err := s.pass(ctx, after)
	switch {
	case err == nil:
		if n > 0 {
			s.log.Info("cron timers armed for the ticks coming within reach", zap.Int("armed", n), zap.Duration("ahead", s.ahead))
		}
		return bus.Done()
	case ctx.Err() != nil:
		return bus.Defer(0)
	}
	wait := s.backoff(attempt)
	s.log.Warn("cron arming pass failed (bus trouble?); handed out again", zap.Duration("retry_in", wait), zap.Error(err))
	return bus.Retry(wait)
}
