package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/triggers/cron"
)

const cronUsage = `usage: agentwork cron <command> [flags]

commands:
  list                      jobs with status, next fire and last outcome
  show <id>                 one job: definition and state
  add <id> --schedule "0 9 * * mon" --prompt "..." [flags]
  add --file job.yaml       a job from a YAML or JSON file
  pause <id> [--reason ..]  stop firing (with a note)
  resume <id>               fire again from the next tick
  run <id>                  run now (the schedule does not move)
  delete <id>               remove a job added through the API
  history <id> [--limit N]  latest runs, skips and errors, newest first

Every command takes --data-dir / --url / --config to find the server, and --json.`

// cmdCron implements `agentwork cron ...` over the cron NATS service of a
// running server.
func cmdCron(ctx context.Context, e *env, args []string) error {
	verb, fs, gf, done, err := group{"cron", cronUsage}.verb(e, args)
	if done {
		return err
	}
	cf, asJSON, timeout := &gf.conn, gf.json, gf.timeout
	var run func(c *cron.Client, pos []string) error
	needID := true
	switch verb {
	case "list":
		needID = false
		run = func(c *cron.Client, _ []string) error {
			return show(e, *asJSON, cronPrintJobs)(c.List(ctx))
		}
	case "show":
		run = func(c *cron.Client, pos []string) error {
			return show(e, *asJSON, cronPrintJob)(c.Get(ctx, pos[0]))
		}
	case "add":
		needID = false
		build := cronAddFlags(fs)
		run = func(c *cron.Client, pos []string) error {
			j, err := build(pos)
			if err != nil {
				return err
			}
			st, err := c.Add(ctx, j)
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(e.stdout, st)
			}
			fmt.Fprintf(e.stdout, "added job %s; next fire %s\n", st.Job.ID, cronTime(st.Next))
			return nil
		}
	case "pause":
		reason := fs.String("reason", "", "why (shown in cron list/show)")
		run = func(c *cron.Client, pos []string) error {
			st, err := c.Pause(ctx, pos[0], *reason)
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(e.stdout, st)
			}
			fmt.Fprintf(e.stdout, "paused job %s (%s)\n", st.Job.ID, st.State.PausedReason)
			return nil
		}
	case "resume":
		run = func(c *cron.Client, pos []string) error {
			st, err := c.Resume(ctx, pos[0])
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(e.stdout, st)
			}
			fmt.Fprintf(e.stdout, "job %s is %s; next fire %s\n", st.Job.ID, st.Status, cronTime(st.Next))
			return nil
		}
	case "run":
		run = func(c *cron.Client, pos []string) error {
			rr, err := c.Run(ctx, pos[0])
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(e.stdout, rr)
			}
			fmt.Fprintf(e.stdout, "queued a run of job %s (request %s); see: agentwork cron history %s\n", rr.Job, rr.RequestID, rr.Job)
			return nil
		}
	case "delete":
		run = func(c *cron.Client, pos []string) error {
			if err := c.Delete(ctx, pos[0]); err != nil {
				return err
			}
			if *asJSON {
				return printJSON(e.stdout, map[string]string{"deleted": pos[0]})
			}
			fmt.Fprintf(e.stdout, "deleted job %s\n", pos[0])
			return nil
		}
	case "history":
		limit := fs.Int("limit", cron.DefaultHistoryLimit, "how many entries")
		run = func(c *cron.Client, pos []string) error {
			h, err := c.History(ctx, pos[0], *limit)
			if err != nil || *asJSON {
				return show(e, *asJSON, cronPrintHistory)(h, err)
			}
			name := cronHistoryName(h)
			if name == "" {
				// Runs from before their events carried it: the job's
				// name now, if it still exists.
				if st, err := c.Get(ctx, pos[0]); err == nil && st.Job.Name != st.Job.ID {
					name = st.Job.Name
				}
			}
			if name != "" && len(h) > 0 {
				fmt.Fprintf(e.stdout, "job %s (%s)\n", pos[0], oneLine(name, 80))
			}
			cronPrintHistory(e.stdout, h)
			return nil
		}
	default:
		fmt.Fprintln(e.stderr, cronUsage)
		return usageError{fmt.Sprintf("cron: unknown command %q", verb)}
	}
	pos, err := parseFlags(fs, args[1:])
	if err != nil {
		return quietHelp(err)
	}
	if needID && len(pos) != 1 {
		return usageError{fmt.Sprintf("cron %s: want exactly one job id, e.g. agentwork cron %s sales-report", verb, verb)}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	b, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	return run(cron.NewClient(b), pos)
}

