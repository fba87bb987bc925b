package cron

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/model/script"
)

// two instances' first start together; each tick reported fired once across both.
func TestTwoInstancesFirstStartEachTickReportedOnce(t *testing.T) {
	const n = 1500
	b := bustest.New(t)
	b2 := bustest.Client(t, b)
	cfg := Config{}
	for i := range n {
		cfg.Jobs = append(cfg.Jobs, Job{ID: fmt.Sprintf("job-%04d", i), Schedule: "*/2 * * * * *", Prompt: "p"})
	}
	results := make(chan TickResult, 200*n)
	s1, _ := startSchedulerNoWait(t, b, cfg, results)
	s2, _ := startSchedulerNoWait(t, b2, cfg, results)
	for _, s := range []*Scheduler{s1, s2} {
		select {
		case <-s.swept:
		case <-time.After(60 * time.Second):
			t.Fatal("not armed")
		}
	}
	// Every job reaches a tick due well after both were armed (reported
	// fired by one instance, duplicate by the other at most); then what
	// is reported already is counted too.
	after := time.Now().Truncate(2 * time.Second).Add(4 * time.Second)
	seen, reached := map[string]int{}, map[string]bool{}
	twice := 0
	count := func(r TickResult) {
		if !r.Tick.Before(after) && (r.What == "fired" || r.What == "duplicate") {
			reached[r.Job] = true
		}
		if r.What != "fired" {
			return
		}
		k := r.Job + "@" + r.Tick.Format(time.RFC3339)
		seen[k]++
		if seen[k] == 2 {
			twice++
		}
	}
	deadline := time.After(60 * time.Second)
	for len(reached) < n {
		select {
		case r := <-results:
			count(r)
		case <-deadline:
			t.Fatalf("%d of %d jobs reached a tick after %s in 60 s", len(reached), n, after)
		}
	}
	for len(results) > 0 {
		count(<-results)
	}
	t.Logf("%d ticks reported fired, %d of them more than once", len(seen), twice)
	if twice > 0 {
		t.Errorf("%d ticks reported fired more than once", twice)
	}
	reqs := requests(t, b)
	ids := map[string]int{}
	for _, r := range reqs {
		ids[r.MsgID]++
	}
	dup := 0
	for _, c := range ids {
		if c > 1 {
			dup++
		}
	}
	t.Logf("stored requests %d, distinct msg ids %d, duplicated %d", len(reqs), len(ids), dup)
}

