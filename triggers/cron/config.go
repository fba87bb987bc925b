package cron

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/invopop/jsonschema"
	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/memory"
	"github.com/agentwork/agentwork/tools/schedule"
	"github.com/agentwork/agentwork/triggers/budget"
)

// Overlap policies: what a tick does when the job's previous run is still going.
const (
	// OverlapSkip ends the new run with a skip event, reason "busy" (default).
	OverlapSkip = agentwork.OverlapSkip
	// OverlapQueue makes the new run wait until the previous one ended.
	OverlapQueue = agentwork.OverlapQueue
	// OverlapAllow lets runs of the job overlap.
	OverlapAllow = agentwork.OverlapAllow
)

// Catch-up policies: what happens to ticks missed while no instance was up.
const (
	// CatchupRunOnce runs the job once for all missed ticks (default); the
	// others are recorded as skipped, reason "missed".
	CatchupRunOnce = "run_once"
	// CatchupSkip runs none of them; each is recorded as skipped, "missed".
	CatchupSkip = "skip"
	// CatchupRunAll runs every missed tick, up to Catchup.Max (the most
	// recent ones); older ones are recorded as skipped, "missed".
	CatchupRunAll = "run_all"
)

// Defaults.
const (
	DefaultAlertAfter   = 1
	DefaultPauseAfter   = 10
	DefaultTimeout      = 5 * time.Minute
	DefaultGrace        = time.Minute
	DefaultConcurrency  = 16
	DefaultCatchupMax   = 10
	DefaultRetryBackoff = time.Minute
	maxCatchupMax       = 1000
	maxRetryAttempts    = 10
)

// Config is the `cron` section of agentwork.yaml.
type Config struct {
	// Jobs defined in the config file. The config is the source of truth for
	// them: they are written to the agentwork_jobs bucket at start, replacing
	// what the API changed, and a config job removed from the file is removed
	// from the bucket. Jobs added through the API are kept across restarts.
	Jobs []Job `yaml:"jobs" json:"jobs,omitempty"`
	// AlertAfter is how many consecutive failed runs of a job send an alert
	// to its targets (once per streak). Default 1; negative: never.
	AlertAfter int `yaml:"alert_after" json:"alert_after,omitempty"`
	// PauseAfter is how many consecutive failed runs pause the job, with the
	// reason recorded and an alert sent. Default 10; negative: never.
	PauseAfter int `yaml:"pause_after" json:"pause_after,omitempty"`
	// Timeout bounds one cron run's model work. Default 5m.
	Timeout time.Duration `yaml:"timeout" json:"timeout,omitempty"`
	// Grace is how late a tick may fire and still count as on time; older
	// ticks, and every tick but the latest of those due at once (after
	// downtime), follow the job's catch-up policy. Default 1m.
	Grace time.Duration `yaml:"grace" json:"grace,omitempty"`
	// Concurrency is how many fires of the jobs' timers one instance
	// works on the bus at once (each publishes the ticks of one job).
	// Fires waiting for their tick (a timer fires one second ahead) do
	// not count: up to 64 times as many may wait. Default 16.
	Concurrency int `yaml:"concurrency" json:"concurrency,omitempty"`
	// Targets are the connectors of jobs that name none. Default: the
	// runner's default targets.
	Targets []string `yaml:"targets" json:"targets,omitempty"`
	// DedupWindow is the dedup window of jobs that set none: a job's
	// notification with the same text to the same targets is not sent again
	// within it. Default 0: every notification is sent.
	DedupWindow time.Duration `yaml:"dedup_window" json:"dedup_window,omitempty"`
	// Agent limits the jobs runs create with the schedule tools.
	Agent Agent `yaml:"agent" json:"agent,omitzero"`
}

