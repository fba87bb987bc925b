package cron

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/internal/clock"
)

// A first start arms the timers of the ticks within the arm-ahead
// window only: a job due in three hours costs no write until its tick
// comes near, and the arming passes have timers of their own, every
// quarter window.
func TestArmOnlyWithinWindow(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	far := time.Now().UTC().Add(3 * time.Hour)
	cfg := Config{Jobs: []Job{
		{ID: "near", Schedule: "*/2 * * * * *", Prompt: "p"},
		{ID: "far", Schedule: fmt.Sprintf("%d %d * * *", far.Minute(), far.Hour()), Prompt: "p"},
	}}
	s, _ := startScheduler(t, b, cfg, make(chan TickResult, 64))
	select {
	case <-s.Armed():
	case <-time.After(waitFor):
		t.Fatal("the start's arming pass did not end")
	}
	tm := bus.NewTimers(b)
	eventually(t, func() bool {
		_, err := tm.Pending(t.Context(), timerKey("near"))
		return err == nil
	})
	if p, err := tm.Pending(t.Context(), timerKey("far")); !isErr(err, bus.ErrNoTimer) {
		t.Fatalf("a timer for a tick three hours ahead (window %s): %+v, %v", DefaultArmAhead, p, err)
	}
	// The next passes have their timers, at the next quarter hours.
	var keys map[string]bool
	eventually(t, func() bool {
		var err error
		keys, err = tm.PendingKeys(t.Context(), aheadKind)
		return err == nil && len(keys) == passes
	})
	q := int64(DefaultArmAhead / 4)
	n := time.Now().UnixNano() / q
	for k := n + 1; k <= n+passes; k++ {
		p, err := tm.Pending(t.Context(), passKey(k))
		if err != nil || !p.Due.Equal(time.Unix(0, k*q).UTC()) {
			t.Fatalf("pass %d: %+v, %v; want a timer due %s (pending: %v)", k, p, err, time.Unix(0, k*q).UTC(), keys)
		}
	}
	// No job's consumer sees them (an earlier version's would drop them).
	if cron, err := tm.PendingKeys(t.Context(), "cron"); err != nil || len(cron) != 1 || !cron[timerKey("near")] {
		t.Fatalf("timers under cron: %v, %v; want only near's", cron, err)
	}
	// The API still tells the far job's next fire.
	j, err := s.Get(t.Context(), "far")
	if err != nil {
		t.Fatal(err)
	}
	if j.Next == nil || !j.Next.Equal(far.Truncate(time.Minute)) {
		t.Fatalf("far's next fire %v, want its tick at %s", j.Next, far.Truncate(time.Minute))
	}
}

// A job whose next tick is beyond the window when it fires has no timer
// until an arming pass (on its own timer, every quarter window) finds the
// tick within reach: every tick still fires, on time and once.
func TestArmingPassArmsTicksAsTheyComeNear(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	cfg := Config{Jobs: []Job{{ID: "every3", Schedule: "*/3 * * * * *", Prompt: "p"}}}
	results := make(chan TickResult, 64)
	// A window of a second: after each fire the next tick (3 s on, its
	// timer due 2 s on) is beyond it.
	startScheduler(t, b, cfg, results, func(s *Scheduler) { s.ahead = time.Second })
	rs := nextResults(t, results, 4)
	for i, r := range rs {
		if r.What != "fired" {
			t.Fatalf("tick %d: %+v, want fired", i, r)
		}
		if i > 0 && r.Tick.Sub(rs[i-1].Tick) != 3*time.Second {
			t.Fatalf("ticks %v then %v: one was skipped or fired twice", rs[i-1].Tick, r.Tick)
		}
	}
}

