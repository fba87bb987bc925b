package mcpserver

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/agentwork/agentwork/workflow"
)

// schedule turns cron, every, at or in (at most one; required when
// required) into the job's schedule fields.
func (s *Server) schedule(cron, every, at, in string, required bool) (map[string]any, error) {
	n := 0
	for _, v := range []string{cron, every, at, in} {
		if v != "" {
			n++
		}
	}
	switch {
	case n > 1:
		return nil, errorf(CodeInvalid, "set only one of cron, every, at and in")
	case n == 0 && required:
		return nil, errorf(CodeInvalid, "say when: set one of cron (e.g. \"0 2 * * *\"), every (e.g. \"1h\"), at (an RFC 3339 time) or in (e.g. \"5m\")")
	case n == 0:
		return nil, nil
	}
	switch {
	case cron != "":
		return map[string]any{"schedule": cron, "at": nil}, nil
	case every != "":
		d, err := time.ParseDuration(every)
		if err != nil || d <= 0 {
			return nil, errorf(CodeInvalid, "every %q: want a positive duration such as 30m or 24h", every)
		}
		return map[string]any{"schedule": "@every " + d.String(), "at": nil}, nil
	case at != "":
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return nil, errorf(CodeInvalid, "at %q: want an RFC 3339 time such as 2026-05-04T09:00:00+02:00", at)
		}
		return map[string]any{"at": t.UTC(), "schedule": nil}, nil
	default:
		d, err := time.ParseDuration(in)
		if err != nil || d <= 0 {
			return nil, errorf(CodeInvalid, "in %q: want a positive duration such as 5s, 10m or 2h", in)
		}
		return map[string]any{"at": s.now().Add(d).UTC().Truncate(time.Second).Add(time.Second), "schedule": nil}, nil
	}
}

// checkJob checks the targets and tools of a job against c's grant.
func checkJob(c Caller, targets, tools []string) error {
	if c.admin() {
		return nil
	}
	for _, t := range targets {
		if c.AllowsTarget != nil && !c.AllowsTarget(t) {
			return errorf(CodeForbidden, "credential %q may not send to %q (%s.targets); nothing changed: name a target of its grant, or leave targets out for the configured ones", c.Name, t, c.Field)
		}
	}
	for _, t := range tools {
		if !matchTool(c.Tools, t) {
			return errorf(CodeForbidden, "credential %q may not give its jobs the tool %q (%s.mcp.tools); nothing changed: leave tools out for the default tools, or ask the operator to add it", c.Name, t, c.Field)
		}
	}
	return nil
}

func (s *Server) createJob(ctx context.Context, c Caller, in CreateJobIn) (JobOut, error) {
	if err := need("id", in.ID); err != nil {
		return JobOut{}, err
	}
	if err := need("prompt", in.Prompt); err != nil {
		return JobOut{}, err
	}
	when, err := s.schedule(in.Cron, in.Every, in.At, in.In, true)
	if err != nil {
		return JobOut{}, err
	}
	if err := checkJob(c, in.Targets, in.Tools); err != nil {
		return JobOut{}, err
	}
	job := map[string]any{"id": in.ID, "prompt": in.Prompt}
	for k, v := range when {
		if v != nil {
			job[k] = v
		}
	}
	set := func(k string, v any, ok bool) {
		if ok {
			job[k] = v
		}
	}
	set("name", in.Name, in.Name != "")
	set("timezone", in.Timezone, in.Timezone != "")
	set("targets", in.Targets, len(in.Targets) > 0)
	set("model", in.Model, in.Model != "")
	set("tools", in.Tools, len(in.Tools) > 0)
	set("deliver", in.Deliver, in.Deliver != "")
	set("delete_after_run", true, in.DeleteAfterRun)
	var st jobStatus
	err = s.call(ctx, c, http.MethodPost, "/v1/jobs", nil, job, &st)
	return JobOut{Job: st.job()}, err
}

