// Package schedule holds the self-scheduling tools: schedule_create,
// schedule_list, schedule_pause, schedule_resume, schedule_delete and
// schedule_run. They let a run put work on the runtime's own schedule
// ("remind me in 20 minutes", "check the build every morning") as jobs of
// the cron scheduler, which implements Jobs.
//
// The owner of a job is the run that calls the tool — its source and name
// (task/default, heartbeat/heartbeat, cron/<job>) and run id, from
// tools.RunOf, never from the model's arguments. A call outside a run
// (agentwork tools call) is refused: the operator manages jobs with
// agentwork cron. An owner sees and manages only the jobs it created.
package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentwork/agentwork/tools"
)

// Tool names.
const (
	CreateName = "schedule_create"
	ListName   = "schedule_list"
	PauseName  = "schedule_pause"
	ResumeName = "schedule_resume"
	DeleteName = "schedule_delete"
	RunName    = "schedule_run"
)

// Names are the names of the schedule tools.
var Names = []string{CreateName, ListName, PauseName, ResumeName, DeleteName, RunName}

// Owner is whose jobs the tools act on: the calling run's source and name,
// and the run id that created a job.
type Owner struct {
	Source string `json:"source"`
	Name   string `json:"name"`
	RunID  string `json:"run_id,omitempty"`
	// Credential is the webhook credential the creating run acted for
	// ("" for the operator's own work): the job's fires act for it, and
	// its targets are checked against the credential's grant each time.
	Credential string `json:"credential,omitempty"`
	// Approval is the creating run's gate list (tools.RunInfo.Approval):
	// the job's runs are gated by it too, besides their own.
	Approval []string `json:"approval,omitempty"`
}

// Same reports whether o and other are one owner (the run ids may differ:
// every run of a source and name is the same owner).
func (o Owner) Same(other Owner) bool { return o.Source == other.Source && o.Name == other.Name }

// String returns source/name.
func (o Owner) String() string { return o.Source + "/" + o.Name }

// Job is a job to create, its arguments checked and its time resolved.
type Job struct {
	Name   string
	Prompt string
	// Schedule is a cron expression or "@every <duration>"; exactly one of
	// Schedule and At is set.
	Schedule string
	At       *time.Time
	Timezone string
	// Targets are where its runs deliver (default: the creating run's).
	Targets        []string
	IdempotencyKey string
	MaxRuns        int
	ExpiresAt      *time.Time
	DeleteAfterRun bool
}