// cronAddFlags registers the flags of cron add and returns the job builder.
func cronAddFlags(fs *flag.FlagSet) func(pos []string) (cron.Job, error) {
	file := fs.String("file", "", "read the job from this YAML or JSON file (- for stdin); flags override it")
	name := fs.String("name", "", "a readable title")
	schedule := fs.String("schedule", "", `cron expression: "0 9 * * mon", 6 fields with seconds, @daily, "@every 90m"`)
	at := fs.String("at", "", "one-shot: run once at this RFC 3339 time (e.g. 2026-12-01T09:00:00+01:00)")
	tz := fs.String("timezone", "", "IANA time zone of the schedule (default UTC)")
	prompt := fs.String("prompt", "", "what the model should do")
	targets := fs.String("targets", "", "comma-separated connector names")
	toolList := fs.String("tools", "", "comma-separated tools the job may use, names or globs such as fs__* (default: runner.tools)")
	modelName := fs.String("model", "", "the model of its runs: default or a key of the models section (default: runner.model)")
	fallback := fs.String("fallback", "", "comma-separated models that take over when its model is unavailable (default: runner.fallback)")
	deliver := fs.String("deliver", "", "auto (default: the notify_user messages if the model sends any, else its reply), reply, notify or none")
	overlap := fs.String("overlap", "", "skip (default), queue or allow")
	catchup := fs.String("catchup", "", "run_once (default), skip, or run_all[:max]")
	maxRuns := fs.Int("max-runs", 0, "stop after this many fires (0: no limit)")
	expires := fs.String("expires-at", "", "stop firing at this RFC 3339 time")
	jitter := fs.Duration("jitter", 0, "delay each fire by up to this much")
	dedup := fs.Duration("dedup-window", 0, "do not send the same notification (text, targets) of this job again within this long (default: cron.dedup_window)")
	retries := fs.Int("retry", 0, "re-run a failed run this many times")
	backoff := fs.Duration("retry-backoff", 0, "wait before a retry (doubles; default 1m)")
	disabled := fs.Bool("disabled", false, "add the job disabled")
	return func(pos []string) (cron.Job, error) {
		var j cron.Job
		if *file != "" {
			if err := cronReadJobFile(*file, &j); err != nil {
				return j, err
			}
		}
		if len(pos) > 1 {
			return j, usageError{"cron add: want at most one job id"}
		}
		if len(pos) == 1 {
			j.ID = pos[0]
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		str := func(flag string, dst *string, v string) {
			if set[flag] {
				*dst = v
			}
		}
		str("name", &j.Name, *name)
		str("schedule", &j.Schedule, *schedule)
		str("timezone", &j.Timezone, *tz)
		str("prompt", &j.Prompt, *prompt)
		str("deliver", &j.Deliver, *deliver)
		str("overlap", &j.Overlap, *overlap)
		if set["targets"] {
			j.Targets = strings.Split(*targets, ",")
		}
		if set["tools"] {
			j.Tools = strings.Split(*toolList, ",")
		}
		str("model", &j.Model, *modelName)
		if set["fallback"] {
			j.Fallback = strings.Split(*fallback, ",")
		}
		for flag, dst := range map[string]**time.Time{"at": &j.At, "expires-at": &j.ExpiresAt} {
			v := map[string]string{"at": *at, "expires-at": *expires}[flag]
			if !set[flag] {
				continue
			}
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return j, usageError{fmt.Sprintf("cron add --%s: %q is not an RFC 3339 time (e.g. 2026-12-01T09:00:00Z)", flag, v)}
			}
			*dst = &t
		}
		if set["catchup"] {
			policy, max, _ := strings.Cut(*catchup, ":")
			j.Catchup = cron.Catchup{Policy: policy}
			if max != "" {
				n, err := strconv.Atoi(max)
				if err != nil {
					return j, usageError{fmt.Sprintf("cron add --catchup: %q: want run_all:<number>", *catchup)}
				}
				j.Catchup.Max = n
			}
		}
		if set["max-runs"] {
			j.MaxRuns = *maxRuns
		}
		if set["jitter"] {
			j.Jitter = cron.Duration(*jitter)
		}
		if set["dedup-window"] {
			j.DedupWindow = cron.Duration(*dedup)
		}
		if set["retry"] {
			j.Retry.Attempts = *retries
		}
		if set["retry-backoff"] {
			j.Retry.Backoff = cron.Duration(*backoff)
		}
		if *disabled {
			off := false
			j.Enabled = &off
		}
		if err := j.Validate(); err != nil {
			return j, usageError{"cron add: " + strings.ReplaceAll(err.Error(), "\n", "; ")}
		}
		return j, nil
	}
}

func cronReadJobFile(path string, j *cron.Job) error {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return fmt.Errorf("cron add: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(j); err != nil {
		return fmt.Errorf("cron add: %s: %w", path, err)
	}
	return nil
}

