package workflow

// The steps that run others: a foreach step's items and a parallel
// step's branches, launched, counted and ended by the decider.

import (
	"fmt"
	"maps"
	"slices"
)

// pump launches a foreach step's items up to its concurrency, and ends
// the step when its items have ended.
func (d *decider) pump(s *Step) {
	st := d.state(s)
	limit := max(s.Concurrency, 1)
	active, failed := 0, -1
	for i := range st.Items {
		switch it := &st.Items[i]; {
		case it.Status.active():
			active++
		case it.Status == StepFailed || it.Status == StepTimedOut || it.Status == StepInterrupted:
			if failed < 0 {
				failed = i
			}
		}
	}
	if failed >= 0 && s.OnFailure != OnFailureContinue {
		// Fail fast: stop the items in flight, start no more.
		for i := range st.Items {
			it := &st.Items[i]
			if it.Status.active() || it.Status == StepPending {
				d.stop(s, i, it)
			}
		}
		it := st.Items[failed]
		d.closeForeach(s, it.Status, &StepError{Kind: it.Error.Kind, Message: fmt.Sprintf("item %d: %s", failed, it.Error.Message)})
		return
	}
	for i := range st.Items {
		if active >= limit {
			break
		}
		if st.Items[i].Status == StepPending {
			d.launch(s, i, 1, "")
			if st.Items[i].Status.active() {
				active++
			}
		}
	}
	for _, it := range st.Items {
		if !it.Status.Ended() {
			return
		}
	}
	if failed >= 0 {
		it := st.Items[failed]
		d.closeForeach(s, it.Status, &StepError{Kind: it.Error.Kind, Message: fmt.Sprintf("item %d: %s", failed, it.Error.Message)})
		return
	}
	d.closeForeach(s, StepDone, nil)
}

func (d *decider) closeForeach(s *Step, status StepStatus, se *StepError) {
	st := d.state(s)
	outs := make([]any, len(st.Items))
	for i, it := range st.Items {
		outs[i] = it.Output
	}
	st.Output, st.Cut = bound(outs)
	st.Status, st.Error, st.EndedAt = status, se, d.now
	d.changed = true
	d.emitStep("finished", s, -1, &st.Exec)
}

// parallel advances each branch of a running parallel step and joins
// them.
func (d *decider) parallel(s *Step) {
	st := d.state(s)
	names := slices.Sorted(maps.Keys(s.Parallel))
	done := true
	for _, b := range names {
		res, failedStep := d.sequence(s.Parallel[b])
		switch res {
		case seqBusy:
			done = false
		case seqFailed:
			for _, other := range names {
				d.stopAll(s.Parallel[other])
			}
			fs := d.run.Steps[failedStep]
			status := fs.Status
			if status == StepCancelled || status == StepSkipped || status == StepDone {
				status = StepFailed
			}
			msg := "failed"
			kind := ErrPermanent
			if fs.Error != nil {
				msg, kind = fs.Error.Message, fs.Error.Kind
			}
			st.Status, st.EndedAt = status, d.now
			st.Error = &StepError{Kind: kind, Message: fmt.Sprintf("branch %s, step %s: %s", b, failedStep, msg)}
			d.changed = true
			d.emitStep("finished", s, -1, &st.Exec)
			return
		}
	}
	if !done {
		return
	}
	out := map[string]any{}
	for _, b := range names {
		steps := s.Parallel[b]
		out[b] = d.run.Steps[steps[len(steps)-1].ID].Output
	}
	d.succeed(s, -1, &st.Exec, out)
}
