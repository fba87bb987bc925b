package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/workflow"
)

const workflowUsage = `usage: agentwork workflow <command> [flags]

commands:
  list                              the workflows of the server's config
  show <name>                       one workflow's definition
  run <name> [--input k=v ...] [--input-json '{...}'] [--wait]
                                    start a run (k=v takes the input's declared type:
                                    numbers, true/false, JSON for objects and arrays)
  runs [<name>] [--status s] [--limit n]
                                    the latest runs, newest first
  status <run> [--wait]             a run's step timeline; --wait follows it to its end
  cancel <run>                      cancel a run
  retry <run> [--from <step>]       run a failed, cancelled or timed-out run again from
                                    a step (default: the step that failed)

Every command takes --data-dir / --url / --config to find the server, and --json.
With --wait, the exit status is 1 unless the run ends done.`

// inputFlags collects repeated --input k=v flags.
type inputFlags []string

func (f *inputFlags) String() string     { return strings.Join(*f, ", ") }
func (f *inputFlags) Set(v string) error { *f = append(*f, v); return nil }

// waitTimeout is the default --timeout of the commands that --wait.
const waitTimeout = 30 * time.Minute

func cmdWorkflow(ctx context.Context, e *env, args []string) error {
	verb, fs, gf, done, err := group{"workflow", workflowUsage}.verb(e, args)
	if done {
		return err
	}
	var inputs inputFlags
	var run func(ctx context.Context, b *bus.Bus, c *workflow.Client, pos []string) error
	wait := new(bool)
	one := func(what string, pos []string) (string, error) {
		if len(pos) != 1 {
			return "", usageError{fmt.Sprintf("workflow %s: want one %s argument (see agentwork workflow -h)", verb, what)}
		}
		return pos[0], nil
	}
	switch verb {
	case "list":
		run = func(ctx context.Context, _ *bus.Bus, c *workflow.Client, pos []string) error {
			if len(pos) > 0 {
				return usageError{"workflow list: takes no arguments"}
			}
			return show(e, *gf.json, printWorkflows)(c.List(ctx))
		}
	case "show":
		run = func(ctx context.Context, _ *bus.Bus, c *workflow.Client, pos []string) error {
			name, err := one("workflow name", pos)
			if err != nil {
				return err
			}
			return show(e, *gf.json, printWorkflow)(c.Show(ctx, name))
		}
	case "run":
		fs.Var(&inputs, "input", "an input as name=value (repeatable); the value takes the input's type")
		inputJSON := fs.String("input-json", "", "the inputs as a JSON object (--input flags override its keys)")
		key := fs.String("idempotency-key", "", "a key that makes a repeated command the same run")
		wait = fs.Bool("wait", false, "follow the run to its end, printing its steps")
		run = func(ctx context.Context, b *bus.Bus, c *workflow.Client, pos []string) error {
			name, err := one("workflow name", pos)
			if err != nil {
				return err
			}
			def, err := c.Show(ctx, name)
			if err != nil {
				return err
			}
			in, err := parseInputs(def, *inputJSON, inputs)
			if err != nil {
				return err
			}
			started, err := c.Start(ctx, name, in, *key)
			if err != nil {
				return err
			}
			if !*wait {
				if *gf.json {
					return printJSON(e.stdout, started)
				}
				fmt.Fprintf(e.stdout, "started run %s of %s (see: agentwork workflow status %s --wait)\n", started.ID, name, started.ID)
				return nil
			}
			fmt.Fprintf(e.stderr, "started run %s of %s; following it…\n", started.ID, name)
			return followRun(ctx, e, b, c, started.ID, *gf.json)
		}
	case "runs":
		status := fs.String("status", "", "only runs of this status: pending, running, waiting, done, failed, cancelled, timed_out")
		limit := fs.Int("limit", 20, "at most this many runs")
		run = func(ctx context.Context, _ *bus.Bus, c *workflow.Client, pos []string) error {
			if len(pos) > 1 {
				return usageError{"workflow runs: want at most one workflow name"}
			}
			f := workflow.Filter{Status: workflow.RunStatus(*status), Limit: *limit}
			if len(pos) == 1 {
				f.Workflow = pos[0]
			}
			return show(e, *gf.json, printRuns)(c.Runs(ctx, f))
		}
	case "status":
		wait = fs.Bool("wait", false, "follow the run to its end")
		run = func(ctx context.Context, b *bus.Bus, c *workflow.Client, pos []string) error {
			id, err := one("run id", pos)
			if err != nil {
				return err
			}
			if *wait {
				return followRun(ctx, e, b, c, id, *gf.json)
			}
			return show(e, *gf.json, printTimeline)(c.Get(ctx, id))
		}
	case "cancel":
		reason := fs.String("reason", "cancelled from the CLI", "why (in the run's events)")
		run = func(ctx context.Context, _ *bus.Bus, c *workflow.Client, pos []string) error {
			id, err := one("run id", pos)
			if err != nil {
				return err
			}
			r, err := c.Cancel(ctx, id, *reason)
			if err != nil {
				return err
			}
			if r.Status.Ended() {
				fmt.Fprintf(e.stdout, "run %s has already ended %s\n", id, r.Status)
				return nil
			}
			fmt.Fprintf(e.stdout, "cancelling run %s (see: agentwork workflow status %s)\n", id, id)
			return nil
		}
	case "retry":
		from := fs.String("from", "", "the top-level step to run again from (default: the one that failed)")
		key := fs.String("idempotency-key", "", "a key that makes a repeated command one retry")
		wait = fs.Bool("wait", false, "follow the run to its end")
		run = func(ctx context.Context, b *bus.Bus, c *workflow.Client, pos []string) error {
			id, err := one("run id", pos)
			if err != nil {
				return err
			}
			if _, err := c.Retry(ctx, id, *from, *key); err != nil {
				return err
			}
			if *wait {
				return followRun(ctx, e, b, c, id, *gf.json)
			}
			fmt.Fprintf(e.stdout, "retrying run %s (see: agentwork workflow status %s --wait)\n", id, id)
			return nil
		}
	default:
		fmt.Fprintln(e.stderr, workflowUsage)
		return usageError{fmt.Sprintf("workflow: unknown command %q (want list, show, run, runs, status, cancel or retry)", verb)}
	}
	pos, err := parseFlags(fs, args[1:])
	if err != nil {
		return quietHelp(err)
	}
	timeout := *gf.timeout
	if *wait && !flagSet(fs, "timeout") {
		timeout = waitTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b, err := gf.conn.dial(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	return run(ctx, b, workflow.NewClient(b), pos)
}

// parseInputs builds a run's inputs from --input-json and --input k=v,
// each value read as its declared type.
func parseInputs(def *workflow.Workflow, raw string, kvs []string) (map[string]any, error) {
	in := map[string]any{}
	if raw != "" {
		if err := json.Unmarshal([]byte(raw), &in); err != nil || in == nil {
			return nil, usageError{fmt.Sprintf("--input-json: %q is not a JSON object (e.g. '{\"build\": \"b7\"}')", raw)}
		}
	}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Sprintf("--input %q: want name=value", kv)}
		}
		decl, known := def.Inputs[k]
		if !known {
			names := slices.Sorted(maps.Keys(def.Inputs))
			if len(names) == 0 {
				return nil, usageError{fmt.Sprintf("--input %s: workflow %s has no inputs", k, def.Name)}
			}
			return nil, usageError{fmt.Sprintf("--input %s: workflow %s has no such input (inputs: %s)", k, def.Name, strings.Join(names, ", "))}
		}
		val, err := inputValue(decl.Type, v)
		if err != nil {
			return nil, usageError{fmt.Sprintf("--input %s: %v", k, err)}
		}
		in[k] = val
	}
	return in, nil
}

