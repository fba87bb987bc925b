package cron

// Jobs of origin workflow: a workflow's cron trigger is a job of this
// scheduler, so its ticks have everything a job's ticks have (time zone
// and DST, catch-up, one fire per tick across instances, pause and resume,
// missed ticks recorded), and only what a tick does differs: it starts a
// workflow run through a Starter instead of publishing a runner request.

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Starter starts the workflow run of a tick of a job of origin workflow.
// Implementations must make the start idempotent per key (the same key:
// the same run, never a second), since a fire is handed out again when
// anything after it fails. Safe for concurrent use; it returns promptly
// when ctx ends.
type Starter interface {
	// StartTick starts a run of workflow j.Workflow for the tick. key is
	// the tick's idempotency key (MsgID of the job and tick); "" for a run
	// by hand (manual), which is a run of its own each time. It returns
	// the run's id.
	StartTick(ctx context.Context, j Job, tick time.Time, key string, manual bool) (run string, err error)
	// ForgoTick settles a tick recorded as missed: it makes the tick's
	// run (key, as StartTick has it) one that never starts, unless it
	// exists, and reports whether it did (forgone false: an earlier try
	// started the run, and the tick is fired, not missed). A tick is so
	// either run or missed, never both.
	ForgoTick(ctx context.Context, j Job, tick time.Time, key string) (forgone bool, err error)
}

// WithWorkflows gives the scheduler the jobs of the workflows' cron
// triggers (origin workflow, Job.Workflow set, no prompt) and the Starter
// their ticks start runs with. Like config jobs, they are kept in the
// config jobs' index (not the jobs bucket) and those the config no longer
// has are removed with their state and timers;
// the API lists, pauses, resumes and runs them, and refuses to change or
// delete them. New checks them; an id a config job has too is an error.
func WithWorkflows(jobs []Job, start Starter) Option {
	return func(s *Scheduler) { s.wfJobs, s.starter = jobs, start }
}

// checkWorkflowJobs validates the jobs of WithWorkflows.
func (s *Scheduler) checkWorkflowJobs() error {
	ids := map[string]bool{}
	for _, j := range s.cfg.Jobs {
		ids[j.ID] = true
	}
	var errs []error
	for _, j := range s.wfJobs {
		p := fmt.Sprintf("workflows.%s.on: cron job %s: ", j.Workflow, j.ID)
		if j.Workflow == "" {
			errs = append(errs, fmt.Errorf("%sno workflow named", p))
		}
		if err := j.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s%w", p, err))
		}
		if ids[j.ID] {
			errs = append(errs, fmt.Errorf("%sthe id is taken by another job of the config; rename one", p))
		}
		ids[j.ID] = true
	}
	if len(s.wfJobs) > 0 && s.starter == nil {
		errs = append(errs, errors.New("cron: jobs of workflows without a Starter"))
	}
	return errors.Join(errs...)
}

// startWorkflow starts the run of a tick of the workflow job j.
func (s *Scheduler) startWorkflow(ctx context.Context, j Job, tick time.Time, manual bool) (string, error) {
	if s.starter == nil {
		return "", fmt.Errorf("job %s starts workflow %s, and this instance runs no workflows (its config has no workflow %s)", j.ID, j.Workflow, j.Workflow)
	}
	key := ""
	if !manual {
		key = MsgID(j.ID, tick, 0)
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	return s.starter.StartTick(ctx, j, tick, key, manual)
}
