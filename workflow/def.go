package workflow

import (
	"time"
)

// Set is the workflows of a configuration by name: the config file's
// workflows section merged with the files of a workflows directory.
type Set map[string]*Workflow

// Workflow is one workflow definition. A run keeps a copy of the
// definition it started with (Run.Def), so a changed definition affects new
// runs only. Every field is optional except Steps.
type Workflow struct {
	// Name is the workflow's name: its key in the workflows section, or
	// its file's name without .yaml. 1-64 characters of a-z, 0-9, _ and -.
	Name string `yaml:"-" json:"name"`
	// Description says what the workflow is for (shown by list commands).
	Description string `yaml:"description" json:"description,omitempty"`
	// Inputs are the run's parameters by name, checked when a run starts.
	Inputs map[string]Input `yaml:"inputs" json:"inputs,omitempty"`
	// On lists the triggers that start runs; none: runs start only by
	// hand or through the API.
	On []Trigger `yaml:"on" json:"on,omitempty"`
	// Concurrency bounds the runs of this workflow in flight at once.
	Concurrency Concurrency `yaml:"concurrency" json:"concurrency"`
	// Timeout bounds a whole run, waits included; 0: no bound. A run that
	// passes it ends timed_out.
	Timeout time.Duration `yaml:"timeout" json:"timeout,omitempty"`
	// Targets are the connectors that get an alert when a run ends
	// failed or timed_out (connector names, as a job's targets).
	Targets []string `yaml:"targets" json:"targets,omitempty"`
	// Steps run in order; see Step.
	Steps []Step `yaml:"steps" json:"steps"`

	// File and Line are where the definition was read ("" and 0 for one
	// built in Go); lines maps field paths below the workflow
	// ("steps[1].args.url") to their lines, for errors.
	File  string         `yaml:"-" json:"-"`
	Line  int            `yaml:"-" json:"-"`
	lines map[string]int `yaml:"-" json:"-"`
	// path is the workflow's key path in its document ("workflows.x", or
	// "" for a file of its own).
	path string
}

// Input types.
const (
	TypeString  = "string"
	TypeNumber  = "number"
	TypeInteger = "integer"
	TypeBoolean = "boolean"
	TypeObject  = "object"
	TypeArray   = "array"
)

// Input declares one input of a workflow.
type Input struct {
	// Type is string (default), number, integer, boolean, object or array.
	Type string `yaml:"type" json:"type,omitempty" jsonschema:"enum=string,enum=number,enum=integer,enum=boolean,enum=object,enum=array"`
	// Required inputs must be given when a run starts.
	Required bool `yaml:"required" json:"required,omitempty"`
	// Default is the value of an input not given (of Type).
	Default any `yaml:"default" json:"default,omitempty"`
	// Description says what the input is for.
	Description string `yaml:"description" json:"description,omitempty"`
}

// Trigger is one entry of On: exactly one of its fields is set.
type Trigger struct {
	// Webhook: runs are started by POST /v1/workflows/<name>/runs, the
	// request body being the inputs.
	Webhook *Webhook `yaml:"webhook" json:"webhook,omitempty"`
	// Cron: runs start on a schedule.
	Cron *Cron `yaml:"cron" json:"cron,omitempty"`
	// Event: runs start on an event of the bus.
	Event *EventTrigger `yaml:"event" json:"event,omitempty"`
}

// Webhook is the webhook trigger; it has no fields yet (auth and grants
// are those of tasks).
type Webhook struct{}

// Cron starts a run at each tick of a schedule.
type Cron struct {
	// Schedule is a cron expression as cron jobs take it ("0 9 * * mon",
	// "@daily", "@every 90m").
	Schedule string `yaml:"schedule" json:"schedule"`
	// Timezone is an IANA time zone (default UTC).
	Timezone string `yaml:"timezone" json:"timezone,omitempty"`
}

// EventTrigger starts a run for each matching CloudEvent on
// agentwork.event.>; the event's id is the run's idempotency key, so one
// event starts at most one run per trigger.
type EventTrigger struct {
	// Type is the event type to match, e.g. agentwork.cron.error.
	Type string `yaml:"type" json:"type"`
	// Subject, when set, must equal the event's subject.
	Subject string `yaml:"subject" json:"subject,omitempty"`
	// If is an expression over `event` (id, type, subject, source, time,
	// data) that must be true for the event to start a run.
	If string `yaml:"if" json:"if,omitempty"`
}

// Overlap policies: what a trigger does when Concurrency.Limit runs are in
// flight.
const (
	OverlapSkip  = "skip"
	OverlapQueue = "queue"
	OverlapAllow = "allow"
)

// Concurrency bounds the runs of a workflow in flight at once, like a cron
// job's overlap policy.
type Concurrency struct {
	// Limit is how many runs may be in flight; 0: no limit.
	Limit int `yaml:"limit" json:"limit,omitempty"`
	// Overlap is skip (a new run is not started, with an event saying
	// so), queue (it waits for a free place; the default) or allow (the
	// limit is not applied).
	Overlap string `yaml:"overlap" json:"overlap,omitempty" jsonschema:"enum=skip,enum=queue,enum=allow"`
}