func inputValue(typ, v string) (any, error) {
	switch typ {
	case "", workflow.TypeString:
		return v, nil
	case workflow.TypeNumber, workflow.TypeInteger:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", v)
		}
		return f, nil
	case workflow.TypeBoolean:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("%q is not true or false", v)
		}
		return b, nil
	default: // object, array
		var x any
		if err := json.Unmarshal([]byte(v), &x); err != nil {
			return nil, fmt.Errorf("want JSON (an %s): %v", typ, err)
		}
		return x, nil
	}
}

// followRun prints each step's changes as they happen until run id ends,
// then its timeline; it fails unless the run ends done. It wakes on the
// run's events (agentwork.event.workflow.*) and, should one be missed, at
// least every few seconds.
func followRun(ctx context.Context, e *env, b *bus.Bus, c *workflow.Client, id string, asJSON bool) error {
	evs := make(chan *nats.Msg, 64)
	sub, err := b.Conn().ChanSubscribe(b.Subjects.Event(bus.SourceWorkflow, "*"), evs)
	if err != nil {
		return fmt.Errorf("workflow: subscribe to run events: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := b.Conn().Flush(); err != nil {
		return err
	}
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	seen := map[string]workflow.StepStatus{}
	for {
		r, err := c.Get(ctx, id)
		if err != nil {
			return err
		}
		if !asJSON {
			r.Def.Walk(func(_ string, s *workflow.Step) {
				st := r.Steps[s.ID]
				if st == nil || st.Status == seen[s.ID] || st.Status == workflow.StepPending || st.Status == "" {
					return
				}
				seen[s.ID] = st.Status
				fmt.Fprintf(e.stderr, "%s  %-12s %s\n", time.Now().Format("15:04:05"), s.ID, st.Status)
			})
		}
		if r.Status.Ended() {
			if asJSON {
				if err := printJSON(e.stdout, r); err != nil {
					return err
				}
			} else {
				printTimeline(e.stdout, r)
			}
			if r.Status != workflow.RunDone {
				return fmt.Errorf("run %s ended %s", id, r.Status)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("workflow: run %s is still %s after the --timeout; follow it with agentwork workflow status %s --wait", id, r.Status, id)
		case <-evs:
		case <-tick.C:
		}
	}
}

func printWorkflows(w io.Writer, list []workflow.Summary) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no workflows (add them under workflows: in the config, or in workflows_dir)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTEPS\tTRIGGERS\tINPUTS\tDESCRIPTION")
	for _, s := range list {
		var ins []string
		for _, n := range slices.Sorted(maps.Keys(s.Inputs)) {
			in := s.Inputs[n]
			t := in.Type
			if t == "" {
				t = workflow.TypeString
			}
			if in.Required {
				t += ", required"
			}
			ins = append(ins, n+" ("+t+")")
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", s.Name, s.Steps, dash(strings.Join(s.Triggers, ", ")), dash(strings.Join(ins, "; ")), oneLine(s.Description, 60))
	}
	_ = tw.Flush()
}

func printWorkflow(w io.Writer, def *workflow.Workflow) {
	s := workflow.Summarize(def)
	printWorkflows(w, []workflow.Summary{s})
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tKIND\tDETAIL")
	def.Walk(func(rel string, st *workflow.Step) {
		kind, _ := st.Kind()
		detail := ""
		switch kind {
		case workflow.KindAgent:
			detail = st.Agent.Prompt
		case workflow.KindTool:
			detail = st.Tool
		case workflow.KindNotify:
			detail = st.Notify.Text
		case workflow.KindWait:
			detail = st.Until
			if st.Wait > 0 {
				detail = st.Wait.String()
			}
		case workflow.KindWorkflow:
			detail = st.Workflow
		}
		if st.Foreach != "" {
			detail = "foreach " + st.Foreach + ": " + detail
		}
		if st.If != "" {
			detail = "if " + st.If + ": " + detail
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\n", strings.Repeat("  ", strings.Count(rel, ".parallel.")), st.ID, kind, oneLine(detail, 70))
	})
	_ = tw.Flush()
}

func printRuns(w io.Writer, runs []workflow.Run) {
	if len(runs) == 0 {
		fmt.Fprintln(w, "no runs")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tWORKFLOW\tSTATUS\tCAUSE\tCREATED\tDURATION\tERROR")
	for _, r := range runs {
		errText := ""
		if r.Error != nil {
			errText = r.FailedStep + ": " + r.Error.Message
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Workflow, r.Status, r.Cause.Kind, r.CreatedAt.Local().Format("2006-01-02 15:04:05"),
			span(r.StartedAt, r.EndedAt), dash(oneLine(errText, 60)))
	}
	_ = tw.Flush()
}

// printTimeline prints a run's steps in the order of its definition:
// kind, status, attempts, duration and the output (or error) on one line.
func printTimeline(w io.Writer, r workflow.Run) {
	fmt.Fprintf(w, "run %s of %s: %s", r.ID, r.Workflow, r.Status)
	if d := span(r.StartedAt, r.EndedAt); d != "" && r.Status.Ended() {
		fmt.Fprintf(w, " in %s", d)
	}
	fmt.Fprintf(w, " (cause: %s)\n", r.Cause.Kind)
	if r.Error != nil {
		fmt.Fprintf(w, "error at step %s: %s: %s\n", r.FailedStep, r.Error.Kind, r.Error.Message)
	}
	if r.Def == nil {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tKIND\tSTATUS\tATTEMPTS\tDURATION\tOUTPUT")
	r.Def.Walk(func(rel string, s *workflow.Step) {
		kind, _ := s.Kind()
		st := r.Steps[s.ID]
		indent := strings.Repeat("  ", strings.Count(rel, ".parallel."))
		if st == nil {
			fmt.Fprintf(tw, "%s%s\t%s\t%s\t-\t-\t\n", indent, s.ID, kind, workflow.StepPending)
			return
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\n", indent, s.ID, kind, st.Status, dash(attempts(st.Attempt)), dash(span(st.StartedAt, st.EndedAt)), stepDetail(st))
	})
	_ = tw.Flush()
}

// stepDetail is a step's output, error or skip on one line; a foreach
// step's items summed up by status.
func stepDetail(st *workflow.StepState) string {
	var parts []string
	if len(st.Items) > 0 {
		counts := map[workflow.StepStatus]int{}
		for _, it := range st.Items {
			counts[it.Status]++
		}
		var c []string
		for _, s := range slices.Sorted(maps.Keys(counts)) {
			c = append(c, fmt.Sprintf("%d %s", counts[s], s))
		}
		parts = append(parts, fmt.Sprintf("%d items: %s", len(st.Items), strings.Join(c, ", ")))
	}
	switch {
	case st.Error != nil:
		parts = append(parts, string(st.Error.Kind)+": "+st.Error.Message)
	case st.Status == workflow.StepSkipped:
		raw, _ := json.Marshal(st.Condition)
		parts = append(parts, "condition: "+string(raw))
	case st.Status == workflow.StepWaiting && !st.WaitUntil.IsZero():
		parts = append(parts, "until "+st.WaitUntil.Local().Format("15:04:05"))
	case st.Output != nil && len(st.Items) == 0:
		s, ok := st.Output.(string)
		if !ok {
			raw, _ := json.Marshal(st.Output)
			s = string(raw)
		}
		parts = append(parts, s)
	}
	return oneLine(strings.Join(parts, "; "), 80)
}

func attempts(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// span is the time from start to end (to now while it runs), rounded.
func span(start, end time.Time) string {
	if start.IsZero() {
		return ""
	}
	if end.IsZero() {
		end = time.Now()
	}
	d := end.Sub(start)
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}
