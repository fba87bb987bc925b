package workflow

// How steps and runs end: a launch's result applied (success with its
// output checked, failure, retry or final), an execution stopped, the
// run ended, and a run retried from a step.

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// finished applies the result of a launch.
func (d *decider) finished(step string, item, attempt int, output any, se *StepError) error {
	ref, ok := d.index[step]
	if !ok {
		return fmt.Errorf("workflow: run %s has no step %q", d.run.ID, step)
	}
	if d.run.Status.Ended() {
		return nil
	}
	s := ref.step
	x := d.exec(s, item)
	if x == nil || x.Status != StepRunning || x.Attempt != attempt {
		return nil // stale: an old attempt, or a second copy
	}
	item = itemOf(s, item)
	d.changed = true
	d.cancelTimer(TimerFired{Kind: TimerStepTimeout, Step: s.ID, Item: item, Attempt: attempt, Gen: d.run.Gen})
	if se != nil {
		if se.Kind == "" {
			se = &StepError{Kind: ErrPermanent, Message: se.Message}
		}
		d.failed(s, item, x, se)
		return nil
	}
	if s.Agent != nil && s.Agent.Output != nil {
		v, err := checkOutput(s.Agent.Output, output)
		if err != nil {
			if !x.Corrected {
				x.Corrected = true
				x.Corrections++
				d.launch(s, item, attempt+1, "Your reply did not meet the required JSON schema: "+err.Error()+". Reply again with only a JSON value that meets it.")
				return nil
			}
			d.final(s, item, x, &StepError{Kind: ErrSchema, Message: "the reply did not meet the output schema after one corrective retry: " + err.Error()})
			return nil
		}
		output = v
	}
	d.succeed(s, item, x, output)
	return nil
}

func (d *decider) succeed(s *Step, item int, x *Exec, output any) {
	v, err := jsonValue(output)
	if err != nil {
		v = fmt.Sprintf("[output dropped: %v]", err)
	}
	x.Output, x.Cut = bound(v)
	x.Status, x.Error, x.EndedAt, x.WaitUntil = StepDone, nil, d.now, time.Time{}
	d.emitStep("finished", s, item, x)
}

// checkOutput parses an agent's reply as JSON (a fenced ```json block
// too) and checks it against schema.
func checkOutput(schema map[string]any, output any) (any, error) {
	if s, ok := output.(string); ok {
		text := strings.TrimSpace(s)
		if strings.HasPrefix(text, "```") {
			text = strings.TrimPrefix(text, "```json")
			text = strings.TrimPrefix(text, "```")
			text = strings.TrimSuffix(strings.TrimSpace(text), "```")
		}
		var v any
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			return nil, fmt.Errorf("the reply is not JSON (%v)", err)
		}
		output = v
	}
	r, err := resolveSchema(schema)
	if err != nil {
		return nil, err
	}
	v, err := jsonValue(output)
	if err != nil {
		return nil, err
	}
	if err := r.Validate(v); err != nil {
		return nil, err
	}
	return v, nil
}

// failed handles a failed attempt: a retry after a backoff when the
// error is retryable and attempts are left, else the end.
func (d *decider) failed(s *Step, item int, x *Exec, se *StepError) {
	if r := s.Retry; r != nil && se.Kind.retryable() {
		tries := x.Attempt - x.Corrections
		if tries < r.Attempts {
			x.Status, x.Error = StepWaiting, se
			at := d.now.Add(r.Delay(tries))
			x.WaitUntil = at
			d.setTimer(TimerFired{Kind: TimerRetry, Step: s.ID, Item: item, Attempt: x.Attempt + 1, Gen: d.run.Gen}, at)
			return
		}
	}
	d.final(s, item, x, se)
}

// final ends an execution that failed for good.
func (d *decider) final(s *Step, item int, x *Exec, se *StepError) {
	d.changed = true
	switch se.Kind {
	case ErrTimeout:
		x.Status = StepTimedOut
	case ErrInterrupted:
		x.Status = StepInterrupted
	case ErrCancelled:
		x.Status = StepCancelled
	default:
		x.Status = StepFailed
	}
	x.Error, x.EndedAt, x.WaitUntil = se, d.now, time.Time{}
	d.cancelTimersOf(s.ID, item)
	d.emitStep("finished", s, item, x)
}

// stop cancels an execution in flight (or not yet started).
func (d *decider) stop(s *Step, item int, x *Exec) {
	// Only a launched leaf has work in flight: not a parallel step, not a
	// foreach step as a whole, not a wait (its timer is all there is).
	leaf := s.Parallel == nil && (s.Foreach == "" || item >= 0) && s.Wait == 0 && s.Until == ""
	if x.Status == StepRunning && leaf {
		d.add(CancelStep{Work: Work{Run: d.run.ID, Step: s.ID, Item: item, Attempt: x.Attempt}, Target: d.workKey(s.ID, item, x.Attempt)})
	}
	if s.Approval != nil && x.Status == StepWaiting && x.Approval != "" {
		reason := "its workflow step was cancelled"
		if d.run.Error != nil {
			reason = "workflow run " + d.run.ID + " ended: " + d.run.Error.Message
		}
		d.add(CancelApproval{Work: Work{Run: d.run.ID, Step: s.ID, Item: item, Attempt: x.Attempt}, ID: x.Approval, Reason: reason})
	}
	d.cancelTimersOf(s.ID, item)
	x.Status, x.EndedAt, x.WaitUntil = StepCancelled, d.now, time.Time{}
	x.Error = &StepError{Kind: ErrCancelled, Message: "cancelled"}
	d.changed = true
}

