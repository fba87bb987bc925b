package heartbeat

import (
	"errors"
	"fmt"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/memory"
	"github.com/agentwork/agentwork/triggers/activehours"
	"github.com/agentwork/agentwork/triggers/budget"
)

// Output modes: how the model's answer is read.
const (
	// ModeNotify (default): only a notify_user call reaches the user; no call
	// means nothing needs attention (fail-closed).
	ModeNotify = "notify"
	// ModeOKToken is for models without tool calling: a reply that starts or
	// ends with HEARTBEAT_OK is an ack; any other reply is delivered.
	ModeOKToken = "ok_token"
)

// Overlap policies: what a fire does while the previous heartbeat still runs.
const (
	// OverlapSkip (default) ends the new run at once with skip "busy".
	OverlapSkip = agentwork.OverlapSkip
	// OverlapQueue waits until the running heartbeat has finished; a queued
	// tick that a newer tick has overtaken is skipped "busy".
	OverlapQueue = agentwork.OverlapQueue
)

// Defaults.
const (
	DefaultName        = "default"
	DefaultEvery       = 30 * time.Minute
	DefaultChecklist   = "HEARTBEAT.md"
	DefaultDedupWindow = 24 * time.Hour
	DefaultTimeout     = 5 * time.Minute
	// MinEvery is the shortest interval: every heartbeat is a model call.
	MinEvery = time.Minute
)

// Config is the `heartbeat` section of agentwork.yaml. Zero fields take the
// documented defaults.
type Config struct {
	// Name identifies the heartbeat: the last token of its request subject
	// (agentwork.request.heartbeat.<name>), its events' subject and its state
	// key. Default "default".
	Name string `yaml:"name" json:"name,omitempty"`
	// Enabled turns the schedule on. Default false: a heartbeat costs a
	// model call every `every`. A disabled heartbeat still answers status
	// and runs on `wake`.
	Enabled bool `yaml:"enabled" json:"enabled,omitempty"`
	// Every is the interval between heartbeats. Default 30m, at least 1m.
	// The rhythm continues from the last fire across restarts.
	Every time.Duration `yaml:"every" json:"every,omitempty"`
	// ActiveHours limits scheduled heartbeats to a daily window (start
	// inclusive, end exclusive, over midnight when end < start, 24:00
	// allowed, IANA timezone, days). Unset: always. `wake` ignores it.
	ActiveHours activehours.Window `yaml:"active_hours" json:"active_hours,omitzero"`
	// Checklist is the path of the checklist (HEARTBEAT.md), relative to
	// the config file's directory. Default HEARTBEAT.md. It is read at every
	// fire, so edits apply without a restart. An effectively empty checklist
	// skips the run ("empty-checklist") without calling the model; a missing
	// one skips it ("no-checklist").
	Checklist string `yaml:"checklist" json:"checklist,omitempty"`
	// ChecklistInMemory keeps the checklist in the agent's memory (the
	// document checklist: agentwork memory show|edit checklist) instead of
	// the file, so that a run may change it (the checklist_update tool)
	// and every instance reads the same one, with its last revisions kept.
	// When the document was never written, the first heartbeat copies
	// Checklist into it; after that the file is not read. Default false.
	ChecklistInMemory bool `yaml:"checklist_in_memory" json:"checklist_in_memory,omitempty"`
	// Prompt replaces the default instructions given to the model before the
	// checklist. The default teaches notify_user (or HEARTBEAT_OK in
	// ok_token mode): silence means nothing needs attention.
	Prompt string `yaml:"prompt" json:"prompt,omitempty"`
	// DedupWindow: the same notification text is not sent again within it.
	// Default 24h.
	DedupWindow time.Duration `yaml:"dedup_window" json:"dedup_window,omitempty"`
	// Targets are the connectors notifications go to. Default: the runner's
	// default targets.
	Targets []string `yaml:"targets" json:"targets,omitempty"`
	// Overlap is skip (default) or queue: what a fire does while the
	// previous heartbeat still runs (on any instance).
	Overlap string `yaml:"overlap" json:"overlap,omitempty" jsonschema:"enum=skip,enum=queue"`
	// OutputMode is notify (default) or ok_token.
	OutputMode string `yaml:"output_mode" json:"output_mode,omitempty" jsonschema:"enum=notify,enum=ok_token"`
	// Timeout bounds one heartbeat run (model and tools). Default 5m.
	Timeout time.Duration `yaml:"timeout" json:"timeout,omitempty"`
	// Budget caps the model tokens of its runs (scheduled and woken) per
	// day, the day taken in active_hours.timezone (default UTC): when the
	// next run would pass it, the heartbeat pauses itself with one alert
	// to its targets until the next midnight there (its first tick from
	// then on runs), or until `agentwork heartbeat resume`. Default: no cap.
	Budget budget.Budget `yaml:"budget" json:"budget,omitzero"`
	// Tools are the tools a heartbeat may use, instead of runner.tools:
	// names and globs (e.g. [fs__read_text_file, fs__list_directory]). In
	// notify mode it has notify_user in any case. Default: runner.tools.
	Tools []string `yaml:"tools" json:"tools,omitempty"`
	// Approval names the tools whose calls wait for a person's approval
	// in its runs, besides runner.approval (which it adds to, never
	// replaces): names and globs, as in tools. Default: none.
	Approval []string `yaml:"approval" json:"approval,omitempty"`
	// Model names the model of its runs: "default" (the model section) or
	// a key of the models section, e.g. a cheaper one than the work it
	// triggers. Default: runner.model.
	Model string `yaml:"model" json:"model,omitempty"`
	// Fallback names the models that take over, in order, when Model is
	// unavailable (see runner.fallback). Default: runner.fallback.
	Fallback []string `yaml:"fallback" json:"fallback,omitempty"`
	// MaxSteps bounds its tool loop (model calls per run). Default:
	// runner.max_steps.
	MaxSteps int `yaml:"max_steps" json:"max_steps,omitempty"`
	// Memory is how much of the agent's memory a heartbeat's prompt holds:
	// none, light (long-term memory) or full (and today's and yesterday's
	// log). Default: runner.memory.
	Memory string `yaml:"memory" json:"memory,omitempty" jsonschema:"enum=none,enum=light,enum=full"`
	// MemoryFlush, if true, ends each heartbeat whose tools write memory
	// (memory_append, memory_replace) with a silent turn in which the
	// model stores what matters (docs/memory.md; one more model call per
	// run); false turns it off for the heartbeat. Default:
	// runner.memory_flush.
	MemoryFlush *bool `yaml:"memory_flush" json:"memory_flush,omitempty"`
}

