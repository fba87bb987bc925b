package cron

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus/bustest"
)

// two instances that start together with the same config (the
// first start of a cluster, or a rollout that adds jobs) must agree on
// the config jobs' times: requestID (the run claim of a tick) is derived
// from CreatedAt, anchor from UpdatedAt, and firedFor compares UpdatedAt.
func TestTwoInstancesStartingTogetherAgreeOnTimes(t *testing.T) {
	const n = 300
	b := bustest.New(t)
	b2 := bustest.Client(t, b)
	cfg := Config{}
	for i := range n {
		cfg.Jobs = append(cfg.Jobs, Job{ID: fmt.Sprintf("job-%03d", i), Schedule: "0 3 * * *", Prompt: "p"})
	}
	s1, err := New(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := New(b2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop1 := runUntil(t, s1.Run)
	stop2 := runUntil(t, s2.Run)
	defer stop1()
	defer stop2()
	for _, s := range []*Scheduler{s1, s2} {
		select {
		case <-s.Started():
		case <-time.After(waitFor):
			t.Fatal("not ready")
		}
	}
	idx, err := s1.readIndex(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]indexEntry{}
	for _, sh := range idx {
		for k, v := range sh {
			known[k] = v
		}
	}
	tick := time.Date(2030, 1, 1, 3, 0, 0, 0, time.UTC)
	diff, notIndex := 0, 0
	for i := range n {
		id := fmt.Sprintf("job-%03d", i)
		s1.mu.Lock()
		j1 := s1.entries[id].job.job()
		s1.mu.Unlock()
		s2.mu.Lock()
		j2 := s2.entries[id].job.job()
		s2.mu.Unlock()
		if !j1.CreatedAt.Equal(j2.CreatedAt) || !j1.UpdatedAt.Equal(j2.UpdatedAt) {
			diff++
			if diff == 1 {
				t.Logf("%s: instance 1 created %s, instance 2 created %s; requestID %s vs %s", id,
					j1.CreatedAt.Format(time.RFC3339Nano), j2.CreatedAt.Format(time.RFC3339Nano),
					requestID(j1, tick, 0), requestID(j2, tick, 0))
			}
		}
		if e := known[id]; !e.CreatedAt.Equal(j1.CreatedAt) || !e.CreatedAt.Equal(j2.CreatedAt) {
			notIndex++
		}
	}
	if diff > 0 {
		t.Errorf("%d of %d config jobs have different CreatedAt/UpdatedAt on the two instances (so different request ids for one tick)", diff, n)
	}
	if notIndex > 0 {
		t.Errorf("%d of %d config jobs: an instance's times differ from the index's (lost update)", notIndex, n)
	}
}

// A crash in the middle of spreading the index over another number of
// shards can leave a job in two shards: the one it moved to, with the
// entry written then, and the one it left, with an older entry. The start
// takes the entry changed last, whatever order it reads the shards in,
// and its write leaves each job in one shard only.
func TestIndexJobInTwoShardsNewestEntryWins(t *testing.T) {
	const n = 8
	b := bustest.New(t)
	cfg := Config{}
	for i := range n {
		cfg.Jobs = append(cfg.Jobs, Job{ID: fmt.Sprintf("job-%d", i), Schedule: "0 3 * * *", Prompt: "p"})
	}
	probe, err := New(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defs := map[string]Job{}
	for _, j := range probe.definedJobs() {
		defs[j.ID] = j
	}
	created := time.Now().Add(-48 * time.Hour).UTC().Truncate(time.Second)
	updated := created.Add(24 * time.Hour)
	// Job i: its older entry (another definition) in shard i, its newest
	// in shard i+1. The pairs make a cycle, so no order of reading the
	// shards reads every newest entry after the older one.
	shards := map[int]indexShard{}
	for i := range n {
		shards[i] = indexShard{}
	}
	for i := range n {
		id := fmt.Sprintf("job-%d", i)
		shards[i][id] = indexEntry{Hash: "an-older-definition", CreatedAt: created, UpdatedAt: created}
		shards[(i+1)%n][id] = indexEntry{Hash: definitionHash(defs[id]), CreatedAt: created, UpdatedAt: updated}
	}
	for k, sh := range shards {
		data, err := json.Marshal(sh)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.State.Put(t.Context(), shardKey(k), data); err != nil {
			t.Fatal(err)
		}
	}

	s, _ := startScheduler(t, b, cfg, make(chan TickResult, 10))
	s.mu.Lock()
	for i := range n {
		id := fmt.Sprintf("job-%d", i)
		if got := s.entries[id].job.job(); !got.UpdatedAt.Equal(updated) || !got.CreatedAt.Equal(created) {
			t.Errorf("%s: created %s, updated %s; want the newest entry's %s, %s", id, got.CreatedAt, got.UpdatedAt, created, updated)
		}
	}
	s.mu.Unlock()
	idx, err := s.readIndex(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	in := map[string][]int{}
	for k, sh := range idx {
		for id, e := range sh {
			in[id] = append(in[id], k)
			if !e.UpdatedAt.Equal(updated) {
				t.Errorf("index: %s in shard %d updated %s, want %s", id, k, e.UpdatedAt, updated)
			}
		}
	}
	for i := range n {
		if id := fmt.Sprintf("job-%d", i); len(in[id]) != 1 {
			t.Errorf("index: %s in shards %v, want one", id, in[id])
		}
	}
}