// WithDefaults returns c with zero fields filled.
func (c Config) WithDefaults() Config {
	if c.AlertAfter == 0 {
		c.AlertAfter = DefaultAlertAfter
	}
	if c.PauseAfter == 0 {
		c.PauseAfter = DefaultPauseAfter
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	c.Agent = c.Agent.withDefaults()
	return c
}

// Validate checks c; errors name the field, e.g.
// cron.jobs[2].schedule: "61 * * * *": ...
func (c Config) Validate() error {
	var errs []error
	// The field paths (cron.jobs[12].) are written only for an error: a
	// config of 100,000 jobs has as many, and almost never an error.
	seen := make(map[string]int, len(c.Jobs))
	for i := range c.Jobs {
		j, p := &c.Jobs[i], jobPath(i)
		if err := j.validate(p); err != nil {
			errs = append(errs, err)
		}
		if j.DeleteAfterRun {
			errs = append(errs, fmt.Errorf("%sdelete_after_run: a config job cannot delete itself (the file defines it); remove it from the file instead", p.String()))
		}
		if prev, dup := seen[j.ID]; dup && j.ID != "" {
			errs = append(errs, fmt.Errorf("%sid: %q is already the id of cron.jobs[%d]", p.String(), j.ID, prev))
		}
		seen[j.ID] = i
	}
	if c.Timeout < 0 || c.Grace < 0 {
		errs = append(errs, errors.New("cron.timeout/grace: must not be negative"))
	}
	if c.DedupWindow < 0 || c.DedupWindow > agentwork.MaxDedupWindow {
		errs = append(errs, fmt.Errorf("cron.dedup_window: %s: want 0 (off) to 720h", c.DedupWindow))
	}
	if c.Concurrency < 0 || c.Concurrency > 1024 {
		errs = append(errs, fmt.Errorf("cron.concurrency: %d: want 1-1024", c.Concurrency))
	}
	for _, t := range c.Targets {
		errs = append(errs, connectors.CheckTarget("cron.targets", t))
	}
	errs = append(errs, c.Agent.validate())
	return errors.Join(errs...)
}

// Job is a cron job: a prompt run on a schedule.
type Job struct {
	// ID names the job: 1-64 of a-z, 0-9, _ and -. It is the last token of
	// the job's request subject (agentwork.request.cron.<id>).
	ID string `yaml:"id" json:"id"`
	// Name is a human-readable title. Default: the id.
	Name string `yaml:"name" json:"name,omitempty"`
	// Schedule is a cron expression: 5 fields, 6 with seconds first,
	// @daily and the other descriptors, or "@every 90m". Exactly one of
	// Schedule and At is set.
	Schedule string `yaml:"schedule" json:"schedule,omitempty"`
	// At makes a one-shot job: one tick at this RFC 3339 time.
	At *time.Time `yaml:"at" json:"at,omitempty"`
	// Timezone is the IANA zone of the schedule, e.g. Europe/Berlin. Default UTC.
	Timezone string `yaml:"timezone" json:"timezone,omitempty"`
	// Prompt is what the model is asked.
	Prompt string `yaml:"prompt" json:"prompt"`
	// Enabled: a disabled job does not fire (it can still be run by hand).
	// Default true.
	Enabled *bool `yaml:"enabled" json:"enabled,omitempty"`
	// Targets are connector names, each optionally with a destination
	// (telegram:-1001234567890). Default: cron.targets, else the runner's.
	Targets []string `yaml:"targets" json:"targets,omitempty"`
	// Deliver is auto (default: what the model passes to notify_user when
	// it calls it, else its answer), reply (the answer), notify (only what
	// the model passes to notify_user) or none.
	Deliver string `yaml:"deliver" json:"deliver,omitempty"`
	// Overlap is skip (default), queue or allow.
	Overlap string `yaml:"overlap" json:"overlap,omitempty"`
	// Catchup is run_once (default), skip, or run_all; run_all takes a cap:
	// {policy: run_all, max: 10} (default max 10).
	Catchup Catchup `yaml:"catchup" json:"catchup,omitzero"`
	// MaxRuns stops the job after this many scheduled fires. 0: no limit.
	MaxRuns int `yaml:"max_runs" json:"max_runs,omitempty"`
	// ExpiresAt stops the job from this time on.
	ExpiresAt *time.Time `yaml:"expires_at" json:"expires_at,omitempty"`
	// Jitter delays each fire by up to this much (the same delay on every
	// instance), to spread jobs that share a schedule.
	Jitter Duration `yaml:"jitter" json:"jitter,omitempty"`
	// DedupWindow holds back a notification of this job with the same text
	// to the same targets as one sent within it. Default: cron.dedup_window.
	DedupWindow Duration `yaml:"dedup_window" json:"dedup_window,omitempty"`
	// Memory is how much of the agent's memory the job's runs' prompt
	// holds: none, light (long-term memory) or full (and today's and
	// yesterday's log). Default: runner.memory.
	Memory string `yaml:"memory" json:"memory,omitempty" jsonschema:"enum=none,enum=light,enum=full"`
	// MemoryFlush, if true, ends each run whose tools write memory with a
	// silent turn in which the model stores what matters (docs/memory.md;
	// one more model call per run); false turns it off for this job.
	// Default: runner.memory_flush.
	MemoryFlush *bool `yaml:"memory_flush" json:"memory_flush,omitempty"`
	// Retry runs the job again after a run that ended in an error.
	Retry Retry `yaml:"retry" json:"retry,omitzero"`
	// AlertAfter and PauseAfter override cron.alert_after / cron.pause_after.
	AlertAfter int `yaml:"alert_after" json:"alert_after,omitempty"`
	PauseAfter int `yaml:"pause_after" json:"pause_after,omitempty"`
	// Budget caps the model tokens the job's runs spend per day, in the
	// job's time zone: when the next run would pass it, the job pauses
	// itself with one alert to its targets until the next midnight there,
	// or until cron resume. Default: no cap.
	Budget budget.Budget `yaml:"budget" json:"budget,omitzero"`
	// Metadata is passed through to the request, events and notifications.
	Metadata map[string]string `yaml:"metadata" json:"metadata,omitempty"`
	// DeleteAfterRun deletes the job once the run of its last tick ended
	// (done, skipped, or failed for good): a one-shot's one tick, or the
	// tick max_runs or expires_at ends it with. Not for config jobs.
	// Default false (the schedule tools set it for one-shots).
	DeleteAfterRun bool `yaml:"delete_after_run" json:"delete_after_run,omitempty"`
	// Creator is the run that created a job of origin agent (set by the
	// scheduler): its source and name own the job.
	Creator *schedule.Owner `yaml:"-" json:"creator,omitempty"`
	// IdempotencyKey is the key an agent created the job with (the job's
	// id is derived from it and the creator).
	IdempotencyKey string `yaml:"-" json:"idempotency_key,omitempty"`
	// Tools are the tools the job's runs may use, instead of runner.tools:
	// names and globs (e.g. [sales__*]). With deliver auto or notify it
	// has notify_user in any case. Default: runner.tools.
	Tools []string `yaml:"tools" json:"tools,omitempty"`
	// Approval names the tools whose calls wait for a person's approval
	// in the job's runs, besides runner.approval (which it adds to, never
	// replaces): names and globs, as in tools. Default: none.
	Approval []string `yaml:"approval" json:"approval,omitempty"`
	// Model names the model of the job's runs: "default" (the model
	// section) or a key of the models section. Default: runner.model.
	Model string `yaml:"model" json:"model,omitempty"`
	// Fallback names the models that take over, in order, when Model is
	// unavailable (see runner.fallback). Default: runner.fallback.
	Fallback []string `yaml:"fallback" json:"fallback,omitempty"`
	// MaxSteps bounds the tool loop of its runs (model calls per run).
	// Default: runner.max_steps.
	MaxSteps int `yaml:"max_steps" json:"max_steps,omitempty"`
	// Timeout bounds one run's model work. Default: cron.timeout.
	Timeout Duration `yaml:"timeout" json:"timeout,omitempty"`

	// Workflow, on a job of origin workflow, is the workflow whose cron
	// trigger the job is: each tick starts a run of it instead of a
	// prompt (see WithWorkflows).
	Workflow string `yaml:"-" json:"workflow,omitempty"`

	// Origin is "config", "api", "agent", "workflow" or "mcp" (set by the
	// scheduler).
	Origin string `yaml:"-" json:"origin,omitempty"`
	// CreatedAt and UpdatedAt are set by the scheduler.
	CreatedAt time.Time `yaml:"-" json:"created_at,omitzero"`
	UpdatedAt time.Time `yaml:"-" json:"updated_at,omitzero"`
}

// Origins of a job.
const (
	OriginConfig = "config"
	OriginAPI    = "api"
	// OriginAgent: created by a run through the schedule tools.
	OriginAgent = "agent"
	// OriginWorkflow: a workflow's cron trigger (WithWorkflows); like a
	// config job, the config defines it.
	OriginWorkflow = "workflow"
	// OriginMCP: created through agentwork's MCP server; Creator names
	// the credential (source mcp, name the token's name or admin).
	OriginMCP = "mcp"
	// OriginConsole: created in the web console by a session of a
	// webhook credential (not the admin's); Creator names the credential,
	// whose grant its runs keep to.
	OriginConsole = "console"
)

// credentialed reports whether a job of origin acts for the credential
// its Creator names (its targets checked against that credential's grant
// at each fire, and its approvals not that credential's to decide).
func credentialed(origin string) bool {
	return origin == OriginAgent || origin == OriginMCP || origin == OriginConsole
}

// Retry re-runs a job whose run ended in an error. This is on top of the
// runner's own retries of transient model errors (runner.max_attempts):
// it re-runs the whole job, for any error, after Backoff, Attempts times.
type Retry struct {
	// Attempts is how many more runs follow a failed run (0-10). Default 0.
	Attempts int `yaml:"attempts" json:"attempts,omitempty"`
	// Backoff is the wait before each retry; it doubles with each attempt.
	// Default 1m.
	Backoff Duration `yaml:"backoff" json:"backoff,omitempty"`
}

// Catchup is the catch-up policy. In YAML and JSON it is either the policy
// name ("run_once") or an object {policy: run_all, max: 10}.
type Catchup struct {
	Policy string `yaml:"policy" json:"policy,omitempty"`
	// Max caps run_all (default 10, at most 1000).
	Max int `yaml:"max" json:"max,omitempty"`
}

// IsEnabled reports whether the job fires on its schedule.
func (j *Job) IsEnabled() bool { return j.Enabled == nil || *j.Enabled }

// Location returns the job's time zone (UTC when unset or invalid).
func (j *Job) Location() *time.Location {
	if j.Timezone == "" {
		return time.UTC
	}
	if loc, ok := locations.Load(j.Timezone); ok {
		return loc.(*time.Location)
	}
	loc, err := time.LoadLocation(j.Timezone)
	if err != nil {
		return time.UTC
	}
	locations.Store(j.Timezone, loc)
	return loc
}

// locations caches the zones jobs name (time.LoadLocation reads and
// parses the zone's file at every call; an arming pass asks for every
// job's): bounded by the IANA database's few hundred names.
var locations sync.Map

// Sched parses the job's schedule.
func (j *Job) Sched() (Schedule, error) {
	if j.At != nil {
		return At(*j.At), nil
	}
	return ParseSchedule(j.Schedule, j.Location())
}

// Validate checks j; errors name the field.
func (j *Job) Validate() error { return j.validate(noPath) }

// jobPath is the path of the fields of the config's job at its index
// ("cron.jobs[12]."), or of a job alone ("", noPath). It is written only
// when an error names a field.
type jobPath int

// noPath is the path of a job that is not in the config.
const noPath jobPath = -1

func (i jobPath) String() string {
	if i < 0 {
		return ""
	}
	return fmt.Sprintf("cron.jobs[%d].", int(i))
}

func (j *Job) validate(p jobPath) error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s%s: "+format, append([]any{p.String(), field}, args...)...))
	}
	// check adds err when there is one: the checks below that take a
	// field are called only for a value that is set (none of them finds
	// fault with an unset one), so the field is written only for an error.
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if !bus.ValidToken(j.ID) {
		add("id", "%q: want 1-64 characters of a-z, 0-9, _ and -", j.ID)
	}
	if j.Timezone != "" {
		if j.Timezone == "Local" {
			add("timezone", "%q: name an IANA zone (e.g. Europe/Berlin), not the server's local zone", j.Timezone)
		} else if _, err := time.LoadLocation(j.Timezone); err != nil {
			add("timezone", "%q is not an IANA time zone (e.g. America/New_York, Europe/Berlin, UTC)", j.Timezone)
		}
	}
	switch {
	case j.Schedule == "" && j.At == nil:
		add("schedule", "missing: set schedule (e.g. \"0 9 * * mon\") or at (RFC 3339)")
	case j.Schedule != "" && j.At != nil:
		add("at", "set either schedule or at, not both")
	case j.Schedule != "":
		if _, err := ParseSchedule(j.Schedule, j.Location()); err != nil {
			if strings.HasPrefix(err.Error(), fmt.Sprintf("%q", strings.TrimSpace(j.Schedule))) {
				add("schedule", "%v", err)
			} else {
				add("schedule", "%q: %v", j.Schedule, err)
			}
		}
	}
	switch {
	case j.Workflow != "" && j.Prompt != "":
		add("prompt", "a job that starts workflow %s has no prompt of its own", j.Workflow)
	case j.Workflow == "" && strings.TrimSpace(j.Prompt) == "":
		add("prompt", "missing: say what the model should do")
	}
	for i, t := range j.Targets {
		check(connectors.CheckTarget(fmt.Sprintf("%stargets[%d]", p.String(), i), t))
	}
	switch j.Deliver {
	case "", agentwork.DeliverAuto, agentwork.DeliverReply, agentwork.DeliverNotify, agentwork.DeliverNone:
	default:
		add("deliver", "%q: want auto, reply, notify or none", j.Deliver)
	}
	switch j.Overlap {
	case "", OverlapSkip, OverlapQueue, OverlapAllow:
	default:
		add("overlap", "%q: want skip, queue or allow", j.Overlap)
	}
	switch j.Catchup.Policy {
	case "", CatchupRunOnce, CatchupSkip, CatchupRunAll:
	default:
		add("catchup", "%q: want run_once, skip or run_all", j.Catchup.Policy)
	}
	if j.Catchup.Max < 0 || j.Catchup.Max > maxCatchupMax {
		add("catchup.max", "%d: want 0-%d", j.Catchup.Max, maxCatchupMax)
	} else if j.Catchup.Max > 0 && j.Catchup.Policy != CatchupRunAll {
		add("catchup.max", "only applies to policy run_all")
	}
	if j.MaxRuns < 0 {
		add("max_runs", "%d: must not be negative (0: no limit)", j.MaxRuns)
	}
	if !j.Budget.IsZero() {
		check(j.Budget.Check(p.String() + "budget"))
	}
	if j.DedupWindow < 0 || time.Duration(j.DedupWindow) > agentwork.MaxDedupWindow {
		add("dedup_window", "%s: want 0 (cron.dedup_window) to 720h", j.DedupWindow)
	}
	if j.Jitter < 0 {
		add("jitter", "%s: must not be negative", j.Jitter)
	}
	if j.Retry.Attempts < 0 || j.Retry.Attempts > maxRetryAttempts {
		add("retry.attempts", "%d: want 0-%d", j.Retry.Attempts, maxRetryAttempts)
	}
	if j.Retry.Backoff < 0 {
		add("retry.backoff", "%s: must not be negative", j.Retry.Backoff)
	}
	for k := range j.Metadata {
		if k == "" {
			add("metadata", "empty key")
		}
	}
	if j.MaxSteps < 0 {
		add("max_steps", "%d: must not be negative (0: runner.max_steps)", j.MaxSteps)
	}
	if j.Timeout < 0 {
		add("timeout", "%s: must not be negative (0: cron.timeout)", j.Timeout)
	}
	if len(j.Tools) > 0 {
		check(tools.Scope(j.Tools).Check(p.String() + "tools"))
	}
	if len(j.Approval) > 0 {
		check(tools.Scope(j.Approval).Check(p.String() + "approval"))
	}
	if j.Memory != "" {
		check(memory.CheckLevel(p.String()+"memory", j.Memory))
	}
	return errors.Join(errs...)
}

