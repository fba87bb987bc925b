package cron

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus/bustest"
)

// starts records the starts of workflow runs a scheduler asked for.
type starts struct {
	mu    sync.Mutex
	calls []startCall
}

type startCall struct {
	Job, Workflow, Key string
	Tick               time.Time
	Manual             bool
}

func (s *starts) StartTick(_ context.Context, j Job, tick time.Time, key string, manual bool) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
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