// stopAll cancels every step of steps in flight, and their items and
// branches.
func (d *decider) stopAll(steps []Step) {
	for i := range steps {
		s := &steps[i]
		st := d.state(s)
		if !st.Status.active() {
			continue
		}
		for j := range st.Items {
			if it := &st.Items[j]; it.Status.active() {
				d.stop(s, j, it)
			}
		}
		for _, b := range slices.Sorted(maps.Keys(s.Parallel)) {
			d.stopAll(s.Parallel[b])
		}
		d.stop(s, -1, &st.Exec)
		d.emitStep("finished", s, -1, &st.Exec)
	}
}

// end ends the run with status: timers cancelled, steps in flight
// cancelled, the outcome emitted and, for a failure, the alert.
func (d *decider) end(status RunStatus, se *StepError, failedStep string) {
	d.changed = true
	d.run.Error = se // read by stop, for the reasons it gives
	d.stopAll(d.run.Def.Steps)
	for _, key := range slices.Sorted(maps.Keys(d.run.Timers)) {
		d.cancelTimer(d.run.Timers[key])
	}
	d.run.Status, d.run.EndedAt = status, d.now
	d.run.Error, d.run.FailedStep = se, failedStep
	data := map[string]any{"status": string(status)}
	if failedStep != "" {
		data["failed_step"] = failedStep
	}
	if se != nil {
		data["error"] = map[string]any{"kind": string(se.Kind), "message": se.Message}
	}
	d.emit(d.runKey(string(status)), string(status), data)
	if (status == RunFailed || status == RunTimedOut) && len(d.run.Def.Targets) > 0 {
		text := fmt.Sprintf("Workflow %s, run %s, ended %s", d.run.Workflow, d.run.ID, status)
		if failedStep != "" {
			text += " at step " + failedStep
		}
		if se != nil {
			text += ": " + se.Message
		}
		d.add(Alert{IdempotencyKey: d.runKey("alert"), Targets: d.run.Def.Targets, Text: text})
	}
}

// retry restarts an ended run from a top-level step.
func (d *decider) retry(from string) error {
	switch d.run.Status {
	case RunFailed, RunCancelled, RunTimedOut:
	default:
		return fmt.Errorf("%w (run %s is %s)", ErrNotRetryable, d.run.ID, d.run.Status)
	}
	top := -1
	if from != "" {
		ref, ok := d.index[from]
		if !ok {
			return fmt.Errorf("workflow: run %s has no step %q", d.run.ID, from)
		}
		if d.run.Def.Steps[ref.top].ID != from {
			return fmt.Errorf("workflow: step %q is inside step %q; retry from a top-level step", from, d.run.Def.Steps[ref.top].ID)
		}
		top = ref.top
	} else {
		if ref, ok := d.index[d.run.FailedStep]; ok {
			top = ref.top
		}
		for i := range d.run.Def.Steps {
			if st := d.state(&d.run.Def.Steps[i]); top < 0 && st.Status != StepDone && st.Status != StepSkipped {
				top = i
			}
		}
		if top < 0 {
			top = len(d.run.Def.Steps) - 1
		}
	}
	for i := range top {
		s := &d.run.Def.Steps[i]
		switch st := d.state(s); st.Status {
		case StepDone, StepSkipped:
		default:
			if s.OnFailure != OnFailureContinue || !st.Status.Ended() {
				return fmt.Errorf("workflow: step %q before %q ended %s; retry from %q", s.ID, d.run.Def.Steps[top].ID, st.Status, s.ID)
			}
		}
	}
	d.run.Gen++
	for i := top; i < len(d.run.Def.Steps); i++ {
		forEachStep(d.run.Def.Steps[i:i+1], "", func(s *Step, _ string) {
			k, _ := s.Kind()
			d.run.Steps[s.ID] = &StepState{Kind: k, Exec: Exec{Status: StepPending}}
		})
	}
	d.run.Status, d.run.EndedAt, d.run.Error, d.run.FailedStep, d.run.Output = RunRunning, time.Time{}, nil, "", nil
	d.changed = true
	d.emit(d.runKey("started"), "started", map[string]any{"retry_from": d.run.Def.Steps[top].ID})
	if t := d.run.Def.Timeout; t > 0 {
		d.setTimer(TimerFired{Kind: TimerRunTimeout, Gen: d.run.Gen}, d.now.Add(t))
	}
	return nil
}