func startSchedulerNoWait(t *testing.T, b *bus.Bus, cfg Config, results chan TickResult) (*Scheduler, func()) {
	t.Helper()
	s, err := New(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.queuePoll = 50 * time.Millisecond
	s.retryBase, s.retryMax = 100*time.Millisecond, time.Second
	s.onTick = func(r TickResult) { results <- r }
	stop := runUntil(t, s.Run)
	t.Cleanup(stop)
	return s, stop
}

// Two instances' arming passes can both arm a job's tick, and then both
// take a fire of it. Nothing a user sees happens twice: the tick's
// request is stored once (so it runs once and ends in one event), and
// the job's state counts it once; only the second fire's report says
// duplicate.
func TestTwoFiresOfOneTickRunItOnce(t *testing.T) {
	b := bustest.New(t)
	b2 := bustest.Client(t, b)
	now := time.Now().UTC()
	tick := now.Truncate(time.Minute) // due: the fires publish it at once
	seed(t, b, Job{ID: "x", Schedule: "* * * * *", Prompt: "p"}, now.Add(-time.Hour), State{LastTick: ptr(tick.Add(-time.Minute)), Fires: 4})
	results := make(chan TickResult, 10)
	var ss []*Scheduler
	for _, bb := range []*bus.Bus{b, b2} {
		s, err := New(bb, Config{})
		if err != nil {
			t.Fatal(err)
		}
		s.onTick = func(r TickResult) { results <- r }
		ss = append(ss, s)
	}
	errs := make(chan error, 2)
	for _, s := range ss {
		go func() { errs <- s.fireJob(t.Context(), zap.NewNop(), "x", 1) }()
	}
	for range ss {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	what := map[string]int{}
	for len(results) > 0 {
		r := <-results
		if !r.Tick.Equal(tick) {
			t.Errorf("result %+v, want one of the tick %s", r, tick)
		}
		what[r.What]++
	}
	if what["fired"] != 1 || what["duplicate"] > 1 || len(what) > 2 || (len(what) == 2 && what["duplicate"] == 0) {
		t.Errorf("tick results %v, want fired once (and duplicate at most once)", what)
	}
	t.Logf("tick results: %v", what)
	if reqs := requests(t, b); len(reqs) != 1 {
		t.Errorf("%d requests stored for the tick, want 1", len(reqs))
	}
	st, err := readState(t.Context(), b.State, "x")
	if err != nil || st.Fires != 5 || st.LastTick == nil || !st.LastTick.Equal(tick) {
		t.Errorf("state %+v, %v; want the tick counted once (5 fires), last tick %s", st, err, tick)
	}
}

// A catch-up arms the job's next tick before its writes (armEarly). When
// the writes take longer than the wait for that tick, another instance
// can take its timer's fire while the job's state does not have the
// catch-up yet, and after the tick: it works the ticks out from the
// state as it is, so the tick that was on time for the catch-up is
// overtaken for it (run_once: missed), as for a fire handed out again
// after the next tick (TestUnconfirmedTickEndsInOneEvent). Each tick must
// still end once, in a run's event or a missed event, never both, and be
// counted once.
func TestEarlyTimerFireOnAnotherInstanceDuringTheCatchup(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	b2 := bustest.Client(t, b)
	t0 := time.Now().UTC().Truncate(time.Minute)
	// Down for three minutes: t0-2m and t0-1m are late (run_once:
	// missed), t0 due 10 s ago is on time.
	seed(t, b, Job{ID: "x", Schedule: "* * * * *", Prompt: "p"}, t0.Add(-time.Hour), State{LastTick: ptr(t0.Add(-3 * time.Minute)), Fires: 1})
	newScheduler := func(bb *bus.Bus, now time.Time) *Scheduler {
		s, err := New(bb, Config{}, WithClock(clock.NewFake(now)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := newScheduler(b, t0.Add(10*time.Second))
	// The first instance's catch-up is slow: its request of t0 is stored
	// only once the second instance is done.
	inPublish, goOn := make(chan struct{}), make(chan struct{})
	first.publishReq = func(ctx context.Context, b *bus.Bus, req agentwork.Request, o agentwork.PublishOptions) (agentwork.Published, error) {
		close(inPublish)
		<-goOn
		return agentwork.Publish(ctx, b, req, o)
	}
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.fireJob(t.Context(), zap.NewNop(), "x", 1) }()
	<-inPublish
	if due := pendingDue(t, b, timerKey("x")); !due.Equal(t0.Add(time.Minute - fireLead)) {
		t.Fatalf("as the catch-up publishes, the job's timer is due %s; want it armed for the next tick %s", due, t0.Add(time.Minute))
	}
	// Its fire, on the second instance 5 s after that tick.
	clk := clock.NewFake(t0.Add(time.Minute + 5*time.Second))
	second := newScheduler(b2, clk.Now())
	if err := second.fireJob(t.Context(), zap.NewNop(), "x", 1); err != nil {
		t.Fatalf("the second instance's fire: %v", err)
	}
	close(goOn)
	if err := <-firstDone; err != nil {
		t.Fatalf("the first instance's catch-up: %v", err)
	}
	startRunner(t, b, clk, second, script.Rule{Match: script.Match{Source: "cron"}, Reply: script.Reply{Text: "hi"}})
	waitRequestsSettled(t, b)

	seen := ticksEnded(t, b, "x")
	want := map[time.Time]string{
		t0.Add(-2 * time.Minute): "skip/missed", t0.Add(-time.Minute): "skip/missed",
		t0: "skip/missed", t0.Add(time.Minute): "done/",
	}
	for at, w := range want {
		if len(seen[at]) != 1 || seen[at][0] != w {
			t.Errorf("tick %s has events %v, want exactly one: %s", at.Format(time.TimeOnly), seen[at], w)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("events by tick = %v, want the four ticks", seen)
	}
	st, err := readState(t.Context(), b.State, "x")
	if err != nil || st.Fires != 2 || st.Missed != 3 || st.LastTick == nil || !st.LastTick.Equal(t0.Add(time.Minute)) {
		t.Errorf("state %+v, %v; want each tick counted once: 2 fires, 3 missed, last tick %s", st, err, t0.Add(time.Minute).Format(time.TimeOnly))
	}
}