func (s *Server) updateJob(ctx context.Context, c Caller, in UpdateJobIn) (JobOut, error) {
	if err := need("id", in.ID); err != nil {
		return JobOut{}, err
	}
	patch, err := s.schedule(in.Cron, in.Every, in.At, in.In, false)
	if err != nil {
		return JobOut{}, err
	}
	if patch == nil {
		patch = map[string]any{}
	}
	var targets, tools []string
	if in.Targets != nil {
		targets = *in.Targets
	}
	if in.Tools != nil {
		tools = *in.Tools
	}
	if err := checkJob(c, targets, tools); err != nil {
		return JobOut{}, err
	}
	for k, v := range map[string]any{"name": in.Name, "prompt": in.Prompt, "timezone": in.Timezone, "targets": in.Targets, "model": in.Model, "tools": in.Tools, "deliver": in.Deliver, "enabled": in.Enabled} {
		switch p := v.(type) {
		case *string:
			if p != nil {
				patch[k] = *p
			}
		case *[]string:
			if p != nil {
				patch[k] = *p
			}
		case *bool:
			if p != nil {
				patch[k] = *p
			}
		}
	}
	if len(patch) == 0 {
		return JobOut{}, errorf(CodeInvalid, "nothing to change: give at least one field besides id")
	}
	var st jobStatus
	err = s.call(ctx, c, http.MethodPatch, "/v1/jobs/"+esc(in.ID), http.Header{"Content-Type": {"application/merge-patch+json"}}, patch, &st)
	return JobOut{Job: st.job()}, err
}

func (s *Server) pauseJob(ctx context.Context, c Caller, in PauseIn) (JobOut, error) {
	if err := need("id", in.ID); err != nil {
		return JobOut{}, err
	}
	if in.Reason == "" {
		in.Reason = "paused through MCP by " + c.Name
	}
	var st jobStatus
	err := s.call(ctx, c, http.MethodPost, "/v1/jobs/"+esc(in.ID)+"/pause", nil, map[string]string{"reason": in.Reason}, &st)
	return JobOut{Job: st.job()}, err
}

func (s *Server) resumeJob(ctx context.Context, c Caller, in IDIn) (JobOut, error) {
	if err := need("id", in.ID); err != nil {
		return JobOut{}, err
	}
	var st jobStatus
	err := s.call(ctx, c, http.MethodPost, "/v1/jobs/"+esc(in.ID)+"/resume", nil, nil, &st)
	return JobOut{Job: st.job()}, err
}

func (s *Server) deleteJob(ctx context.Context, c Caller, in IDIn) (DeletedOut, error) {
	if err := need("id", in.ID); err != nil {
		return DeletedOut{}, err
	}
	err := s.call(ctx, c, http.MethodDelete, "/v1/jobs/"+esc(in.ID), nil, nil, nil)
	return DeletedOut{Deleted: in.ID}, err
}

// waitSlot checks a call's wait_seconds and, for a call that waits, takes
// one of its caller's wait slots; release gives it back (a no-op when the
// call does not wait).
func (s *Server) waitSlot(c Caller, seconds int) (wait time.Duration, release func(), err error) {
	if wait, err = checkWait(seconds); err != nil {
		return 0, nil, err
	}
	if wait == 0 {
		return 0, func() {}, nil
	}
	if release, err = s.acquireWait(c); err != nil {
		return 0, nil, err
	}
	return wait, release, nil
}

func checkWait(w int) (time.Duration, error) {
	if w < 0 || w > MaxWait {
		return 0, errorf(CodeInvalid, "wait_seconds %d: want 0 to %d", w, MaxWait)
	}
	return time.Duration(w) * time.Second, nil
}

func keyHeader(key string) http.Header {
	if key == "" {
		return nil
	}
	return http.Header{"Idempotency-Key": {key}}
}

func (s *Server) runJob(ctx context.Context, c Caller, in RunJobIn) (StartedOut, error) {
	if err := need("id", in.ID); err != nil {
		return StartedOut{}, err
	}
	wait, release, err := s.waitSlot(c, in.WaitSeconds)
	if err != nil {
		return StartedOut{}, err
	}
	defer release()
	var r struct {
		RequestID string `json:"request_id"`
		Duplicate bool   `json:"duplicate"`
	}
	if err := s.call(ctx, c, http.MethodPost, "/v1/jobs/"+esc(in.ID)+"/run", keyHeader(in.IdempotencyKey), nil, &r); err != nil {
		return StartedOut{}, err
	}
	return s.waitRun(ctx, c, StartedOut{RequestID: r.RequestID, Duplicate: r.Duplicate, Status: "queued"}, wait)
}

