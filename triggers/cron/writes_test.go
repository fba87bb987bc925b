package cron

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
// config jobs makes (stream sequences): a config job whose tick is within
// the arm-ahead window needs its timer and nothing else, one further
// away nothing at all; the arming pass has one timer; a restart writes
// nothing.
func TestFirstStartWrites(t *testing.T) {
	const near, far = 100, 200
	b := bustest.New(t)
	cfg := Config{}
	soon, later := time.Now().UTC().Add(10*time.Minute), time.Now().UTC().Add(3*time.Hour)
	for i := range near + far {
		at := soon
		if i >= near {
			at = later
		}
		cfg.Jobs = append(cfg.Jobs, Job{ID: fmt.Sprintf("job-%03d", i), Schedule: fmt.Sprintf("%d %d * * *", at.Minute(), at.Hour()), Prompt: "p"})
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
	// The near jobs' timers, the next two passes', one index value per 500
	// jobs.
	if want := uint64(near + passes + shardCount(near+far)); total != want {
		t.Errorf("first start with %d config jobs, %d of them due within the window: %d writes (%.2f per job), want %d: a timer per near job, the pass's and the index",
			near+far, near, total, float64(total)/(near+far), want)
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

// Config jobs live in the config, not the jobs bucket: a restart keeps
// the times of an unchanged definition, gives a changed one a new
// UpdatedAt (and re-arms its timer), removes the state and timer of a job
// the config dropped, and the API cannot add a job of a config id.
func TestConfigJobsAcrossRestarts(t *testing.T) {
	b := bustest.New(t)
	a := Job{ID: "a", Schedule: "0 3 * * *", Prompt: "p"}
	gone := Job{ID: "gone", Schedule: "0 4 * * *", Prompt: "p"}
	same := Job{ID: "same", Schedule: "0 5 * * *", Prompt: "p"}
	// Their ticks are armed however far (the test looks at a's timer).
	s, stop := startScheduler(t, b, Config{Jobs: []Job{a, gone, same}}, make(chan TickResult, 16), armAhead(0))
	waitSwept(t, s)
	first, err := s.Get(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	sameFirst, _ := s.Get(t.Context(), "same")
	if _, err := s.Add(t.Context(), Job{ID: "a", Schedule: "@daily", Prompt: "x"}); !errors.Is(err, ErrExists) {
		t.Errorf("Add(config id) = %v; want exists", err)
	}
	if _, err := s.Pause(t.Context(), "gone", "x"); err != nil {
		t.Fatal(err)
	}
	if keys, err := b.Jobs.Keys(t.Context()); !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Errorf("jobs bucket keys %v, %v; want none (config jobs are not written)", keys, err)
	}
	stop()

	a.Schedule = "0 6 * * *"
	s, _ = startScheduler(t, b, Config{Jobs: []Job{a, same}}, make(chan TickResult, 16), armAhead(0))
	waitSwept(t, s)
	got, err := s.Get(t.Context(), "a")
	if err != nil || got.Job.Schedule != a.Schedule || !got.Job.UpdatedAt.After(first.Job.UpdatedAt) || !got.Job.CreatedAt.Equal(first.Job.CreatedAt) {
		t.Errorf("changed job: %+v, %v; want the new schedule, a later updated_at, created_at kept", got.Job, err)
	}
	if got, _ := s.Get(t.Context(), "same"); !got.Job.UpdatedAt.Equal(sameFirst.Job.UpdatedAt) {
		t.Errorf("unchanged job updated_at %s; want %s kept", got.Job.UpdatedAt, sameFirst.Job.UpdatedAt)
	}
	// The change's check re-arms the timer (beside the start's pass,
	// which found one pending): wait for it.
	eventually(t, func() bool {
		p, err := s.timers.Pending(t.Context(), timerKey("a"))
		var d timerData
		return err == nil && json.Unmarshal(p.Data, &d) == nil && d.UpdatedAt.Equal(got.Job.UpdatedAt) && d.Tick.Hour() == 6
	})
	if _, err := s.Get(t.Context(), "gone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(dropped job) = %v; want not found", err)
	}
	if _, err := b.State.Get(t.Context(), stateKey("gone")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("state of the dropped job: %v; want removed", err)
	}
	if _, err := s.timers.Pending(t.Context(), timerKey("gone")); !errors.Is(err, bus.ErrNoTimer) {
		t.Errorf("timer of the dropped job: %v; want none", err)
	}
}