func cronPrintJobs(w io.Writer, list []cron.Status) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no cron jobs (add one: agentwork cron add <id> --schedule \"0 9 * * mon\" --prompt \"...\")")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tORIGIN\tSTATUS\tSCHEDULE\tNEXT\tLAST RUN\tFAILS")
	for _, st := range list {
		last := "-"
		if st.State.LastOutcome != "" {
			last = st.State.LastOutcome
			if st.State.LastReason != "" {
				last += " (" + st.State.LastReason + ")"
			}
			last += " " + cronTime(st.State.LastRunAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", st.Job.ID, cronName(st.Job.ID, st.Job.Name), cronOrigin(st.Job), st.Status, cronScheduleText(st.Job), cronTime(st.Next), last, st.State.ConsecutiveFailures)
	}
	_ = tw.Flush()
}

// cronName is a job's name for a column: "-" when it has none but its id;
// a long one cut.
func cronName(id, name string) string {
	if name == "" || name == id {
		return "-"
	}
	return oneLine(name, 40)
}

// cronOrigin is a job's origin, with its owner for an agent's and its
// workflow for a workflow's cron trigger.
func cronOrigin(j cron.Job) string {
	if j.Workflow != "" {
		return j.Origin + " (" + j.Workflow + ")"
	}
	if j.Creator != nil && (j.Origin == cron.OriginMCP || j.Origin == cron.OriginConsole) {
		return j.Origin + " (" + j.Creator.Name + ")"
	}
	if j.Creator != nil {
		return j.Origin + " (" + j.Creator.String() + ")"
	}
	return j.Origin
}

func cronScheduleText(j cron.Job) string {
	s := j.Schedule
	if j.At != nil {
		s = "at " + j.At.Format(time.RFC3339)
	}
	if j.Timezone != "" && j.At == nil {
		s += " (" + j.Timezone + ")"
	}
	return s
}

func cronPrintJob(w io.Writer, st cron.Status) {
	j, s := st.Job, st.State
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("id", j.ID)
	row("name", j.Name)
	row("status", st.Status)
	row("error", st.Error)
	row("paused", s.PausedReason)
	row("schedule", cronScheduleText(j))
	row("next fire", cronTime(st.Next))
	row("prompt", j.Prompt)
	row("workflow", j.Workflow)
	row("targets", strings.Join(j.Targets, ", "))
	row("tools", strings.Join(j.Tools, ", "))
	row("model", j.Model)
	row("fallback", strings.Join(j.Fallback, ", "))
	row("deliver", j.Deliver)
	row("overlap", j.Overlap)
	row("catchup", cronCatchupText(j.Catchup))
	if j.MaxRuns > 0 {
		row("max runs", fmt.Sprintf("%d (fired %d)", j.MaxRuns, s.Fires))
	}
	if j.ExpiresAt != nil {
		row("expires", j.ExpiresAt.Format(time.RFC3339))
	}
	if j.Jitter > 0 {
		row("jitter", j.Jitter.String())
	}
	if j.Retry.Attempts > 0 {
		row("retry", fmt.Sprintf("%d time(s), backoff %s", j.Retry.Attempts, j.Retry.Backoff))
	}
	row("origin", j.Origin)
	if c := j.Creator; c != nil && j.Origin == cron.OriginMCP {
		row("created by", fmt.Sprintf("MCP client with credential %s", c.Name))
	} else if c != nil && j.Origin == cron.OriginConsole {
		row("created by", fmt.Sprintf("console session of credential %s", c.Name))
	} else if c != nil {
		row("created by", fmt.Sprintf("%s/%s (run %s)", c.Source, c.Name, c.RunID))
	}
	row("idempotency key", j.IdempotencyKey)
	if j.DeleteAfterRun {
		row("delete after run", "yes")
	}
	row("last tick", cronTime(s.LastTick))
	if s.LastOutcome != "" {
		out := s.LastOutcome
		if s.LastReason != "" {
			out += " (" + s.LastReason + ")"
		}
		row("last run", out+" at "+cronTime(s.LastRunAt))
	}
	row("last error", s.LastError)
	row("runs", fmt.Sprintf("%d (fires %d, missed %d, failing in a row %d)", s.Runs, s.Fires, s.Missed, s.ConsecutiveFailures))
	if s.Retry != nil {
		row("retry pending", fmt.Sprintf("attempt %d of the tick %s at %s", s.Retry.Attempt, s.Retry.Tick.Format(time.RFC3339), s.Retry.At.Format(time.RFC3339)))
	}
	_ = tw.Flush()
}

func cronCatchupText(c cron.Catchup) string {
	if c.Max > 0 {
		return fmt.Sprintf("%s (max %d)", c.Policy, c.Max)
	}
	return c.Policy
}

func cronPrintHistory(w io.Writer, h []agentwork.Record) {
	if len(h) == 0 {
		fmt.Fprintln(w, "no runs yet")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tOUTCOME\tTICK\tDETAIL")
	for _, e := range h {
		r := e.Result
		tick := cronTime(r.ScheduledAt)
		if r.Manual {
			tick = "manual"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Time.Local().Format("2006-01-02 15:04:05"), r.Outcome, tick, oneLine(runDetail(r), 100))
	}
	_ = tw.Flush()
}

// cronHistoryName is the job's name as its newest run that carries one
// recorded it (cron.MetaName): a job deleted since is still named.
func cronHistoryName(h []agentwork.Record) string {
	for _, r := range h {
		if n := r.Result.Metadata[cron.MetaName]; n != "" {
			return n
		}
	}
	return ""
}

func cronTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05 MST")
}