// A pass's timer that comes to an instance whose start is not done is
// handed out again (to an instance that is up, or to this one once it
// is), never dropped: it may be the only pending pass.
func TestPassFireBeforeStartIsHandedOutAgain(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, err := New(b, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.timers.Set(t.Context(), passKey(1), time.Now(), nil); err != nil {
		t.Fatal(err)
	}
	c, err := b.JetStream().CreateOrUpdateConsumer(t.Context(), bus.StreamTimers, jetstream.ConsumerConfig{
		FilterSubject: b.Subjects.TimerFired(aheadKind) + ".>", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Next(jetstream.FetchMaxWait(waitFor))
	if err != nil {
		t.Fatal(err)
	}
	if v := s.handleAhead(t.Context(), m); v == bus.Done() || v == bus.Terminate() {
		t.Fatalf("verdict %+v for a pass fire before the start is done; want it handed out again", v)
	}
}

// A lost pass (its timer gone) leaves the next ones: a job whose ticks
// only the passes arm fires on.
func TestLostPassLeavesTheNext(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	cfg := Config{Jobs: []Job{{ID: "every4", Schedule: "*/4 * * * * *", Prompt: "p"}}}
	results := make(chan TickResult, 64)
	// Window 2 s, a pass every 0.5 s: after each fire the next tick (its
	// timer due 3 s on) is beyond the window.
	s, _ := startScheduler(t, b, cfg, results, armAhead(2*time.Second))
	waitSwept(t, s)
	tm := bus.NewTimers(b)
	lost := 0
	for i := range 3 {
		// The soonest pass lost, once a round.
		keys, err := tm.PendingKeys(t.Context(), aheadKind)
		if err != nil {
			t.Fatal(err)
		}
		soonest := int64(0)
		for k := range keys {
			if n, ok := passOf(k); ok && (soonest == 0 || n < soonest) {
				soonest = n
			}
		}
		if soonest > 0 && tm.Cancel(t.Context(), passKey(soonest)) == nil {
			lost++
		}
		r := nextResults(t, results, 1)[0]
		if r.What != "fired" {
			t.Fatalf("round %d: %+v, want fired", i, r)
		}
	}
	if lost == 0 {
		t.Fatal("no pass was pending to lose")
	}
	rs := nextResults(t, results, 2)
	if rs[1].Tick.Sub(rs[0].Tick) != 4*time.Second {
		t.Fatalf("ticks %v then %v after %d passes were lost; want every 4 s", rs[0].Tick, rs[1].Tick, lost)
	}
}

// behind is the real clock, d behind (an instance whose clock lags the
// NATS server's, which fires the timers).
type behind struct {
	clock.Real
	d time.Duration
}

func (c behind) Now() time.Time { return time.Now().Add(-c.d) }

// An instance whose clock is behind the server's (which fires the
// timers) does not set again a pass the server has fired (due in the
// past, it would fire at once, and so on): each pass fires once, in
// order, as with clocks in step. (Before the fix a clock 3 s behind
// fired each pass again and again: 69 passes in 6 s against 6.)
func TestPassesWithAClockBehindTheServer(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{0, 3 * time.Second} {
		b := bustest.New(t)
		// Every fired copy of a pass's timer, from before the start on.
		fires, err := b.JetStream().OrderedConsumer(t.Context(), bus.StreamTimers, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{b.Subjects.TimerFired(aheadKind) + ".>"},
		})
		if err != nil {
			t.Fatal(err)
		}
		// Window 4 s: a pass every second.
		_, stop := startScheduler(t, b, Config{}, make(chan TickResult, 64), armAhead(4*time.Second), func(s *Scheduler) {
			s.clock = behind{d: skew}
		})
		var seen []int64
		for len(seen) < 8 {
			m, err := fires.Next(jetstream.FetchMaxWait(waitFor))
			if err != nil {
				t.Fatalf("clock %s behind: after passes %v: %v", skew, seen, err)
			}
			tm, err := bus.NewTimers(b).DecodeTimer(m.Subject(), m.Data())
			if err != nil {
				t.Fatal(err)
			}
			n, ok := passOf(tm.Key)
			if !ok {
				t.Fatalf("fired %q, not a pass", tm.Key)
			}
			if len(seen) > 0 && n <= seen[len(seen)-1] {
				t.Fatalf("clock %s behind the server: pass %d fired after passes %v; want each once, in order", skew, n, seen)
			}
			seen = append(seen, n)
		}
		stop()
	}
}

// A window too small for a quarter of it to be a duration (WithArmAhead
// of nanoseconds) runs passes every minEvery, without dividing by zero.
func TestTinyWindow(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, err := New(b, Config{}, WithArmAhead(3))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.armPasses(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
}
