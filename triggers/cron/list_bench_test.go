package cron

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentwork/agentwork/triggers/budget"
)

// listJobs is a scheduler holding n jobs (every 7th with a daily token
// budget), as the watches and the config's reconcile leave them, without
// I/O: what List and the agent's schedule_list read.
func listJobs(b *testing.B, n int) *Scheduler {
	b.Helper()
	s, err := New(nil, Config{})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	for i := range n {
		j := Job{ID: fmt.Sprintf("job-%06d", i), Schedule: fmt.Sprintf("%d %d * * *", i%60, i%24), Prompt: "p", Origin: OriginAPI, CreatedAt: now, UpdatedAt: now}
		if i%7 == 0 {
			j.Budget = budget.Budget{DailyTokens: 1000}
		}
		s.putEntry(j.ID, &entry{job: hold(&j)})
	}
	close(s.ready)
	return s
}

// BenchmarkList100k is one page of GET /v1/jobs (and of `agentwork cron
// list`, which pages through all) with 100,000 jobs: the first page, a
// page from the middle, the first page of the jobs with a budget, and a
// page after a job came or went (the ids sorted again).
func BenchmarkList100k(b *testing.B) {
	s := listJobs(b, 100_000)
	for _, c := range []struct {
		name  string
		q     ListQuery
		count int
	}{
		{"first-page", ListQuery{Limit: DefaultListLimit}, DefaultListLimit},
		{"middle-page", ListQuery{After: "job-050000", Limit: DefaultListLimit}, DefaultListLimit},
		{"budget-page", ListQuery{Limit: MaxListLimit, Budget: true}, MaxListLimit},
		{"page-after-a-change", ListQuery{Limit: DefaultListLimit}, DefaultListLimit},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if c.name == "page-after-a-change" {
					// A job came or went: the ids are sorted again.
					s.mu.Lock()
					s.order = nil
					s.mu.Unlock()
				}
				page, _, err := s.List(b.Context(), c.q)
				if err != nil || len(page) != c.count {
					b.Fatalf("%d jobs, %v", len(page), err)
				}
			}
		})
	}
}
