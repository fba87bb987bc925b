package agentwork

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/tools"
)

// Where a run's notifications go: its targets, and queueing for them.

// knownTargets returns the run's targets that name configured connectors.
func (r *Runner) knownTargets(run *Run) []string {
	var out []string
	for _, t := range run.Targets {
		if name, _ := connectors.SplitTarget(t); len(r.targets) == 0 || contains(r.targets, name) {
			out = append(out, t)
		}
	}
	return out
}

func (r *Runner) targetsFor(req Request, pol Policy) []string {
	switch {
	case len(req.Targets) > 0:
		return req.Targets
	case len(pol.Targets) > 0:
		return pol.Targets
	case len(r.cfg.Targets) > 0:
		return r.cfg.Targets
	default:
		return r.targets
	}
}

// unknownTargets returns the targets that name no connector, when the
// runner knows its connectors (WithConnectors).
func (r *Runner) unknownTargets(targets []string) []string {
	var out []string
	for _, t := range targets {
		if name, _ := connectors.SplitTarget(t); len(r.targets) > 0 && !contains(r.targets, name) {
			out = append(out, t)
		}
	}
	return out
}

// enqueue queues text for every known target of the run. Unknown targets
// (config validation rejects them; a request may still name one) are left
// out with a warning. If queueing fails for any known target the whole call
// fails, to be retried: what was stored is stored once (Nats-Msg-Id).
// The runner's secrets are cut out of text (a notice's were already, before
// its dedup key was taken; an alert quotes an error).
func (r *Runner) enqueue(ctx context.Context, run *Run, text, urgency, kind string) ([]string, error) {
	text = r.redact(text)
	known := r.knownTargets(run)
	if len(known) < len(run.Targets) {
		r.log.Warn("notification not queued for unknown targets", zap.String("run", run.ID), zap.Strings("targets", run.Targets), zap.Strings("connectors", r.targets))
	}
	var ids []string
	var errs []error
	for _, t := range known {
		n := connectors.Notification{
			ID: connectors.NotificationID(run.ID, kind, t), RunID: run.ID, RequestID: run.Request.ID,
			Source: run.Request.Source, Name: run.Request.Name, Text: text, Urgency: urgency,
			Truncated: kind == "" && run.Notice != nil && run.Notice.Truncated,
			Target:    t, Targets: known, Time: r.now(), Metadata: run.Request.Metadata,
		}
		if run.Notice != nil && kind == "" {
			n.DedupKey = run.Notice.DedupKey
		}
		if err := connectors.Enqueue(ctx, r.bus, n); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t, err))
			continue
		}
		ids = append(ids, n.ID)
	}
	if len(errs) > 0 {
		return ids, errors.Join(errs...)
	}
	return ids, nil
}

// Alert queues text as an important notification of run for each of its
// targets, from outside the runner: what a trigger's observer says about
// the trigger itself (a cron job paused after its failures, a heartbeat
// at its budget). kind tells one run's alerts apart (".cron-budget"): the
// same kind for the same run and target is stored once. It returns the
// targets' errors joined.
func Alert(ctx context.Context, b *bus.Bus, run *Run, kind, text string, now time.Time) error {
	var errs []error
	for _, t := range run.Targets {
		n := connectors.Notification{
			ID: connectors.NotificationID(run.ID, kind, t), RunID: run.ID, RequestID: run.Request.ID,
			Source: run.Request.Source, Name: run.Request.Name, Text: text, Urgency: tools.UrgencyImportant,
			Target: t, Time: now, Metadata: run.Request.Metadata,
		}
		if err := connectors.Enqueue(ctx, b, n); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t, err))
		}
	}
	return errors.Join(errs...)
}
