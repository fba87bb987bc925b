package cron

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/schedule"
	"go.uber.org/zap"
)

var (
	alice = schedule.Owner{Source: "task", Name: "alice", RunID: "run-a"}
	bob   = schedule.Owner{Source: "task", Name: "bob", RunID: "run-b"}
	carol = schedule.Owner{Source: "task", Name: "carol", RunID: "run-c"}
)

func oneShot(key string, in time.Duration) schedule.Job {
	at := time.Now().Add(in).UTC().Truncate(time.Second)
	return schedule.Job{Name: "tea", Prompt: "remind the user of the tea", At: &at, IdempotencyKey: key, DeleteAfterRun: true, Targets: []string{"console"}}
}

func TestAgentJobsIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, _ := startScheduler(t, b, Config{}, make(chan TickResult, 100))
	a, ctx := s.Agent(), t.Context()

	// Concurrent creates with one key (as two instances would make them)
	// give one job; every call answers with it.
	var wg sync.WaitGroup
	infos := make([]schedule.Info, 8)
	created := make([]bool, 8)
	for i := range infos {
		wg.Go(func() {
			var err error
			if infos[i], created[i], err = a.Create(ctx, alice, oneShot("tea-1", time.Hour)); err != nil {
				t.Errorf("Create: %v", err)
			}
		})
	}
	wg.Wait()
	n := 0
	for i := range infos {
		if created[i] {
			n++
		}
		if infos[i].ID != infos[0].ID || infos[i].ID == "" {
			t.Errorf("Create #%d answered job %q, want %q", i, infos[i].ID, infos[0].ID)
		}
	}
	if n != 1 {
		t.Errorf("%d creates with one key created a job, want 1", n)
	}
	st, err := s.Get(ctx, infos[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if j := st.Job; j.Origin != OriginAgent || j.Creator == nil || !reflect.DeepEqual(*j.Creator, alice) || j.IdempotencyKey != "tea-1" || !j.DeleteAfterRun {
		t.Errorf("stored job = %+v, want origin agent, created by %v with key tea-1, delete_after_run", j, alice)
	}
	// The same key of another owner is another job.
	other, ok, err := a.Create(ctx, bob, oneShot("tea-1", time.Hour))
	if err != nil || !ok || other.ID == infos[0].ID {
		t.Errorf("Create(bob, same key) = %+v, %v, %v; want a job of its own", other, ok, err)
	}

	// After the job ran and deleted itself, its key still answers with it.
	j := st.Job
	s.observe(&agentwork.Run{ID: "r1", Request: agentwork.Request{Source: bus.SourceCron, Name: j.ID, ScheduledAt: j.At}}, bus.OutcomeDone)
	if _, err := s.Get(ctx, j.ID); !isErr(err, ErrNotFound) {
		t.Fatalf("Get after the one-shot's run = %v, want not found (delete_after_run)", err)
	}
	again, ok, err := a.Create(ctx, alice, oneShot("tea-1", time.Hour))
	if err != nil || ok || again.Status != schedule.StatusRemoved || again.ID != j.ID || again.RemovedAt == nil {
		t.Errorf("Create after the run = %+v, %v, %v; want the removed job, nothing created", again, ok, err)
	}
	if _, err := s.Get(ctx, j.ID); !isErr(err, ErrNotFound) {
		t.Errorf("Get after the repeated create = %v, want not found", err)
	}
}

func TestAgentJobsDeleteAfterRunOnlyAfterTheLastTick(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, _ := startScheduler(t, b, Config{}, make(chan TickResult, 100))
	a, ctx := s.Agent(), t.Context()
	info, _, err := a.Create(ctx, alice, oneShot("", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := s.Get(ctx, info.ID)
	at := *st.Job.At
	// A manual run, and a run whose retry is pending, leave the job.
	s.observe(&agentwork.Run{ID: "m", Request: agentwork.Request{Source: bus.SourceCron, Name: info.ID, ScheduledAt: &at, Manual: true}}, bus.OutcomeDone)
	if _, err := s.Update(ctx, info.ID, json.RawMessage(`{"retry":{"attempts":1}}`)); err != nil {
		t.Fatal(err)
	}
	s.observe(&agentwork.Run{ID: "e", Request: agentwork.Request{Source: bus.SourceCron, Name: info.ID, ScheduledAt: &at}, Result: &agentwork.Result{Error: "boom"}}, bus.OutcomeError)
	st, err = s.Get(ctx, info.ID)
	if err != nil {
		t.Fatalf("Get after a manual run and a failed run with a retry pending = %v, want the job kept", err)
	}
	if st.Job.Origin != OriginAgent || st.Job.Creator == nil || !reflect.DeepEqual(*st.Job.Creator, alice) {
		t.Errorf("after cron update the job is %s by %v, want still the agent's (%v)", st.Job.Origin, st.Job.Creator, alice)
	}
	// The retry's run ends it for good: deleted.
	s.observe(&agentwork.Run{ID: "e2", Request: agentwork.Request{Source: bus.SourceCron, Name: info.ID, ScheduledAt: &at, Metadata: map[string]string{metaRetry: "1"}}, Result: &agentwork.Result{Error: "boom"}}, bus.OutcomeError)
	if _, err := s.Get(ctx, info.ID); !isErr(err, ErrNotFound) {
		t.Errorf("Get after the retry failed = %v, want not found", err)
	}
}

func TestAgentJobsLimitsAndOwnership(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, _ := startScheduler(t, b, Config{
		Jobs:  []Job{{ID: "report", Schedule: "0 9 * * *", Prompt: "report"}},
		Agent: Agent{MaxJobs: 2, MaxJobsTotal: 3, MinInterval: 10 * time.Minute},
	}, make(chan TickResult, 100), func(s *Scheduler) { s.connectors = []string{"console", "telegram"} })
	a, ctx := s.Agent(), t.Context()
	every := func(d string) schedule.Job {
		return schedule.Job{Name: "poll", Prompt: "poll", Schedule: "@every " + d}
	}

	for _, tc := range []struct {
		name    string
		job     schedule.Job
		wantErr string
	}{
		{"too frequent @every", every("5m"), `too frequent: "@every 5m" runs 5m0s apart; agent-created jobs run at most every 10m0s`},
		{"too frequent cron", schedule.Job{Name: "x", Prompt: "x", Schedule: "*/5 * * * *"}, "too frequent"},
		{"bad cron", schedule.Job{Name: "x", Prompt: "x", Schedule: "61 * * * *"}, "schedule:"},
		{"unknown connector", schedule.Job{Name: "x", Prompt: "x", Schedule: "@every 1h", Targets: []string{"slack"}}, `targets: "slack" is not a connector of this runtime (there are: console, telegram)`},
	} {
		if _, _, err := a.Create(ctx, alice, tc.job); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("Create(%s) = %v, want an error containing %q", tc.name, err, tc.wantErr)
		}
	}

	// The quota: two jobs of alice, then refused; bob has his own.
	var ids []string
	for range 2 {
		info, _, err := a.Create(ctx, alice, every("1h"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	eventually(t, func() bool { l, _ := a.List(ctx, alice); return len(l) == 2 })
	if _, _, err := a.Create(ctx, alice, every("1h")); err == nil || !strings.Contains(err.Error(), "quota reached: task/alice has 2 scheduled jobs") {
		t.Errorf("a third job = %v, want quota reached", err)
	}
	bobs, _, err := a.Create(ctx, bob, every("1h"))
	if err != nil {
		t.Fatalf("bob's first job: %v", err)
	}
	eventually(t, func() bool { l, _ := a.List(ctx, bob); return len(l) == 1 })

	// All owners together: cron.agent.max_jobs_total (here 3).
	if _, _, err := a.Create(ctx, carol, every("1h")); err == nil || !strings.Contains(err.Error(), "quota reached: the runtime has 3 jobs created with schedule_create") {
		t.Errorf("a fourth job of all owners = %v, want the total quota reached", err)
	}

	// Each sees, pauses and deletes only its own.
	if l, _ := a.List(ctx, alice); len(l) != 2 || !slices.Contains(ids, l[0].ID) || !slices.Contains(ids, l[1].ID) {
		t.Errorf("List(alice) = %+v, want her 2 jobs", l)
	}
	for _, tc := range []struct{ id, wantErr string }{
		{bobs.ID, `is not yours: it was created by task/bob`},
		{"report", "is not yours: it was created by the config file"},
		{"nope", `no job "nope" among yours`},
	} {
		if _, err := a.Act(ctx, alice, tc.id, schedule.ActionDelete); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("Act(alice, delete %s) = %v, want %q", tc.id, err, tc.wantErr)
		}
	}
	if info, err := a.Act(ctx, alice, ids[0], schedule.ActionPause); err != nil || info.Status != StatusPaused {
		t.Errorf("pause = %+v, %v; want paused", info, err)
	}
	if info, err := a.Act(ctx, alice, ids[0], schedule.ActionResume); err != nil || info.Status != StatusActive {
		t.Errorf("resume = %+v, %v; want active", info, err)
	}
	if _, err := a.Act(ctx, alice, ids[0], schedule.ActionDelete); err != nil {
		t.Errorf("delete: %v", err)
	}
	if _, err := s.Get(ctx, bobs.ID); err != nil {
		t.Errorf("bob's job after alice's calls: %v", err)
	}
	// Deleting makes room again.
	eventually(t, func() bool { l, _ := a.List(ctx, alice); return len(l) == 1 })
	if _, _, err := a.Create(ctx, alice, every("1h")); err != nil {
		t.Errorf("a job after a delete: %v", err)
	}

	// Their runs use cron.agent.tools (default notify_user), unless the
	// operator gave the job its own.
	set, err := s.Policy().SettingsFor(ctx, bus.SourceCron, bobs.ID)
	if err != nil || !slices.Equal(set.Tools, []string{"notify_user"}) {
		t.Errorf("the tools of an agent job = %v, %v; want [notify_user]", set.Tools, err)
	}
}

// toolsOf returns the schedule tools over s, called as run.
func toolsOf(t *testing.T, s *Scheduler, run tools.RunInfo) (*tools.Registry, context.Context) {
	t.Helper()
	reg, err := tools.NewRegistry(schedule.Tools(s.Agent(), nil)...)
	if err != nil {
		t.Fatal(err)
	}
	return reg, tools.WithRun(t.Context(), run)
}

func TestScheduleCreateFromARunThatDeliversToAChat(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, _ := startScheduler(t, b, Config{}, make(chan TickResult, 100), WithConnectors("console", "telegram"))
	reg, ctx := toolsOf(t, s, tools.RunInfo{ID: "run-1", Source: "task", Name: "chat", Targets: []string{"telegram:42"}})

	c := reg.Call(ctx, "c1", schedule.CreateName, `{"name":"tea","prompt":"remind the user of the tea","in":"20m"}`)
	if c.Outcome != tools.OutcomeOK {
		t.Fatalf("schedule_create from a run delivering to telegram:42 = %s %q, want created", c.Outcome, c.Error)
	}
	var l []schedule.Info
	var err error
	eventually(t, func() bool {
		l, err = s.Agent().List(ctx, schedule.Owner{Source: "task", Name: "chat"})
		return err != nil || len(l) == 1
	})
	if err != nil || !slices.Equal(l[0].Targets, []string{"telegram:42"}) {
		t.Errorf("the job's targets = %+v, %v; want the run's [telegram:42]", l, err)
	}
	// The API takes a destination as well.
	if _, err := s.Add(ctx, Job{ID: "ops", Schedule: "@daily", Prompt: "p", Targets: []string{"telegram:-100123"}}); err != nil {
		t.Errorf("Add with a target with a destination: %v", err)
	}
}

func TestAgentJobsLiftOnlyTheirOwnPauses(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, _ := startScheduler(t, b, Config{PauseAfter: 1, Agent: Agent{MinInterval: 10 * time.Minute}}, make(chan TickResult, 100))
	a, ctx := s.Agent(), t.Context()
	info, _, err := a.Create(ctx, alice, schedule.Job{Name: "poll", Prompt: "poll", Schedule: "@every 1h"})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	act := func(action string) error { _, err := a.Act(ctx, alice, id, action); return err }
	state := func() State {
		st, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return st.State
	}
	refused := func(what string, err error, want ...string) {
		t.Helper()
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s = %v, want an error containing %q", what, err, w)
			}
		}
	}

	// The operator's pause: the tools neither lift nor take it over.
	if _, err := s.Pause(ctx, id, "too chatty"); err != nil {
		t.Fatal(err)
	}
	refused("resume of the operator's pause", act(schedule.ActionResume), "paused by the operator (too chatty)", "agentwork cron resume "+id)
	refused("pause of a job the operator paused", act(schedule.ActionPause), "already paused, by the operator")
	refused("run of a paused job", act(schedule.ActionRun), "is paused")
	if st := state(); !st.Paused || st.PausedBy != PausedByOperator {
		t.Fatalf("state after the refused calls = %+v, want the operator's pause", st)
	}
	if _, err := s.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}

	// Its own pause it lifts, without resetting the day's tokens.
	s.observe(&agentwork.Run{ID: "r1", Request: agentwork.Request{Source: bus.SourceCron, Name: id}, Result: &agentwork.Result{Usage: &model.Usage{InputTokens: 70, OutputTokens: 30}}}, bus.OutcomeDone)
	if err := act(schedule.ActionPause); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if err := act(schedule.ActionResume); err != nil {
		t.Fatalf("resume of its own pause: %v", err)
	}
	if st := state(); st.Paused || st.Spent == nil || st.Spent.Tokens != 100 {
		t.Errorf("state after its pause and resume = %+v, want active with today's 100 tokens kept", st)
	}

	// The failures' pause (pause_after 1) and the budget's: refused.
	s.observe(&agentwork.Run{ID: "r2", Request: agentwork.Request{Source: bus.SourceCron, Name: id}, Result: &agentwork.Result{Error: "boom"}}, bus.OutcomeError)
	refused("resume of the failures' pause", act(schedule.ActionResume), "paused by the runtime after its failed runs", "agentwork cron resume")
	if st := state(); !st.Paused || st.ConsecutiveFailures != 1 {
		t.Errorf("state after the refused resume = %+v, want paused with its failure", st)
	}
	if _, err := s.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, id, json.RawMessage(`{"budget":{"daily_tokens":150}}`)); err != nil {
		t.Fatal(err)
	}
	s.observe(&agentwork.Run{ID: "r3", Request: agentwork.Request{Source: bus.SourceCron, Name: id}, Result: &agentwork.Result{Usage: &model.Usage{InputTokens: 100}}}, bus.OutcomeDone)
	refused("resume of the budget's pause", act(schedule.ActionResume), "paused by its daily token budget")
	refused("run over budget", act(schedule.ActionRun), "is paused")
	if st := state(); !st.Paused || st.Spent.Tokens != 100 || st.PausedUntil == nil {
		t.Errorf("state after the refused resume = %+v, want paused until midnight with today's tokens", st)
	}

	// A run that ends over budget while the agent has the job paused:
	// the budget takes the pause over, but does not end it at midnight.
	if _, err := s.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := act(schedule.ActionPause); err != nil {
		t.Fatalf("pause: %v", err)
	}
	s.observe(&agentwork.Run{ID: "r4", Request: agentwork.Request{Source: bus.SourceCron, Name: id}, Result: &agentwork.Result{Usage: &model.Usage{InputTokens: 100}}}, bus.OutcomeDone)
	if st := state(); !st.Paused || st.PausedBy != PausedByBudget || st.PausedUntil != nil || !strings.Contains(st.PausedReason, "stays paused") {
		t.Errorf("state after a run over budget under the agent's pause = %+v, want the budget's pause without an end", st)
	}
	refused("resume of the budget's pause over the agent's", act(schedule.ActionResume), "paused by its daily token budget")

	// schedule_run: an active job, once per min_interval; not a disabled one.
	if _, err := s.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, id, json.RawMessage(`{"budget":null}`)); err != nil {
		t.Fatal(err)
	}
	if err := act(schedule.ActionRun); err != nil {
		t.Fatalf("run: %v", err)
	}
	refused("a second run within min_interval", act(schedule.ActionRun), "may run by hand again from", "cron.agent.min_interval 10m0s")
	if n := len(requests(t, b)); n != 1 {
		t.Errorf("%d requests published, want 1", n)
	}
	if _, err := s.Update(ctx, id, json.RawMessage(`{"enabled":false}`)); err != nil {
		t.Fatal(err)
	}
	refused("run of a disabled job", act(schedule.ActionRun), "is disabled")
}

