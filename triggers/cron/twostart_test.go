package cron

import (
	"fmt"
	"testing"
	"time"

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
	time.Sleep(3 * time.Second)
	seen := map[string]int{}
	twice := 0
	for len(results) > 0 {
		r := <-results
		if r.What != "fired" {
			continue
		}
		k := r.Job + "@" + r.Tick.Format(time.RFC3339)
		seen[k]++
		if seen[k] == 2 {
			twice++
		}
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