// normalize fills the defaults that are stored with the job.
func (j *Job) normalize() {
	if j.Enabled == nil {
		t := true
		j.Enabled = &t
	}
	if j.Deliver == "" {
		j.Deliver = agentwork.DeliverAuto
	}
	if j.Overlap == "" {
		j.Overlap = OverlapSkip
	}
	if j.Catchup.Policy == "" {
		j.Catchup.Policy = CatchupRunOnce
	}
	if j.Catchup.Policy == CatchupRunAll && j.Catchup.Max == 0 {
		j.Catchup.Max = DefaultCatchupMax
	}
	if j.Retry.Attempts > 0 && j.Retry.Backoff == 0 {
		j.Retry.Backoff = Duration(DefaultRetryBackoff)
	}
	if j.At != nil {
		at := j.At.UTC()
		j.At = &at
	}
	if j.ExpiresAt != nil {
		e := j.ExpiresAt.UTC()
		j.ExpiresAt = &e
	}
}

// sameDefinition reports whether a and b define the same job, ignoring
// the bookkeeping fields.
func sameDefinition(a, b Job) bool {
	a.Origin, a.CreatedAt, a.UpdatedAt, a.Creator = "", time.Time{}, time.Time{}, nil
	b.Origin, b.CreatedAt, b.UpdatedAt, b.Creator = "", time.Time{}, time.Time{}, nil
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// UnmarshalYAML accepts "run_all" or {policy: run_all, max: 10}.
func (c *Catchup) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*c = Catchup{Policy: n.Value}
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: catchup: want a policy name or {policy: run_all, max: N}", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch k := n.Content[i].Value; k {
		case "policy", "max":
		default:
			return fmt.Errorf("line %d: catchup: unknown key %q (want policy, max)", n.Content[i].Line, k)
		}
	}
	type plain Catchup
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*c = Catchup(p)
	return nil
}