func (s *Server) sendTask(ctx context.Context, c Caller, in SendTaskIn) (StartedOut, error) {
	wait, release, err := s.waitSlot(c, in.WaitSeconds)
	if err != nil {
		return StartedOut{}, err
	}
	defer release()
	task := map[string]any{"prompt": in.Prompt}
	for k, v := range map[string]string{"name": in.Name, "source": in.Source, "deliver": in.Deliver} {
		if v != "" {
			task[k] = v
		}
	}
	if len(in.Targets) > 0 {
		task["targets"] = in.Targets
	}
	if len(in.Metadata) > 0 {
		task["metadata"] = in.Metadata
	}
	var r struct {
		ID        string `json:"id"`
		Duplicate bool   `json:"duplicate"`
	}
	if err := s.call(ctx, c, http.MethodPost, "/v1/tasks", keyHeader(in.IdempotencyKey), task, &r); err != nil {
		return StartedOut{}, err
	}
	return s.waitRun(ctx, c, StartedOut{RequestID: r.ID, Duplicate: r.Duplicate, Status: "queued"}, wait)
}

// waitRun waits up to wait for the outcome of the run of out's request.
func (s *Server) waitRun(ctx context.Context, c Caller, out StartedOut, wait time.Duration) (StartedOut, error) {
	if wait <= 0 {
		return out, nil
	}
	err := s.until(ctx, wait, func() (bool, error) {
		var rr runReply
		err := s.call(ctx, c, http.MethodGet, "/v1/runs/"+esc(out.RequestID), nil, nil, &rr)
		if e, ok := err.(*Error); ok && e.Code == CodeNotFound {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		run, _ := rr.Run.run()
		out.Run, out.Finished, out.Status = &run, true, run.Outcome
		return true, nil
	})
	if err == nil && !out.Finished {
		out.Status = fmt.Sprintf("still running after %s: call get_run with request_id %s later", wait, out.RequestID)
	}
	return out, err
}

// until calls done until it reports true, with growing pauses, for at
// most wait (then it returns nil: the caller reports "still running").
func (s *Server) until(ctx context.Context, wait time.Duration, done func() (bool, error)) error {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	pause := s.poll
	for {
		ok, err := done()
		if ok || err != nil {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return errorf(CodeUnavailable, "the call was cancelled while waiting")
		case <-deadline.C:
			t.Stop()
			return nil
		case <-t.C:
		}
		pause = min(2*pause, 2*time.Second)
	}
}

func (s *Server) startWorkflow(ctx context.Context, c Caller, in StartWorkflowIn) (WorkflowStartedOut, error) {
	if err := need("name", in.Name); err != nil {
		return WorkflowStartedOut{}, err
	}
	wait, release, err := s.waitSlot(c, in.WaitSeconds)
	if err != nil {
		return WorkflowStartedOut{}, err
	}
	defer release()
	body := map[string]any{}
	if in.Inputs != nil {
		body["inputs"] = in.Inputs
	}
	var r struct {
		ID        string `json:"id"`
		Duplicate bool   `json:"duplicate"`
	}
	if err := s.call(ctx, c, http.MethodPost, "/v1/workflows/"+esc(in.Name)+"/runs", keyHeader(in.IdempotencyKey), body, &r); err != nil {
		return WorkflowStartedOut{}, err
	}
	out := WorkflowStartedOut{ID: r.ID, Duplicate: r.Duplicate, Status: string(workflow.RunPending)}
	if wait <= 0 {
		return out, nil
	}
	err = s.until(ctx, wait, func() (bool, error) {
		var run workflow.Run
		if err := s.call(ctx, c, http.MethodGet, "/v1/workflow-runs/"+esc(r.ID), nil, nil, &run); err != nil {
			return false, err
		}
		ro := workflowRunOut(run)
		out.Run, out.Status = &ro, ro.Status
		switch run.Status {
		case workflow.RunDone, workflow.RunFailed, workflow.RunCancelled, workflow.RunTimedOut:
			out.Finished = true
		}
		return out.Finished, nil
	})
	if err == nil && !out.Finished {
		out.Status = fmt.Sprintf("still running (%s) after %s: call get_workflow_run with id %s later", out.Status, wait, out.ID)
	}
	return out, err
}

func (s *Server) cancelWorkflowRun(ctx context.Context, c Caller, in CancelIn) (WorkflowRunOut, error) {
	if err := need("id", in.ID); err != nil {
		return WorkflowRunOut{}, err
	}
	if in.Reason == "" {
		in.Reason = "cancelled through MCP by " + c.Name
	}
	var run workflow.Run
	if err := s.call(ctx, c, http.MethodPost, "/v1/workflow-runs/"+esc(in.ID)+"/cancel", nil, map[string]string{"reason": in.Reason}, &run); err != nil {
		return WorkflowRunOut{}, err
	}
	return workflowRunOut(run), nil
}