// Failure policies of a step.
const (
	OnFailureFail     = "fail"
	OnFailureContinue = "continue"
)

// Step is one step. It has exactly one kind: Agent, Tool, Notify, Wait or
// Until, Workflow, or Parallel; Foreach and If modify any kind but
// Parallel.
//
// Room for more kinds: a kind is one more pointer or field here, one more
// case in Kind, and one more case in the decision function's launch.
type Step struct {
	// ID names the step for references (steps.<id>.output) and in run
	// state: 1-64 characters of a-z, 0-9, _ and -, unique in the workflow
	// (branches of parallel steps included).
	ID string `yaml:"id" json:"id"`
	// If is a condition (an expression, no ${{ }}); when false the step is
	// skipped and its state keeps the condition's value.
	If string `yaml:"if" json:"if,omitempty"`
	// Timeout bounds each attempt of the step (each item's, for a foreach
	// step); 0: no bound. An attempt that passes it fails with kind
	// timeout, and is retried as Retry says.
	Timeout time.Duration `yaml:"timeout" json:"timeout,omitempty"`
	// Retry says how often a failed attempt is tried again.
	Retry *Retry `yaml:"retry" json:"retry,omitempty"`
	// OnFailure is fail (default: the run fails) or continue (the run goes
	// on; the step keeps its failed status and error for later steps).
	OnFailure string `yaml:"on_failure" json:"on_failure,omitempty" jsonschema:"enum=fail,enum=continue"`

	// Agent runs a prompt through the runner.
	Agent *Agent `yaml:"agent" json:"agent,omitempty"`
	// Tool calls one tool of the registry, without a model.
	Tool string `yaml:"tool" json:"tool,omitempty"`
	// Args are the tool's arguments; strings may hold ${{ }} templates,
	// and a string that is exactly one template takes the expression's
	// JSON value (a number stays a number, an object an object).
	Args map[string]any `yaml:"args" json:"args,omitempty"`
	// Notify sends a notification through the connectors.
	Notify *Notify `yaml:"notify" json:"notify,omitempty"`
	// Wait waits this long.
	Wait time.Duration `yaml:"wait" json:"wait,omitempty"`
	// Until waits until the time an expression gives (a time, or an RFC
	// 3339 string).
	Until string `yaml:"until" json:"until,omitempty"`
	// Workflow starts a child run of the named workflow and takes its
	// outputs (the child's last step's output) as its own.
	Workflow string `yaml:"workflow" json:"workflow,omitempty"`
	// With are the child run's inputs (templates allowed, as in Args).
	With map[string]any `yaml:"with" json:"with,omitempty"`
	// Parallel runs named branches, each a list of steps, at once; the
	// step ends when all have ended. Its output maps each branch to the
	// output of the branch's last step.
	Parallel map[string][]Step `yaml:"parallel" json:"parallel,omitempty"`
	// Approval asks people a question and waits for their decision (an
	// approval of package approval): the step waits, holding no worker,
	// until someone approves or rejects, or the approval's deadline
	// passes.
	Approval *Approval `yaml:"approval" json:"approval,omitempty"`

	// Foreach is an expression giving a list: the step's kind runs once
	// per item, with `item` and `index` in its templates. The step's
	// output is the list of the items' outputs.
	Foreach string `yaml:"foreach" json:"foreach,omitempty"`
	// Concurrency caps the items of a foreach step in flight at once
	// (default 1: one after the other).
	Concurrency int `yaml:"concurrency" json:"concurrency,omitempty"`
}

// Step kinds, as Step.Kind returns them.
const (
	KindAgent    = "agent"
	KindTool     = "tool"
	KindNotify   = "notify"
	KindWait     = "wait"
	KindWorkflow = "workflow"
	KindParallel = "parallel"
	KindApproval = "approval"
)

// Kind returns the step's kind ("" when it has none) and every kind it
// sets (more than one is an error of the definition).
func (s *Step) Kind() (string, []string) {
	var kinds []string
	if s.Agent != nil {
		kinds = append(kinds, KindAgent)
	}
	if s.Tool != "" {
		kinds = append(kinds, KindTool)
	}
	if s.Notify != nil {
		kinds = append(kinds, KindNotify)
	}
	if s.Wait != 0 || s.Until != "" {
		kinds = append(kinds, KindWait)
	}
	if s.Workflow != "" {
		kinds = append(kinds, KindWorkflow)
	}
	if s.Parallel != nil {
		kinds = append(kinds, KindParallel)
	}
	if s.Approval != nil {
		kinds = append(kinds, KindApproval)
	}
	if len(kinds) == 0 {
		return "", nil
	}
	return kinds[0], kinds
}

// Retry is a step's retry policy.
type Retry struct {
	// Attempts is the number of attempts in all, the first included
	// (default 1: no retry), at most MaxAttempts.
	Attempts int `yaml:"attempts" json:"attempts"`
	// Backoff is the wait before the second attempt (default 1s).
	Backoff time.Duration `yaml:"backoff" json:"backoff,omitempty"`
	// Exponential doubles the wait after each failed attempt...
	Exponential bool `yaml:"exponential" json:"exponential,omitempty"`
	// ...up to MaxBackoff (default: no cap beyond MaxRetryBackoff).
	MaxBackoff time.Duration `yaml:"max_backoff" json:"max_backoff,omitempty"`
}

