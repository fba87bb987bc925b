package cron

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
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