// A delete_after_run job with max_runs is deleted after the run of its
// last tick, not after the run of an earlier tick that ends once the last
// was published (a queued run, a catch-up), nor while a retry is pending.
func TestAgentJobsDeleteAfterTheRunOfTheLastPublishedTick(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, _ := startScheduler(t, b, Config{}, make(chan TickResult, 100))
	a, ctx := s.Agent(), t.Context()
	info, _, err := a.Create(ctx, alice, schedule.Job{Name: "poll", Prompt: "poll", Schedule: "@every 1h", MaxRuns: 2, DeleteAfterRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, info.ID, json.RawMessage(`{"overlap":"queue","retry":{"attempts":1}}`)); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	t2 := t1.Add(time.Hour)
	// Both ticks published: max_runs reached.
	if _, err := updateState(ctx, b.State, info.ID, func(st *State) bool { st.Fires, st.LastTick = 2, &t2; return true }); err != nil {
		t.Fatal(err)
	}
	run := func(id string, tick time.Time, retry string, outcome string) {
		t.Helper()
		req := agentwork.Request{Source: bus.SourceCron, Name: info.ID, ScheduledAt: &tick}
		if retry != "" {
			req.Metadata = map[string]string{metaRetry: retry}
		}
		var res *agentwork.Result
		if outcome == bus.OutcomeError {
			res = &agentwork.Result{Error: "boom"}
		}
		s.observe(&agentwork.Run{ID: id, Request: req, Result: res}, outcome)
	}
	exists := func() bool {
		_, err := s.Get(ctx, info.ID)
		if err != nil && !isErr(err, ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	run("r2", t2, "", bus.OutcomeError) // the last tick's run fails: a retry follows
	run("r1", t1, "", bus.OutcomeDone)  // the first tick's queued run ends after it
	if !exists() {
		t.Fatal("the job was deleted while the run of its last tick was to be retried")
	}
	if st := waitState(t, b, info.ID, func(State) bool { return true }); st.Retry == nil || !st.Retry.Tick.Equal(t2) {
		t.Fatalf("the retry of the last tick = %+v, want it kept after an earlier tick's run succeeded", st.Retry)
	}
	run("r2b", t2, "1", bus.OutcomeDone) // the retry: the last run of the job
	if exists() {
		t.Error("the job is left after the retry that ended its runs")
	}

	// Without a retry: the first tick's run ends after the second was published.
	info, _, err = a.Create(ctx, alice, schedule.Job{Name: "poll", Prompt: "poll", Schedule: "@every 1h", MaxRuns: 2, DeleteAfterRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := updateState(ctx, b.State, info.ID, func(st *State) bool { st.Fires, st.LastTick = 2, &t2; return true }); err != nil {
		t.Fatal(err)
	}
	run("q1", t1, "", bus.OutcomeDone)
	if !exists() {
		t.Fatal("the job was deleted after the run of its first tick, before the run of its last")
	}
	run("q2", t2, "", bus.OutcomeDone)
	if exists() {
		t.Error("the job is left after the run of its last tick")
	}
}

// The run of a delete_after_run job's last tick can end before the fire
// that published the tick has recorded it; the observer then cannot know
// it was the last, and the fire deletes the job once it has.
func TestDeleteAfterRunWhenTheRunEndedFirst(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tick := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	j := Job{ID: "last", Schedule: "0 * * * *", Prompt: "p", MaxRuns: 1, DeleteAfterRun: true}
	j.normalize()
	j.Origin, j.CreatedAt, j.UpdatedAt = OriginAPI, tick.Add(-time.Hour), tick.Add(-time.Hour)
	data, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Jobs.Put(t.Context(), j.ID, data); err != nil {
		t.Fatal(err)
	}
	// What the observer left: the tick's run ended, the tick not recorded.
	if data, err = json.Marshal(State{Ended: &tick}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.State.Put(t.Context(), stateKey(j.ID), data); err != nil {
		t.Fatal(err)
	}
	s, err := New(b, Config{}, WithClock(clock.NewFake(tick.Add(time.Second))))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.fireJob(t.Context(), zap.NewNop(), j.ID, 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.readJob(t.Context(), j.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the job after its last tick was recorded: %v, want it deleted", err)
	}
}

// The quotas hold against creates that race: 8 at once, from two
// schedulers on one bus, for one owner and for 8 owners.
func TestAgentJobsQuotasHoldUnderConcurrentCreates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		owner func(i int) schedule.Owner
	}{
		{"one owner (max_jobs)", func(int) schedule.Owner { return alice }},
		{"distinct owners (max_jobs_total)", func(i int) schedule.Owner {
			return schedule.Owner{Source: "task", Name: fmt.Sprintf("caller-%d", i), RunID: fmt.Sprintf("run-%d", i)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			cfg := Config{Agent: Agent{MaxJobs: 1, MaxJobsTotal: 1}}
			s1, _ := startScheduler(t, b, cfg, make(chan TickResult, 100))
			s2, _ := startScheduler(t, b, cfg, make(chan TickResult, 100))
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				created int
				errs    []error
			)
			start := make(chan struct{})
			for i := range 8 {
				s := s1
				if i%2 == 1 {
					s = s2
				}
				wg.Go(func() {
					<-start
					_, ok, err := s.Agent().Create(t.Context(), tc.owner(i), schedule.Job{Name: "poll", Prompt: "poll", Schedule: "@every 1h"})
					mu.Lock()
					defer mu.Unlock()
					if ok {
						created++
					}
					if err != nil {
						errs = append(errs, err)
					}
				})
			}
			close(start)
			wg.Wait()
			var agentJobs []string
			keys, err := b.Keys(t.Context(), b.Jobs, ">")
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if strings.HasPrefix(k, "agent-") {
					agentJobs = append(agentJobs, k)
				}
			}
			if created != 1 || len(agentJobs) != 1 {
				t.Errorf("created %d, the bucket holds %d agent jobs %v; want exactly 1 (errors: %v)", created, len(agentJobs), agentJobs, errs)
			}
			for _, err := range errs {
				if !strings.Contains(err.Error(), "quota reached") {
					t.Errorf("a refused create: %v, want quota reached", err)
				}
			}
		})
	}
}

// A quota lease its holder never released (an instance that died while it
// counted, on a cluster) holds creates back only until it expires; a
// create releases the lease it took.
func TestAgentJobsQuotaLeaseOfADeadHolderExpires(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, _ := startScheduler(t, b, Config{}, make(chan TickResult, 100))
	dead := quotaRecord{Lease: bus.Lease{Owner: "gone", Token: "t", Expires: time.Now().Add(300 * time.Millisecond)}, Job: "agent-x", Owner: "task/x"}
	data, _ := json.Marshal(dead)
	if _, err := b.Locks.Put(t.Context(), QuotaLeaseKey, data); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Agent().Create(t.Context(), alice, schedule.Job{Name: "poll", Prompt: "poll", Schedule: "@every 1h"}); !ok || err != nil {
		t.Fatalf("create while a dead holder's lease lasts = %v, %v; want created once it expired", ok, err)
	}
	if e, err := b.Locks.Get(t.Context(), QuotaLeaseKey); err == nil {
		t.Errorf("the quota lease after the create: %s, want released", e.Value())
	}
}

// Creates with one idempotency key that race answer with the one job,
// even when it fills the owner's quota: the later ones are repeats, not
// jobs over the quota.
func TestAgentJobsSameKeyRacingAtTheQuota(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	cfg := Config{Agent: Agent{MaxJobs: 1}}
	s1, _ := startScheduler(t, b, cfg, make(chan TickResult, 100))
	s2, _ := startScheduler(t, b, cfg, make(chan TickResult, 100))
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ids     = map[string]int{}
		created int
	)
	start := make(chan struct{})
	for i := range 6 {
		s := s1
		if i%2 == 1 {
			s = s2
		}
		wg.Go(func() {
			<-start
			info, ok, err := s.Agent().Create(t.Context(), alice, schedule.Job{Name: "poll", Prompt: "poll", Schedule: "@every 1h", IdempotencyKey: "poll-1"})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("create %d: %v, want the job (a repeat of the same key)", i, err)
				return
			}
			ids[info.ID]++
			if ok {
				created++
			}
		})
	}
	close(start)
	wg.Wait()
	if created != 1 || len(ids) != 1 {
		t.Errorf("created %d, ids %v; want one job created and every call answered with it", created, ids)
	}
}
