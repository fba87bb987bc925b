package cron

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// lastSeqs returns the last sequence of the streams a scheduler writes
// to at start: the jobs and state buckets and the timers stream.
func lastSeqs(t *testing.T, b *bus.Bus) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, name := range []string{"KV_" + bus.BucketJobs, "KV_" + bus.BucketState, bus.StreamTimers} {
		st, err := b.JetStream().Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out[name] = info.State.LastSeq
	}
	return out
}

// TestFirstStartWrites counts the stored writes the first start with
// config jobs makes (stream sequences): a config job that has not fired
// needs its timer and nothing else; a restart writes nothing.
func TestFirstStartWrites(t *testing.T) {
	const n = 300
	b := bustest.New(t)
	cfg := Config{}
	for i := range n {
		cfg.Jobs = append(cfg.Jobs, Job{ID: fmt.Sprintf("job-%03d", i), Schedule: fmt.Sprintf("%d 3 * * *", i%60), Prompt: "p"})
	}
	before := lastSeqs(t, b)
	s, stop := startScheduler(t, b, cfg, make(chan TickResult, 16))
	waitSwept(t, s)
	stop()
	after := lastSeqs(t, b)
	total := uint64(0)
	for k, v := range after {
		t.Logf("first start: %s: %d writes", k, v-before[k])
		total += v - before[k]
	}
	// Its timer, and one index value per 500 jobs.
	if max := uint64(n + shardCount(n)); total > max {
		t.Errorf("first start with %d config jobs: %d writes (%.2f per job), want at most %d: a timer per job and the index", n, total, float64(total)/n, max)
	}
	s, stop = startScheduler(t, b, cfg, make(chan TickResult, 16))
	waitSwept(t, s)
	stop()
	again := lastSeqs(t, b)
	for k, v := range again {
		if v != after[k] {
			t.Errorf("restart: %s: %d writes, want none", k, v-after[k])
		}
	}
}

func waitSwept(t *testing.T, s *Scheduler) {
	t.Helper()
	select {
	case <-s.swept:
	case <-time.After(waitFor):
		t.Fatal("timers not armed")
	}
}