// Info is a job as the tools show it to the model.
type Info struct {
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	Status string `json:"status"`
	// Schedule is the cron expression, "@every <d>" or "at <RFC 3339 UTC>".
	Schedule       string     `json:"schedule"`
	Timezone       string     `json:"timezone,omitempty"`
	Next           *time.Time `json:"next,omitempty"`
	Prompt         string     `json:"prompt"`
	Targets        []string   `json:"targets,omitempty"`
	DeleteAfterRun bool       `json:"delete_after_run,omitempty"`
	MaxRuns        int        `json:"max_runs,omitempty"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
	IdempotencyKey string     `json:"idempotency_key,omitempty"`
	Runs           int        `json:"runs"`
	LastOutcome    string     `json:"last_outcome,omitempty"`
	// RemovedAt is set (Status StatusRemoved) when Create found the job
	// of its idempotency key already run and removed.
	RemovedAt *time.Time `json:"removed_at,omitempty"`
}

// StatusRemoved is the status of a job that ran and was removed.
const StatusRemoved = "removed"

// Actions of Jobs.Act.
const (
	ActionPause  = "pause"
	ActionResume = "resume"
	ActionDelete = "delete"
	ActionRun    = "run"
)

// Jobs is the job store the tools act on (the cron scheduler's). Its
// errors are shown to the model as they are: they say what to do. Methods
// are safe for concurrent use and honour ctx.
type Jobs interface {
	// Create creates j for owner. With an idempotency key, a job the
	// owner created with the same key is answered instead (created
	// false), also when it already ran and was removed (StatusRemoved).
	Create(ctx context.Context, owner Owner, j Job) (info Info, created bool, err error)
	// List returns the jobs owner created.
	List(ctx context.Context, owner Owner) ([]Info, error)
	// Act pauses, resumes, deletes or runs now (Action*) the job id, when
	// owner created it.
	Act(ctx context.Context, owner Owner, id, action string) (Info, error)
}

// CreateArgs are the arguments of schedule_create.
type CreateArgs struct {
	Name           string   `json:"name" jsonschema:"minLength=1,description=A short title of the job (shown in lists)."`
	Prompt         string   `json:"prompt" jsonschema:"minLength=1,description=What the agent is asked when the job runs: self-contained (the run does not see this conversation), e.g. 'Remind the user to call Anna (use notify_user).'"`
	Cron           string   `json:"cron,omitempty" jsonschema:"description=A recurring schedule as a cron expression: 5 fields (minute hour day-of-month month day-of-week) or a descriptor such as @daily. Set exactly one of cron / every / at / in."`
	Every          string   `json:"every,omitempty" jsonschema:"description=A recurring interval as a duration, e.g. 90m or 24h."`
	At             string   `json:"at,omitempty" jsonschema:"description=One run at this time: RFC 3339 (2026-05-01T09:00:00Z), or without offset (2026-05-01T09:00:00) in timezone."`
	In             string   `json:"in,omitempty" jsonschema:"description=One run this long from now, e.g. 20m, 2h, 90s. Prefer it over at for relative times."`
	Timezone       string   `json:"timezone,omitempty" jsonschema:"description=IANA time zone of cron and of an at without offset, e.g. Europe/Berlin. Default UTC."`
	Targets        []string `json:"targets,omitempty" jsonschema:"description=Where the job's runs deliver: connectors this run delivers to (by name), or its own targets. Default: where this run delivers."`
	IdempotencyKey string   `json:"idempotency_key,omitempty" jsonschema:"maxLength=200,description=A key of your choice: creating a job with a key you already used answers with that job and creates nothing new."`
	MaxRuns        int      `json:"max_runs,omitempty" jsonschema:"minimum=0,description=Stop a recurring job after this many runs. 0: no limit."`
	ExpiresAt      string   `json:"expires_at,omitempty" jsonschema:"description=Stop the job from this RFC 3339 time on."`
	DeleteAfterRun *bool    `json:"delete_after_run,omitempty" jsonschema:"description=Delete the job once its last run ended. Default true for at/in, false for cron/every."`
}

// IDArgs are the arguments of the tools that act on one job.
type IDArgs struct {
	ID string `json:"id" jsonschema:"minLength=1,description=The job's id, as schedule_create or schedule_list gave it."`
}

// ListArgs are the arguments of schedule_list (none).
type ListArgs struct{}

// maxKey bounds an idempotency key.
const maxKey = 200

// Parse checks schedule_create's arguments as of now and resolves its
// time: exactly one of cron, every, at and in; at, in and expires_at in
// the future; a known time zone.
func Parse(a CreateArgs, now time.Time) (Job, error) {
	j := Job{
		Name: strings.TrimSpace(a.Name), Prompt: strings.TrimSpace(a.Prompt), Timezone: strings.TrimSpace(a.Timezone),
		Targets: a.Targets, IdempotencyKey: a.IdempotencyKey, MaxRuns: a.MaxRuns,
	}
	now = now.UTC()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if j.Name == "" {
		bad("name: empty: give the job a short title")
	}
	if j.Prompt == "" {
		bad("prompt: empty: say what the agent should do when the job runs")
	}
	loc := time.UTC
	if j.Timezone != "" {
		l, err := time.LoadLocation(j.Timezone)
		if err != nil || j.Timezone == "Local" {
			bad("timezone: %q is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)", j.Timezone)
		} else {
			loc = l
		}
	}
	var set []string
	for _, w := range [][2]string{{"cron", a.Cron}, {"every", a.Every}, {"at", a.At}, {"in", a.In}} {
		if strings.TrimSpace(w[1]) != "" {
			set = append(set, w[0])
		}
	}
	switch {
	case len(set) == 0:
		bad("when: set one of in (e.g. \"20m\"), at (RFC 3339), every (e.g. \"24h\") or cron (e.g. \"0 9 * * mon\")")
	case len(set) > 1:
		bad("when: set exactly one of cron, every, at and in (got %s)", strings.Join(set, " and "))
	case set[0] == "in":
		d, err := time.ParseDuration(strings.TrimSpace(a.In))
		switch {
		case err != nil:
			bad("in: %q is not a duration (want e.g. 90s, 20m, 2h30m)", a.In)
		case d <= 0:
			bad("in: %q: want a duration after now, e.g. 20m", a.In)
		default:
			j.At = ptr(ceilSecond(now.Add(d)))
		}
	case set[0] == "at":
		at, err := parseTime(strings.TrimSpace(a.At), loc)
		switch {
		case err != nil:
			bad("at: %q is not an RFC 3339 time (e.g. 2026-05-01T09:00:00Z, or 2026-05-01T09:00:00 in timezone); for a time from now use in (e.g. \"20m\")", a.At)
		case !at.After(now):
			bad("at: %s is in the past (now is %s); pick a later time, or use in (e.g. \"20m\")", at.UTC().Format(time.RFC3339), now.Format(time.RFC3339))
		default:
			j.At = ptr(ceilSecond(at.UTC()))
		}
	case set[0] == "every":
		d, err := time.ParseDuration(strings.TrimSpace(a.Every))
		switch {
		case err != nil:
			bad("every: %q is not a duration (want e.g. 30m, 24h)", a.Every)
		case d < time.Second || d%time.Second != 0:
			bad("every: %q: want whole seconds, at least 1s", a.Every)
		default:
			j.Schedule = "@every " + d.String()
		}
	default:
		j.Schedule = strings.TrimSpace(a.Cron)
	}
	if j.At != nil && a.MaxRuns > 1 {
		bad("max_runs: %d: a one-shot (at/in) runs once; leave max_runs out", a.MaxRuns)
	}
	if a.MaxRuns < 0 {
		bad("max_runs: %d: want 0 (no limit) or more", a.MaxRuns)
	}
	if a.ExpiresAt != "" {
		e, err := time.Parse(time.RFC3339, strings.TrimSpace(a.ExpiresAt))
		switch {
		case err != nil:
			bad("expires_at: %q is not an RFC 3339 time (e.g. 2026-06-01T00:00:00Z)", a.ExpiresAt)
		case !e.After(now):
			bad("expires_at: %s is in the past (now is %s)", e.UTC().Format(time.RFC3339), now.Format(time.RFC3339))
		case j.At != nil && e.Before(*j.At):
			bad("expires_at: %s is before the job's time %s: it would never run", e.UTC().Format(time.RFC3339), j.At.Format(time.RFC3339))
		default:
			j.ExpiresAt = ptr(e.UTC())
		}
	}
	if len(a.IdempotencyKey) > maxKey {
		bad("idempotency_key: %d bytes: want at most %d", len(a.IdempotencyKey), maxKey)
	}
	j.DeleteAfterRun = j.At != nil
	if a.DeleteAfterRun != nil {
		j.DeleteAfterRun = *a.DeleteAfterRun
	}
	return j, errors.Join(errs...)
}

// parseTime parses RFC 3339, or a time without offset in loc.
func parseTime(s string, loc *time.Location) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.ParseInLocation("2006-01-02T15:04:05", s, loc)
}

// ceilSecond rounds t up to the whole second: the time a job fires is a
// whole second, and never before what was asked.
func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

func ptr[T any](v T) *T { return &v }

// ErrNoRun is the refusal of a call outside a run.
var ErrNoRun = errors.New("the schedule tools act for the run that calls them, and this call is part of no run; " +
	"an operator manages jobs with agentwork cron add|list|pause|resume|run|delete")

// owner returns the calling run as an Owner.
func owner(ctx context.Context) (Owner, tools.RunInfo, error) {
	r, ok := tools.RunOf(ctx)
	if !ok || r.Source == "" {
		return Owner{}, r, ErrNoRun
	}
	return Owner{Source: r.Source, Name: r.Name, RunID: r.ID, Credential: r.Credential, Approval: slices.Clone(r.Approval)}, r, nil
}

// Tools returns the schedule tools over jobs; now is the clock (nil:
// time.Now).
func Tools(jobs Jobs, now func() time.Time) []tools.Spec {
	if now == nil {
		now = time.Now
	}
	create := tools.Func(CreateName,
		"Schedule work for later: a one-shot (in, e.g. \"20m\"; or at, an RFC 3339 time) or a recurring job (every, e.g. \"24h\"; or cron). "+
			"When it runs, the agent is asked prompt, and what it sends with notify_user reaches the user. "+
			"Give an idempotency_key so that calling again does not create a second job.",
		func(ctx context.Context, a CreateArgs) (string, error) {
			o, run, err := owner(ctx)
			if err != nil {
				return "", err
			}
			j, err := Parse(a, now())
			if err != nil {
				return "", err
			}
			if err := checkTargets(j.Targets, run.Targets); err != nil {
				return "", err
			}
			if len(j.Targets) == 0 {
				j.Targets = run.Targets
			}
			info, created, err := jobs.Create(ctx, o, j)
			if err != nil {
				return "", err
			}
			return describeCreate(info, created, now()), nil
		})
	list := tools.Func(ListName, "List the scheduled jobs you created, with their status and next run.",
		func(ctx context.Context, _ ListArgs) (string, error) {
			o, _, err := owner(ctx)
			if err != nil {
				return "", err
			}
			l, err := jobs.List(ctx, o)
			if err != nil {
				return "", err
			}
			if len(l) == 0 {
				return "you have no scheduled jobs (create one with schedule_create)", nil
			}
			b, err := json.Marshal(l)
			return string(b), err
		})
	list.Idempotent = true
	act := func(name, action, desc, done string) tools.Spec {
		return tools.Func(name, desc, func(ctx context.Context, a IDArgs) (string, error) {
			o, _, err := owner(ctx)
			if err != nil {
				return "", err
			}
			info, err := jobs.Act(ctx, o, strings.TrimSpace(a.ID), action)
			if err != nil {
				return "", err
			}
			out := fmt.Sprintf("job %s (%q) %s", info.ID, info.Name, done)
			if info.Next != nil && action != ActionDelete {
				out += "; next run " + info.Next.UTC().Format(time.RFC3339)
			}
			return out, nil
		})
	}
	return []tools.Spec{
		create, list,
		act(PauseName, ActionPause, "Pause a scheduled job you created: it does not run until resumed.", "paused"),
		act(ResumeName, ActionResume, "Resume a paused job you created, from its next scheduled time.", "resumed"),
		act(DeleteName, ActionDelete, "Delete a scheduled job you created.", "deleted"),
		act(RunName, ActionRun, "Run a scheduled job you created now, once; its schedule does not change.", "started now (its schedule does not change)"),
	}
}

// checkTargets allows the targets the model names only where the calling
// run itself delivers: a connector name when the run delivers to that
// connector (with or without a destination), a target with a destination
// (telegram:12345) only when it is one of the run's own. A run cannot send
// its jobs' notifications anywhere it could not send its own.
func checkTargets(targets, own []string) error {
	where := "nowhere (it has no targets)"
	if len(own) > 0 {
		where = strings.Join(own, ", ")
	}
	for _, t := range targets {
		name, _, dest := strings.Cut(t, ":")
		switch {
		case dest && !slices.Contains(own, t):
			return fmt.Errorf("targets: %q names a destination this run does not deliver to (it delivers to %s); name one of those, or leave targets out to deliver where this run does", t, where)
		case !dest && !slices.Contains(own, name):
			// A bare name goes to the connector's own chat or channel:
			// only a run that delivers there may send a job there.
			return fmt.Errorf("targets: %q is not a connector this run delivers to (it delivers to %s); a job may deliver only where the run that creates it does: name one of those, or leave targets out", t, where)
		}
	}
	return nil
}

// describeCreate is schedule_create's answer.
func describeCreate(info Info, created bool, now time.Time) string {
	var b strings.Builder
	switch {
	case info.Status == StatusRemoved:
		fmt.Fprintf(&b, "nothing new created: the job %s (%q) of this idempotency_key already ran and was removed", info.ID, info.Name)
		if info.RemovedAt != nil {
			fmt.Fprintf(&b, " at %s", info.RemovedAt.UTC().Format(time.RFC3339))
		}
		return b.String()
	case created:
		fmt.Fprintf(&b, "created job %s (%q)", info.ID, info.Name)
	default:
		fmt.Fprintf(&b, "nothing new created: job %s (%q) already exists for this idempotency_key (status %s)", info.ID, info.Name, info.Status)
	}
	if at, ok := strings.CutPrefix(info.Schedule, "at "); ok {
		fmt.Fprintf(&b, "; one-shot, fires at %s", at)
		if t, err := time.Parse(time.RFC3339, at); err == nil && t.After(now) {
			fmt.Fprintf(&b, " (in %s)", t.Sub(now).Round(time.Second))
		}
		if info.DeleteAfterRun {
			b.WriteString(", then deletes itself")
		}
	} else {
		fmt.Fprintf(&b, "; schedule %s", info.Schedule)
		if info.Timezone != "" {
			fmt.Fprintf(&b, " (%s)", info.Timezone)
		}
		if info.Next != nil {
			fmt.Fprintf(&b, ", next run %s", info.Next.UTC().Format(time.RFC3339))
		}
	}
	if len(info.Targets) > 0 {
		fmt.Fprintf(&b, "; delivers to %s", strings.Join(info.Targets, ", "))
	}
	return b.String()
}
