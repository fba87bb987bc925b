package agentwork

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/memory"
)

// Config configures a Runner. Zero fields take the documented defaults.
type Config struct {
	// Concurrency is how many runs one instance does at once. Default 4.
	Concurrency int `yaml:"concurrency" json:"concurrency,omitempty"`
	// MaxSteps bounds the tool loop (model calls per run). Default 8.
	MaxSteps int `yaml:"max_steps" json:"max_steps,omitempty"`
	// Timeout bounds one run's model work. Default 5m.
	Timeout time.Duration `yaml:"timeout" json:"timeout,omitempty"`
	// MaxAttempts is how often a transient or timed-out model call is tried
	// before the run fails with an error event. Default 4.
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts,omitempty"`
	// Backoff between attempts (the last value repeats); a server's
	// Retry-After wins when longer. Default 2s, 10s, 30s, 2m.
	Backoff []time.Duration `yaml:"backoff" json:"backoff,omitempty"`
	// AckWait is how long JetStream waits for an ack or progress signal
	// before redelivering. Default 30s; progress is signalled every AckWait/3.
	AckWait time.Duration `yaml:"ack_wait" json:"ack_wait,omitempty"`
	// ShutdownGrace is how long runs in flight may finish at shutdown before
	// they are put back for another instance. Default 10s.
	ShutdownGrace time.Duration `yaml:"shutdown_grace" json:"shutdown_grace,omitempty"`
	// AlertWindow: after a run fails for good, an alert goes to its targets;
	// further failures of the same source, name and error class within the
	// window do not alert again (their error events still say everything).
	// Default 6h; negative: alert on every failure.
	AlertWindow time.Duration `yaml:"alert_window" json:"alert_window,omitempty"`
	// Targets are the default connectors of every source. Default: all.
	Targets []string `yaml:"targets" json:"targets,omitempty"`
	// DedupWindow is the dedup window of the sources that have none of
	// their own (tasks, webhook sources): the same notification (text,
	// source, name, targets) is not sent again within it. A request's
	// dedup_window wins. Default 0: every notification is sent.
	DedupWindow time.Duration `yaml:"dedup_window" json:"dedup_window,omitempty"`
	// Tools are the tools every run may use: tool names and globs over
	// them in path.Match syntax ("fs__*": every tool of the MCP server fs;
	// "*": every tool). heartbeat.tools, a cron job's tools and
	// tasks.<name>.tools replace them for their runs. A run that delivers
	// what the model passes to notify_user has notify_user whatever its
	// tools say. A call of any other tool is refused and runs nothing.
	// Default [notify_user].
	Tools []string `yaml:"tools" json:"tools,omitempty"`
	// MaxToolCalls bounds the tool calls of one run, notify_user aside (it
	// has its own bound of 5 messages): a call beyond is refused, and the
	// model is told so. Default 20, at most 1000.
	MaxToolCalls int `yaml:"max_tool_calls" json:"max_tool_calls,omitempty"`
	// Model names the model of every run: "default" (the model section)
	// or a key of the models section. heartbeat.model, a cron job's model
	// and tasks.<name>.model replace it for their runs. Default "default".
	Model string `yaml:"model" json:"model,omitempty"`
	// Fallback names the models that take over, in order, when a run's
	// model is unavailable (5xx, 429, overloaded, 404 no such model, a
	// rejected key): the next answers that call at once, before the
	// runner tries the run again with backoff. A request the model
	// rejected (400, 413, 422) does not fall back. heartbeat.fallback, a
	// cron job's fallback and tasks.<name>.fallback replace it for their
	// runs. Default: none.
	Fallback []string `yaml:"fallback" json:"fallback,omitempty"`
	// Memory is how much of the agent's memory (docs/memory.md) the system
	// prompt of every run holds: none, light (long-term memory) or full
	// (long-term memory, today's and yesterday's log), cut to size with a
	// line that says so. heartbeat.memory, a cron job's memory and
	// tasks.<name>.memory replace it for their runs. Default none.
	Memory string `yaml:"memory" json:"memory,omitempty" jsonschema:"enum=none,enum=light,enum=full"`
	// MemoryFlush gives every run whose tools include memory_append or
	// memory_replace one more, silent model turn after its work: it is
	// asked to store what matters from the run with the memory tools and
	// to answer NO_REPLY; nothing of that turn is delivered (docs/memory.md).
	// One more model call per run. heartbeat.memory_flush, a cron job's
	// memory_flush and tasks.<name>.memory_flush replace it for their
	// runs. Default false.
	MemoryFlush bool `yaml:"memory_flush" json:"memory_flush,omitempty"`
	// Approval names the tools whose calls wait for a person's approval,
	// in every run: names and globs as in Tools ("exec",
	// "github__merge_*"). heartbeat.approval, a cron job's approval and
	// tasks.<name>.approval add theirs for their runs. When the model
	// calls one, the run asks (Approvals), parks on its checkpoint, and
	// goes on once someone decided: approved, the call is made; refused,
	// the model is told so and by whom. notify_user never waits.
	// Default: none.
	Approval []string `yaml:"approval" json:"approval,omitempty"`
	// Approvals says whom a gated tool call asks, and how long it waits.
	Approvals ApprovalConfig `yaml:"approvals" json:"approvals,omitzero"`
}

