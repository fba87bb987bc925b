package cron

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/internal/clock"
)

// starts records the starts of workflow runs a scheduler asked for. Like
// the engine, a key is one run: started, or forgone (a tombstone), never
// both.
type starts struct {
	mu      sync.Mutex
	calls   []startCall
	forgone map[string]bool
}

func (s *starts) ForgoTick(_ context.Context, _ Job, _ time.Time, key string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.calls {
		if c.Key == key {
			return false, nil
		}
	}
	if s.forgone == nil {
		s.forgone = map[string]bool{}
	}
	s.forgone[key] = true
	return true, nil
}

type startCall struct {
	Job, Workflow, Key string
	Tick               time.Time
	Manual             bool
}

func (s *starts) StartTick(_ context.Context, j Job, tick time.Time, key string, manual bool) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key != "" && s.forgone[key] {
		return "run-" + key, nil // the tombstone: not started
	}
	s.calls = append(s.calls, startCall{Job: j.ID, Workflow: j.Workflow, Key: key, Tick: tick, Manual: manual})
	return "run-" + key, nil
}

func (s *starts) all() []startCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]startCall(nil), s.calls...)
}

func workflowJob(id, wf string) Job {
	return Job{ID: id, Name: "workflow " + wf, Workflow: wf, Schedule: "* * * * * *"}
}

