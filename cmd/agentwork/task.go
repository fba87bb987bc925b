package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/triggers/cron"
)

func cmdTask(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] != "send" {
		return usageError{`task: want: task send "<prompt>" [--wait]`}
	}
	fs := newFlagSet("task send", e)
	var cf connFlags
	cf.register(fs)
	name := fs.String("name", "default", "task name ([a-z0-9_-])")
	targets := fs.String("targets", "", "comma-separated connector names (default: all)")
	deliver := fs.String("deliver", "", "auto (default: the notify_user messages if the model sends any, else its reply), reply, notify or none")
	dedup := fs.String("dedup-window", "", "do not send the same notification (text, targets) of this task name again within this long, e.g. 1h (default: runner.dedup_window)")
	wait := fs.Bool("wait", false, "wait for the run's outcome and print it")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long --wait waits")
	asJSON := fs.Bool("json", false, "print the outcome event as JSON")
	pos, err := parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
		return usageError{`task send: want exactly one prompt argument, e.g. agentwork task send "check the backups"`}
	}
	req := agentwork.Request{Source: bus.SourceTask, Name: *name, Prompt: pos[0], Deliver: *deliver, DedupWindow: *dedup}
	if *targets != "" {
		req.Targets = strings.Split(*targets, ",")
	}
	if err := req.Validate(); err != nil {
		return usageError{"task send: " + err.Error()}
	}
	b, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer b.Close()

	id := bus.NewID()
	var outcome chan *nats.Msg
	if *wait {
		outcome = make(chan *nats.Msg, 16)
		sub, err := b.Conn().ChanSubscribe(b.Subjects.Event(bus.SourceTask, "*"), outcome)
		if err != nil {
			return fmt.Errorf("task send: subscribe to outcomes: %w", err)
		}
		defer sub.Unsubscribe()
		if err := b.Conn().Flush(); err != nil {
			return err
		}
	}
	pub, err := agentwork.Publish(ctx, b, req, agentwork.PublishOptions{EventID: id, Producer: "agentwork/cli"})
	if err != nil {
		return err
	}
	if !*wait {
		fmt.Fprintf(e.stdout, "queued task %s (request %s)\n", req.Name, pub.ID)
		return nil
	}
	fmt.Fprintf(e.stderr, "queued task %s (request %s); waiting for the outcome…\n", req.Name, pub.ID)
	deadline := time.NewTimer(*timeout)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("task send: no outcome within %s; the request %s is still queued (see `agentwork events tail`)", *timeout, pub.ID)
		case m := <-outcome:
			ev, err := bus.DecodeEvent(m.Data)
			if err != nil || ev.CausationID != pub.ID {
				continue
			}
			return printOutcome(e, ev, *asJSON)
		}
	}
}

func printOutcome(e *env, ev bus.Event, asJSON bool) error {
	if asJSON {
		raw, _ := json.MarshalIndent(ev, "", "  ")
		fmt.Fprintln(e.stdout, string(raw))
	} else {
		var r agentwork.Result
		_ = ev.DecodeData(&r)
		fmt.Fprintln(e.stdout, summarize(ev, r))
	}
	var r agentwork.Result
	_ = ev.DecodeData(&r)
	if r.Outcome == bus.OutcomeError {
		return errors.New("the run failed")
	}
	return nil
}

// summarize renders one run event as a line.
// skipMeaning says in words what a skip reason means for the user.
var skipMeaning = map[string]string{
	agentwork.ReasonAck:       "nothing needs your attention: the model did not call notify_user, so nothing was sent",
	agentwork.ReasonEmpty:     "the model gave nothing to send",
	agentwork.ReasonDuplicate: "nothing new: the same notification was already sent within the dedup window, so it was not sent again",
	agentwork.ReasonBusy:      "the previous run of the same work is still going (overlap: skip)",
	agentwork.ReasonOutside:   "outside the active hours; a wake runs anyway",
	agentwork.ReasonEmptyList: "the checklist has no items, so the model was not called",
	cron.ReasonMissed:         "the tick passed while no instance could fire it, and the job's catch-up policy did not run it",
}

func summarize(ev bus.Event, r agentwork.Result) string {
	head := fmt.Sprintf("%s  %-5s %s/%s", ev.Time.Local().Format("15:04:05"), r.Outcome, r.Source, r.Name)
	switch r.Outcome {
	case bus.OutcomeDone:
		s := head + fmt.Sprintf("  (%dms", r.DurationMS)
		if r.Model != "" {
			s += ", " + r.Model
		}
		s += ")"
		if r.Text != "" {
			s += fmt.Sprintf("\n  sent to %s: %s", strings.Join(r.Targets, ", "), r.Text)
		} else if r.Reply != "" {
			s += "\n  reply (not sent): " + r.Reply
		}
		return s
	case bus.OutcomeSkip:
		s := head + "  reason=" + r.Reason
		if r.Detail != "" {
			s += " (" + r.Detail + ")"
		}
		if why := skipMeaning[r.Reason]; why != "" {
			s += "\n  " + why
		}
		return s
	case bus.OutcomeError:
		return head + fmt.Sprintf("  class=%s  %s", r.Class, r.Error)
	}
	return head + "  " + ev.Type
}
