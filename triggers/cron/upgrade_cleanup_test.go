package cron

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// ageLegacyMarks moves back by d the times at which the index says a
// start first found an earlier version's record of each job (as if d had
// passed since), and returns how many marks it moved.
func ageLegacyMarks(t *testing.T, b *bus.Bus, d time.Duration) int {
	t.Helper()
	moved := 0
	for n := 0; ; n++ {
		e, err := b.State.Get(t.Context(), shardKey(n))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return moved
		}
		if err != nil {
			t.Fatal(err)
		}
		var sh map[string]map[string]any
		if err := json.Unmarshal(e.Value(), &sh); err != nil {
			t.Fatal(err)
		}
		for _, entry := range sh {
			l, ok := entry["l"].(string)
			if !ok {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, l)
			if err != nil {
				t.Fatal(err)
			}
			entry["l"] = at.Add(-d).Format(time.RFC3339Nano)
			moved++
		}
		data, err := json.Marshal(sh)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.State.Update(t.Context(), shardKey(n), data, e.Revision()); err != nil {
			t.Fatal(err)
		}
	}
}

// jobsStored returns how many messages the jobs bucket holds: what the
// jobs watch reads at every start.
func jobsStored(t *testing.T, b *bus.Bus) uint64 {
	t.Helper()
	st, err := b.JetStream().Stream(t.Context(), "KV_"+b.Jobs.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// After the upgrade from the version that kept config jobs in the jobs
// bucket, their records are removed, so that a restart reads none — but
// not by the start that adopted them, nor by any start within a day of
// it: an instance of the earlier version still running in a rolling
// upgrade reads a job's record at every fire, and would drop the job.
// The removal keeps the jobs' times, states and timers, and the jobs
// fire each tick once across it.
func TestUpgradeRemovesTheEarlierVersionsRecordsADayLater(t *testing.T) {
	b := bustest.New(t)
	createConsumer(t, b)
	every2s := Catchup{Policy: CatchupRunAll, Max: 100}
	at := time.Now().UTC().Add(2 * time.Hour).Truncate(time.Minute)
	cfg := Config{Jobs: []Job{
		{ID: "fast", Schedule: "@every 2s", Prompt: "p", Catchup: every2s},
		{ID: "daily", Schedule: fmt.Sprintf("%d %d * * *", at.Minute(), at.Hour()), Prompt: "p"},
		{ID: "changed", Schedule: "0 3 * * *", Prompt: "p"},
	}}
	// The earlier version's records, states and timers; "changed" had
	// another prompt then (the upgrade changes the config too).
	updated := time.Now().Add(-12 * time.Hour).UTC().Truncate(time.Second)
	recs := oldConfigRecords(t, b, cfg, updated)
	ch := recs["changed"]
	ch.Prompt = "the old prompt"
	data, _ := json.Marshal(ch)
	if _, err := b.Jobs.Put(t.Context(), "changed", data); err != nil {
		t.Fatal(err)
	}
	recs["changed"] = ch
	last := time.Now().UTC().Truncate(2 * time.Second).Add(-2 * time.Second)
	sts := map[string]State{
		"fast":  {LastTick: ptr(last), Fires: 7},
		"daily": {LastTick: ptr(at.Add(-24 * time.Hour)), Fires: 3},
	}
	for id, st := range sts {
		oldState(t, b, id, st)
	}
	for id, j := range recs {
		oldTimer(t, b, j, sts[id])
	}
	recRevs := revisions(t, b.Jobs, []string{"fast", "daily", "changed"})

	results := make(chan TickResult, 1000)
	start := func() (*Scheduler, func()) {
		t.Helper()
		s, stop := startScheduler(t, b, cfg, results)
		waitSwept(t, s)
		return s, stop
	}
	// The upgrade's first start adopts the records, the next (another
	// instance of the rolling upgrade, within the day) leaves them too.
	s, stop := start()
	times := map[string]Job{}
	for id := range recs {
		got, err := s.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		times[id] = got.Job
	}
	stop()
	_, stop = start()
	stop()
	for id, rev := range revisions(t, b.Jobs, []string{"fast", "daily", "changed"}) {
		if rev != recRevs[id] {
			t.Errorf("record of %s within a day of the upgrade: revision %d, want %d (left for the earlier version's instances)", id, rev, recRevs[id])
		}
	}
	if n := ageLegacyMarks(t, b, 25*time.Hour); n != len(recs) {
		t.Errorf("the index marks %d jobs as having an earlier version's record, want %d", n, len(recs))
	}

	// A start a day later removes them, and keeps the rest.
	dailyTimer, _ := pendingTimer(t, b, "daily")
	stateRevs := revisions(t, b.State, []string{stateKey("daily")})
	s, stop = start()
	for id := range recs {
		if _, err := b.Jobs.Get(t.Context(), id); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("record of %s a day after the upgrade: %v; want removed", id, err)
		}
		got, err := s.Get(t.Context(), id)
		if err != nil || !got.Job.CreatedAt.Equal(times[id].CreatedAt) || !got.Job.UpdatedAt.Equal(times[id].UpdatedAt) {
			t.Errorf("Get(%s) = %+v, %v; want the times %s, %s kept", id, got.Job, err, times[id].CreatedAt, times[id].UpdatedAt)
		}
	}
	if !times["fast"].UpdatedAt.Equal(updated) || !times["changed"].CreatedAt.Equal(updated) {
		t.Errorf("the upgrade did not carry the earlier version's times over: %+v", times)
	}
	if p, ok := pendingTimer(t, b, "daily"); !ok || !p.Due.Equal(dailyTimer.Due) || string(p.Data) != string(dailyTimer.Data) {
		t.Errorf("daily's timer: %v %s; want the one pending before, due %s", ok, p.Due, dailyTimer.Due)
	}
	if rev := revisions(t, b.State, []string{stateKey("daily")}); rev[stateKey("daily")] != stateRevs[stateKey("daily")] {
		t.Error("daily's state rewritten by the removal")
	}
	stop()

	// The next restart reads no record, and finds every job as it was.
	if n := jobsStored(t, b); n != 0 {
		t.Errorf("the jobs bucket holds %d messages after the removal, want none (a restart reads them all)", n)
	}
	s, stop = start()
	s.mu.Lock()
	if len(s.legacy) != 0 {
		t.Errorf("the next restart read %d records of config jobs, want none", len(s.legacy))
	}
	s.mu.Unlock()
	// "fast" fires each tick once, from the first after the earlier
	// version's last, across all four starts.
	fired := firedTicks(t, results, map[string]bool{"fast": true}, time.Now().Add(2*time.Second))
	stop()
	for len(results) > 0 {
		if r := <-results; r.Job == "fast" && r.What == "fired" {
			fired["fast"][r.Tick]++
		}
	}
	checkEachTickOnce(t, "fast", fired["fast"], last.Add(2*time.Second))
}