// MarshalJSON writes the policy name, or an object when Max is set.
func (c Catchup) MarshalJSON() ([]byte, error) {
	if c.Max == 0 {
		return json.Marshal(c.Policy)
	}
	type plain Catchup
	return json.Marshal(plain(c))
}

// UnmarshalJSON accepts "run_all" or {"policy": "run_all", "max": 10}.
func (c *Catchup) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = Catchup{Policy: s}
		return nil
	}
	type plain Catchup
	var p plain
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("catchup: want a policy name or {\"policy\": \"run_all\", \"max\": N}: %w", err)
	}
	*c = Catchup(p)
	return nil
}

// IsZero reports whether no policy is set.
func (c Catchup) IsZero() bool { return c == Catchup{} }

// JSONSchema describes Catchup for `agentwork config schema`.
func (Catchup) JSONSchema() *jsonschema.Schema {
	policies := []any{CatchupRunOnce, CatchupSkip, CatchupRunAll}
	props := jsonschema.NewProperties()
	props.Set("policy", &jsonschema.Schema{Type: "string", Enum: policies})
	props.Set("max", &jsonschema.Schema{Type: "integer", Minimum: json.Number("0"), Maximum: json.Number(fmt.Sprint(maxCatchupMax))})
	return &jsonschema.Schema{
		Description: "catch-up after downtime: run_once (default), skip, or {policy: run_all, max: 10}",
		OneOf: []*jsonschema.Schema{
			{Type: "string", Enum: policies},
			{Type: "object", Properties: props, AdditionalProperties: jsonschema.FalseSchema},
		},
	}
}

// IsZero reports whether no retry is configured.
func (r Retry) IsZero() bool { return r == Retry{} }

// Duration is a time.Duration written as a Go duration string ("90s",
// "1h30m") in YAML and JSON.
type Duration time.Duration

// String returns the duration as Go writes it.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%q is not a duration (want e.g. 30s, 5m, 1h30m)", b)
	}
	*d = Duration(v)
	return nil
}

// JSONSchema describes Duration for `agentwork config schema`.
func (Duration) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Pattern: `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`, Description: "a Go duration, e.g. 30s, 5m, 1h30m"}
}