// A job of origin workflow fires like any job, but its tick starts a run
// through the Starter, with the tick's message id as key, and publishes no
// request; the API lists it and refuses to change or delete it; a config
// without it removes it at start.
func TestWorkflowJobStartsRunsAndIsTheConfigs(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	results := make(chan TickResult, 100)
	st := &starts{}
	wf := workflowJob("wf-nightly-0", "nightly")
	cfg := Config{Jobs: []Job{{ID: "prompt-job", Schedule: "0 0 1 1 *", Prompt: "say hi"}}}
	s, stop := startScheduler(t, b, cfg, results, func(s *Scheduler) { s.wfJobs, s.starter = []Job{wf}, st; s.defined = s.definedIDs() })
	rs := nextResults(t, results, 2)
	if fired := ticksOf(rs, "fired"); len(fired) != 2 {
		t.Fatalf("results %v; want 2 ticks fired", rs)
	}
	calls := st.all()
	if len(calls) < 2 {
		t.Fatalf("starts %+v; want one per tick fired", calls)
	}
	for _, c := range calls {
		if c.Job != wf.ID || c.Workflow != "nightly" || c.Manual || c.Key != MsgID(wf.ID, c.Tick, 0) {
			t.Errorf("start %+v; want job %s, workflow nightly, key %s", c, wf.ID, MsgID(wf.ID, c.Tick, 0))
		}
	}
	if reqs := requests(t, b); len(reqs) != 0 {
		t.Errorf("%d runner requests published; want none", len(reqs))
	}
	got, err := s.Get(t.Context(), wf.ID)
	if err != nil || got.Job.Origin != OriginWorkflow || got.Job.Workflow != "nightly" || got.Status != StatusActive {
		t.Fatalf("Get = %+v, %v; want an active job of origin workflow", got, err)
	}
	if _, err := s.Update(t.Context(), wf.ID, json.RawMessage(`{"schedule":"@daily"}`)); !errors.Is(err, ErrConfigJob) || !strings.Contains(err.Error(), "workflow nightly") {
		t.Errorf("Update = %v; want config_job naming the workflow", err)
	}
	if err := s.Delete(t.Context(), wf.ID); !errors.Is(err, ErrConfigJob) {
		t.Errorf("Delete = %v; want config_job", err)
	}
	if _, err := s.Add(t.Context(), Job{ID: "sneaky", Schedule: "@daily", Workflow: "nightly"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Add(a job with a workflow) = %v; want invalid", err)
	}
	res, err := s.RunNow(t.Context(), wf.ID)
	if err != nil || res.RequestID != "run-" {
		t.Errorf("RunNow = %+v, %v; want the run the Starter started", res, err)
	}
	if c := st.all(); !c[len(c)-1].Manual || c[len(c)-1].Key != "" {
		t.Errorf("RunNow start %+v; want manual, no key", c[len(c)-1])
	}
	stop()
	// Started again without the workflow: its job is removed, the config's stays.
	s2, _ := startScheduler(t, b, cfg, results)
	if _, err := s2.Get(t.Context(), wf.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(job of a removed workflow) = %v; want not found", err)
	}
	if _, err := s2.Get(t.Context(), "prompt-job"); err != nil {
		t.Errorf("Get(config job) = %v", err)
	}
}

func TestWithWorkflowsChecksTheJobs(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	cfg := Config{Jobs: []Job{{ID: "taken", Schedule: "@daily", Prompt: "x"}}}
	for _, tc := range []struct {
		name string
		jobs []Job
		st   Starter
		want string
	}{
		{"id of a config job", []Job{workflowJob("taken", "w")}, &starts{}, "id is taken"},
		{"bad schedule", []Job{{ID: "wf-w-0", Workflow: "w", Schedule: "61 * * * *"}}, &starts{}, "schedule"},
		{"a prompt", []Job{{ID: "wf-w-0", Workflow: "w", Schedule: "@daily", Prompt: "x"}}, &starts{}, "no prompt"},
		{"no starter", []Job{workflowJob("wf-w-0", "w")}, nil, "Starter"},
	} {
		if _, err := New(b, cfg, WithWorkflows(tc.jobs, tc.st)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v; want an error with %q", tc.name, err, tc.want)
		}
	}
}

// A workflow job's tick whose run an earlier try started (the state write
// after it failed) and that a later try classes as missed ends in the run
// alone: no missed event, counted as fired once.
func TestWorkflowUnconfirmedTickIsRunOrMissed(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	job := workflowJob("wf-sec-0", "sec")
	last := t0.Truncate(time.Second)
	tick, next := last.Add(time.Second), last.Add(2*time.Second)
	st := &starts{}
	seed(t, b, job, last.Add(-time.Hour), State{LastTick: &last})
	clk := clock.NewFake(tick)
	s, err := New(b, Config{}, WithClock(clk), WithWorkflows(nil, st))
	if err != nil {
		t.Fatal(err)
	}
	states := &flakyState{KeyValue: b.State}
	states.failWrites.Store(1)
	s.stateKV = states
	if err := s.fireJob(t.Context(), zap.NewNop(), job.ID, 1); err == nil {
		t.Fatal("the first fire succeeded, want it failed (injected)")
	}
	clk.Set(next.Add(100 * time.Millisecond))
	if err := s.fireJob(t.Context(), zap.NewNop(), job.ID, 2); err != nil {
		t.Fatalf("the fire handed out again: %v", err)
	}
	started := map[time.Time]int{}
	for _, c := range st.all() {
		started[c.Tick.UTC()]++
	}
	hist, err := jobHistory(t.Context(), b, job.ID, 50)
	if err != nil {
		t.Fatal(err)
	}
	missed := map[time.Time]int{}
	for _, h := range hist {
		if h.Result.ScheduledAt != nil {
			missed[h.Result.ScheduledAt.UTC()]++
		}
	}
	if started[tick] != 1 || missed[tick] != 0 {
		t.Errorf("tick %s: %d runs started, %d missed events; want its run once and no missed event", tick.Format(time.TimeOnly), started[tick], missed[tick])
	}
	if started[next] != 1 {
		t.Errorf("tick %s: %d runs started, want 1", next.Format(time.TimeOnly), started[next])
	}
	state, err := readState(t.Context(), b.State, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if state.Fires != 2 || state.Missed != 0 {
		t.Errorf("state: %d fires, %d missed; want 2 fires, 0 missed", state.Fires, state.Missed)
	}
}