// WithDefaults returns c with zero fields filled.
func (c Config) WithDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Every == 0 {
		c.Every = DefaultEvery
	}
	if c.Checklist == "" {
		c.Checklist = DefaultChecklist
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = DefaultDedupWindow
	}
	if c.Overlap == "" {
		c.Overlap = OverlapSkip
	}
	if c.OutputMode == "" {
		c.OutputMode = ModeNotify
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// Validate checks c (zero fields count as their defaults). Errors name the
// field as it is written in agentwork.yaml.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if err := bus.CheckToken("heartbeat.name", c.Name); err != nil {
		errs = append(errs, err)
	}
	if c.Every < MinEvery {
		errs = append(errs, fmt.Errorf("heartbeat.every: %s: want at least %s (each heartbeat is a model call)", c.Every, MinEvery))
	}
	if _, err := activehours.Parse("heartbeat.active_hours", c.ActiveHours); err != nil {
		errs = append(errs, err)
	}
	if c.DedupWindow < 0 {
		errs = append(errs, fmt.Errorf("heartbeat.dedup_window: %s: must not be negative", c.DedupWindow))
	}
	for i, t := range c.Targets {
		if err := connectors.CheckTarget(fmt.Sprintf("heartbeat.targets[%d]", i), t); err != nil {
			errs = append(errs, err)
		}
	}
	switch c.Overlap {
	case OverlapSkip, OverlapQueue:
	default:
		errs = append(errs, fmt.Errorf("heartbeat.overlap: %q: want skip or queue", c.Overlap))
	}
	switch c.OutputMode {
	case ModeNotify, ModeOKToken:
	default:
		errs = append(errs, fmt.Errorf("heartbeat.output_mode: %q: want notify or ok_token", c.OutputMode))
	}
	if c.Timeout < time.Second {
		errs = append(errs, fmt.Errorf("heartbeat.timeout: %s: want at least 1s", c.Timeout))
	}
	errs = append(errs, c.Budget.Check("heartbeat.budget"))
	if c.MaxSteps < 0 {
		errs = append(errs, fmt.Errorf("heartbeat.max_steps: %d: must not be negative (0: runner.max_steps)", c.MaxSteps))
	}
	errs = append(errs, tools.Scope(c.Tools).Check("heartbeat.tools"))
	errs = append(errs, tools.Scope(c.Approval).Check("heartbeat.approval"))
	errs = append(errs, memory.CheckLevel("heartbeat.memory", c.Memory))
	return errors.Join(errs...)
}
