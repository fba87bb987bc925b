package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

const heartbeatUsage = `usage: agentwork heartbeat <command> [flags]

commands:
  status                enabled, interval, active hours, next fire, last outcome
  wake [--wait]         run a heartbeat now (the schedule does not move; active
                        hours and enabled are ignored, the checklist still counts)
  history [--limit N]   latest runs, skips and errors, newest first
  pause [--reason ..]   pass over the scheduled heartbeats until resume
                        (wake still runs)
  resume                lift a pause, by hand or the budget's (and start
                        today's count of tokens afresh)
  checklist             the checklist: where it lives, its revision, items,
                        why a run would skip it, and its text (edit it in the
                        console, with PUT /v1/heartbeat/checklist, or in the file)

Every command takes --name (default "default"), --data-dir / --url / --config
to find the server, and --json.`

// cmdHeartbeat implements `agentwork heartbeat status|wake|history|pause|resume|checklist` over the
// heartbeat NATS service of a running server.
func cmdHeartbeat(ctx context.Context, e *env, args []string) error {
	verb, fs, gf, done, err := group{"heartbeat", heartbeatUsage}.verb(e, args)
	if done {
		return err
	}
	cf, asJSON, timeout := &gf.conn, gf.json, gf.timeout
	name := fs.String("name", heartbeat.DefaultName, "the heartbeat's name (heartbeat.name)")
	var run func(ctx context.Context, b *bus.Bus, c *heartbeat.Client) error
	switch verb {
	case "status":
		run = func(ctx context.Context, _ *bus.Bus, c *heartbeat.Client) error {
			return show(e, *asJSON, hbPrintStatus)(c.Status(ctx))
		}
	case "wake":
		wait := fs.Bool("wait", false, "wait for the run's outcome and print it")
		waitFor := fs.Duration("wait-timeout", 5*time.Minute, "how long --wait waits")
		run = func(ctx context.Context, b *bus.Bus, c *heartbeat.Client) error {
			if !*wait {
				w, err := c.Wake(ctx)
				if err != nil {
					return err
				}
				if *asJSON {
					return printJSON(e.stdout, w)
				}
				fmt.Fprintf(e.stdout, "woke heartbeat %s (request %s); see: agentwork heartbeat history\n", w.Name, w.ID)
				return nil
			}
			return hbWakeAndWait(ctx, e, b, c, *waitFor, *asJSON)
		}
	case "history":
		limit := fs.Int("limit", heartbeat.DefaultHistoryLimit, fmt.Sprintf("how many runs (at most %d)", heartbeat.MaxHistoryLimit))
		run = func(ctx context.Context, _ *bus.Bus, c *heartbeat.Client) error {
			if *limit < 1 || *limit > heartbeat.MaxHistoryLimit {
				return usageError{fmt.Sprintf("heartbeat history --limit: %d: want 1-%d", *limit, heartbeat.MaxHistoryLimit)}
			}
			runs, err := c.History(ctx, *limit)
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(e.stdout, heartbeat.HistoryResult{Runs: runs})
			}
			hbPrintHistory(e.stdout, runs)
			return nil
		}
	case "pause":
		reason := fs.String("reason", "", "why (shown in heartbeat status)")
		run = func(ctx context.Context, _ *bus.Bus, c *heartbeat.Client) error {
			return show(e, *asJSON, func(w io.Writer, st heartbeat.Status) {
				fmt.Fprintf(w, "paused heartbeat %s (%s); resume: %s\n", st.Name, st.PausedReason, heartbeat.ResumeCommand(st.Name))
			})(c.Pause(ctx, *reason))
		}
	case "resume":
		run = func(ctx context.Context, _ *bus.Bus, c *heartbeat.Client) error {
			return show(e, *asJSON, func(w io.Writer, st heartbeat.Status) {
				fmt.Fprintf(w, "heartbeat %s resumed; next fire %s\n", st.Name, hbTime(st.NextFire))
			})(c.Resume(ctx))
		}
	case "checklist":
		run = func(ctx context.Context, _ *bus.Bus, c *heartbeat.Client) error {
			return show(e, *asJSON, hbPrintChecklist)(c.Checklist(ctx))
		}
	default:
		fmt.Fprintln(e.stderr, heartbeatUsage)
		return usageError{fmt.Sprintf("heartbeat: unknown command %q (want status, wake, history, pause, resume or checklist)", verb)}
	}
	pos, err := parseFlags(fs, args[1:])
	if err != nil {
		return quietHelp(err)
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("heartbeat %s: unexpected argument %q (the heartbeat is chosen with --name)", verb, pos[0])}
	}
	if err := bus.CheckToken("--name", *name); err != nil {
		return usageError{"heartbeat " + verb + ": " + err.Error()}
	}
	dctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	b, err := cf.dial(dctx)
	if err != nil {
		return err
	}
	defer b.Close()
	if verb == "wake" {
		// --wait has its own timeout; the server round trip has *timeout.
		return run(ctx, b, heartbeat.NewClient(b, *name))
	}
	return run(dctx, b, heartbeat.NewClient(b, *name))
}