// ApprovalConfig is how a gated tool call asks (runner.approvals).
type ApprovalConfig struct {
	// Targets are the connector targets the question goes to. Default:
	// the source's default targets, else runner.targets, else every
	// connector; never the targets a request names (its sender would be
	// sent the means to approve its own call).
	Targets []string `yaml:"targets" json:"targets,omitempty"`
	// Approvers, if set, are who may decide ("telegram:123456789",
	// "slack:U024BE7LH", "link" for whoever holds the question's signed
	// links); the admin (API, CLI) may always. Default: anyone the
	// question reaches.
	Approvers []string `yaml:"approvers" json:"approvers,omitempty"`
	// Timeout is how long a call waits for a decision. Default
	// approvals.timeout (24h); at most MaxParked.
	Timeout time.Duration `yaml:"timeout" json:"timeout,omitempty"`
	// OnTimeout is what happens when nobody decided in time: reject (the
	// call is not made, the model is told), approve (it is made) or fail
	// (the run ends with an error). Default reject.
	OnTimeout string `yaml:"on_timeout" json:"on_timeout,omitempty" jsonschema:"enum=reject,enum=approve,enum=fail"`
}

// MaxParked is the longest a run may wait for an approval: its claim,
// which keeps its conversation meanwhile, lives a day longer in
// agentwork_locks (bus.LocksTTL).
const MaxParked = bus.LocksTTL - 24*time.Hour

// Validate checks the approvals section of the runner.
func (c ApprovalConfig) Validate() error {
	var errs []error
	for _, t := range c.Targets {
		if err := connectors.CheckTarget("runner.approvals.targets", t); err != nil {
			errs = append(errs, err)
		}
	}
	for i, ap := range c.Approvers {
		if c, id, ok := strings.Cut(ap, ":"); ap != approval.ByLink && ap != approval.ByAdmin && (!ok || c == "" || id == "") {
			errs = append(errs, fmt.Errorf("runner.approvals.approvers[%d]: %q: want telegram:<user id> (telegram:123456789), link or admin", i, ap))
		}
	}
	if c.Timeout < 0 || c.Timeout > MaxParked {
		errs = append(errs, fmt.Errorf("runner.approvals.timeout: %s: want a duration up to %s (0: approvals.timeout)", c.Timeout, MaxParked))
	}
	switch approval.Verdict(c.OnTimeout) {
	case "", approval.Reject, approval.Approve, approval.Fail:
	default:
		errs = append(errs, fmt.Errorf("runner.approvals.on_timeout: %q: want reject, approve or fail", c.OnTimeout))
	}
	return errors.Join(errs...)
}

// DefaultMaxToolCalls is the default of Config.MaxToolCalls.
const DefaultMaxToolCalls = 20

func (c Config) withDefaults() Config {
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.MaxSteps <= 0 {
		c.MaxSteps = 8
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 4
	}
	if len(c.Backoff) == 0 {
		c.Backoff = []time.Duration{2 * time.Second, 10 * time.Second, 30 * time.Second, 2 * time.Minute}
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	if c.AlertWindow == 0 {
		c.AlertWindow = 6 * time.Hour
	}
	if len(c.Tools) == 0 {
		c.Tools = tools.DefaultScope
	}
	if c.MaxToolCalls <= 0 {
		c.MaxToolCalls = DefaultMaxToolCalls
	}
	return c
}

// Validate checks c.
func (c Config) Validate() error {
	if c.Concurrency < 0 || c.Concurrency > 1024 {
		return fmt.Errorf("runner.concurrency: %d: want 1-1024", c.Concurrency)
	}
	if c.MaxSteps < 0 || c.MaxAttempts < 0 {
		return errors.New("runner.max_steps/max_attempts: must not be negative")
	}
	if c.AckWait != 0 && c.AckWait < time.Second {
		return fmt.Errorf("runner.ack_wait: %s: want at least 1s", c.AckWait)
	}
	if c.DedupWindow < 0 || c.DedupWindow > MaxDedupWindow {
		return fmt.Errorf("runner.dedup_window: %s: want 0 (off) to 720h", c.DedupWindow)
	}
	for _, t := range c.Targets {
		if err := connectors.CheckTarget("runner.targets", t); err != nil {
			return err
		}
	}
	if c.MaxToolCalls < 0 || c.MaxToolCalls > 1000 {
		return fmt.Errorf("runner.max_tool_calls: %d: want 1-1000 (0 for the default %d)", c.MaxToolCalls, DefaultMaxToolCalls)
	}
	if err := memory.CheckLevel("runner.memory", c.Memory); err != nil {
		return err
	}
	if err := tools.Scope(c.Approval).Check("runner.approval"); err != nil {
		return err
	}
	if err := c.Approvals.Validate(); err != nil {
		return err
	}
	return tools.Scope(c.Tools).Check("runner.tools")
}