// Delay returns the wait before attempt n+1 after attempt n (n ≥ 1) failed.
func (r *Retry) Delay(n int) time.Duration {
	d := r.Backoff
	if d <= 0 {
		d = time.Second
	}
	limit := r.MaxBackoff
	if limit <= 0 || limit > MaxRetryBackoff {
		limit = MaxRetryBackoff
	}
	if r.Exponential {
		for i := 1; i < n && d < limit; i++ {
			d *= 2
		}
	}
	return min(d, limit)
}

// Agent is an agent step: a prompt run by the runner with its gates, tool
// scope, model, fallback, budget, checkpoint and record.
type Agent struct {
	// Prompt is the task (templates allowed).
	Prompt string `yaml:"prompt" json:"prompt"`
	// Output, when set, is a JSON Schema the reply must meet: the reply is
	// parsed as JSON and checked; a reply that does not meet it is asked
	// for once more with the validation error, then the attempt fails.
	Output map[string]any `yaml:"output" json:"output,omitempty"`
	// Tools are the tool names or globs the run may use (as a task's
	// tools); none: notify_user only.
	Tools []string `yaml:"tools" json:"tools,omitempty"`
	// Model is a model name (models.<name>, or default).
	Model string `yaml:"model" json:"model,omitempty"`
	// Fallback are the models to try, in order, when Model is unavailable.
	Fallback []string `yaml:"fallback" json:"fallback,omitempty"`
	// MaxSteps bounds the model calls of the run (runner default when 0).
	MaxSteps int `yaml:"max_steps" json:"max_steps,omitempty"`
	// Memory is none, light or full, as for tasks (runner default when "").
	Memory string `yaml:"memory" json:"memory,omitempty" jsonschema:"enum=none,enum=light,enum=full"`
}

// Approval is an approval step: a question to people, and their decision.
// The step's output is {approved, verdict, state, decided_by, comment,
// decided_at}; later steps read steps.<id>.approved, .decided_by and
// .comment. A rejection ends the step done with approved false (so
// `if: steps.<id>.approved` skips what it guards); only on_timeout fail
// fails it.
type Approval struct {
	// Message is the question (templates allowed).
	Message string `yaml:"message" json:"message"`
	// Targets are the connectors that carry the question (templates
	// allowed); none: the workflow's targets.
	Targets []string `yaml:"targets" json:"targets,omitempty"`
	// Approvers, if set, are who may decide: connector:user-id
	// ("telegram:123456789", "slack:U024BE7LH"), or link for anyone
	// holding the question's signed links. None: anyone the question
	// reaches.
	Approvers []string `yaml:"approvers" json:"approvers,omitempty"`
	// Timeout is how long the question waits for an answer (default:
	// approvals.timeout, 24h).
	Timeout time.Duration `yaml:"timeout" json:"timeout,omitempty"`
	// OnTimeout is what happens when nobody answered in time: reject
	// (default: done, approved false), approve (done, approved true) or
	// fail (the step fails, and so the run unless on_failure: continue).
	OnTimeout string `yaml:"on_timeout" json:"on_timeout,omitempty" jsonschema:"enum=reject,enum=approve,enum=fail"`
	// Reminder, if set, asks again once, this long after the question,
	// if nobody answered yet; shorter than Timeout.
	Reminder time.Duration `yaml:"reminder" json:"reminder,omitempty"`
}

// Urgency of a notification.
const (
	UrgencyLow    = "low"
	UrgencyNormal = "normal"
	UrgencyHigh   = "high"
)

// Notify is a notify step: one notification, delivered and dead-lettered
// like every notification.
type Notify struct {
	// Text is the message (templates allowed).
	Text string `yaml:"text" json:"text"`
	// Targets are connector names (templates allowed); none: the
	// workflow's targets.
	Targets []string `yaml:"targets" json:"targets,omitempty"`
	// Urgency is low, normal (default) or high.
	Urgency string `yaml:"urgency" json:"urgency,omitempty" jsonschema:"enum=low,enum=normal,enum=high"`
}

// Limits of definitions and runs.
const (
	// MaxSteps bounds the steps of a workflow, those of parallel branches
	// included.
	MaxSteps = 200
	// MaxDepth bounds the nesting of child runs: a run started by a step
	// of a run started by a step ... is at most this deep (the first run
	// is at depth 0). A run that would start one deeper fails its step.
	MaxDepth = 8
	// MaxForeachItems bounds the items of one foreach step.
	MaxForeachItems = 1000
	// MaxConcurrency bounds the items of a foreach step in flight at once.
	MaxConcurrency = 100
	// MaxBranches bounds the branches of a parallel step.
	MaxBranches = 32
	// MaxAttempts bounds a step's Retry.Attempts.
	MaxAttempts = 20
	// MaxRetryBackoff bounds the wait between two attempts.
	MaxRetryBackoff = 24 * time.Hour
)