// hbWakeAndWait wakes the heartbeat and prints the outcome of that run. It
// subscribes to the outcomes first, so a fast run is not missed.
func hbWakeAndWait(ctx context.Context, e *env, b *bus.Bus, c *heartbeat.Client, wait time.Duration, asJSON bool) error {
	outcomes := make(chan *nats.Msg, 64)
	sub, err := b.Conn().ChanSubscribe(b.Subjects.Event(bus.SourceHeartbeat, "*"), outcomes)
	if err != nil {
		return fmt.Errorf("heartbeat wake: subscribe to outcomes: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := b.Conn().Flush(); err != nil {
		return err
	}
	w, err := c.Wake(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "woke heartbeat %s (request %s); waiting for the outcome…\n", w.Name, w.ID)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("heartbeat wake: no outcome within %s; the request %s is still queued (see `agentwork heartbeat history`)", wait, w.ID)
		case m := <-outcomes:
			ev, err := bus.DecodeEvent(m.Data)
			if err != nil || ev.CausationID != w.ID {
				continue
			}
			return printOutcome(e, ev, asJSON)
		}
	}
}

func hbPrintStatus(w io.Writer, st heartbeat.Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	state := "enabled"
	if !st.Enabled {
		state = "disabled (runs only on wake)"
	}
	if st.Paused {
		state = "paused (runs only on wake); resume: " + heartbeat.ResumeCommand(st.Name)
	}
	row("heartbeat", st.Name)
	row("status", state)
	row("every", hbDuration(st.Every))
	hours := st.ActiveHours
	if st.ActiveHours != "always" {
		if st.ActiveNow {
			hours += " (open now)"
		} else {
			hours += " (closed now)"
		}
	}
	row("active hours", hours)
	row("checklist", st.Checklist)
	row("output mode", st.OutputMode)
	row("overlap", st.Overlap)
	row("targets", strings.Join(st.Targets, ", "))
	row("tools", strings.Join(st.Tools, ", "))
	row("paused", st.PausedReason)
	var today int64
	if st.Spent != nil {
		today = st.Spent.Tokens
		row("tokens today", fmt.Sprintf("%d in %d run(s) (day in %s)", today, st.Spent.Runs, st.BudgetZone))
	}
	if st.Budget.DailyTokens > 0 {
		row("budget", fmt.Sprintf("%d tokens a day (%s), %d left today", st.Budget.DailyTokens, st.BudgetZone, max(st.Budget.DailyTokens-today, 0)))
	}
	switch {
	case st.Enabled && st.Paused && st.PausedUntil != nil:
		// Ticks before the pause's end pass without a run.
		row("next run", "the first tick from "+hbTime(*st.PausedUntil))
	case st.Enabled && !st.Paused:
		row("next fire", hbTime(st.NextFire))
	}
	row("last fire", hbTime(st.LastFire))
	if r := st.Running; r != nil {
		row("running", fmt.Sprintf("run %s on %s since %s", r.RunID, r.Owner, hbTime(r.Since)))
	}
	if lr := st.LastRun; lr != nil {
		out := lr.Outcome
		if lr.Reason != "" {
			out += " (" + lr.Reason + ")"
		}
		out += " at " + hbTime(lr.Ended)
		if lr.Manual {
			out += ", woken"
		}
		row("last run", out)
		switch {
		case lr.Text != "":
			row("sent", oneLine(lr.Text, 200))
		case lr.Detail != "":
			row("detail", oneLine(lr.Detail, 200))
		}
	} else {
		row("last run", "none yet")
	}
	if st.ConsecutiveErrors > 0 {
		row("failing", fmt.Sprintf("%d run(s) in a row", st.ConsecutiveErrors))
	}
	_ = tw.Flush()
}

func hbPrintHistory(w io.Writer, runs []agentwork.Record) {
	if len(runs) == 0 {
		fmt.Fprintln(w, "no heartbeat runs yet (run one: agentwork heartbeat wake --wait)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tOUTCOME\tTICK\tDETAIL")
	for _, e := range runs {
		r := e.Result
		tick := "-"
		if r.ScheduledAt != nil {
			tick = r.ScheduledAt.Local().Format("15:04:05")
		}
		if r.Manual {
			tick = "wake"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Time.Local().Format("2006-01-02 15:04:05"), r.Outcome, tick, oneLine(runDetail(r), 100))
	}
	_ = tw.Flush()
}

// hbDuration shortens "30m0s" to "30m" and "1h0m0s" to "1h".
func hbDuration(s string) string {
	d, err := time.ParseDuration(s)
	if err != nil {
		return s
	}
	out := d.String()
	if strings.HasSuffix(out, "m0s") {
		out = strings.TrimSuffix(out, "0s")
	}
	if strings.HasSuffix(out, "h0m") {
		out = strings.TrimSuffix(out, "0m")
	}
	return out
}

func hbTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format("2006-01-02 15:04:05 MST")
}

// hbPrintChecklist prints where the checklist lives, whether a run can
// use it, and its text.
func hbPrintChecklist(w io.Writer, v heartbeat.ChecklistView) {
	where := "file " + v.Path
	if v.Source == heartbeat.SourceMemory {
		where = "memory: " + v.Document + " (filled from " + v.Path + " the first time)"
	}
	fmt.Fprintf(w, "checklist:  %s\n", where)
	rev := v.Revision
	if rev == "" {
		rev = "none (it does not exist)"
	}
	fmt.Fprintf(w, "revision:   %s\n", rev)
	fmt.Fprintf(w, "items:      %d\n", v.Items)
	if v.Status != "" {
		fmt.Fprintf(w, "status:     %s: %s\n", v.Status, v.Detail)
	}
	if v.Text != "" {
		fmt.Fprintf(w, "\n%s", v.Text)
		if !strings.HasSuffix(v.Text, "\n") {
			fmt.Fprintln(w)
		}
	}
}
