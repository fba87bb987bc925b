package webhook

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/memory"
)

// Tasks is the tasks section of agentwork.yaml: the settings of the tasks
// of one name (requests of source task, such as POST /v1/tasks with
// {"name": "report"}), keyed by that name: their tools, model, fallback
// models, max steps and timeout.
//
//	tasks:
//	  report:
//	    tools: [sales__*]
//	    model: strong
//
// A task whose name is not listed uses the runner's (runner.tools, ...). Requests of the other
// sources a webhook credential may be granted are not tasks: they use
// runner.tools.
type Tasks map[string]TaskConfig

// TaskConfig is the settings of the tasks of one name.
type TaskConfig struct {
	// Tools are the tools its runs may use, instead of runner.tools: names
	// and globs (e.g. [sales__*, notify_user]). A task that delivers what
	// the model passes to notify_user (deliver auto or notify) has it in
	// any case. Default: runner.tools.
	Tools []string `yaml:"tools" json:"tools,omitempty"`
	// Approval names the tools whose calls wait for a person's approval
	// in its runs, besides runner.approval (which it adds to, never
	// replaces): names and globs, as in tools. Default: none.
	Approval []string `yaml:"approval" json:"approval,omitempty"`
	// Model names the model of its runs: "default" (the model section) or
	// a key of the models section. Default: runner.model.
	Model string `yaml:"model" json:"model,omitempty"`
	// Fallback names the models that take over, in order, when Model is
	// unavailable (see runner.fallback). Default: runner.fallback.
	Fallback []string `yaml:"fallback" json:"fallback,omitempty"`
	// MaxSteps bounds the tool loop of its runs (model calls per run).
	// Default: runner.max_steps.
	MaxSteps int `yaml:"max_steps" json:"max_steps,omitempty"`
	// Timeout bounds one run's model work. Default: runner.timeout.
	Timeout time.Duration `yaml:"timeout" json:"timeout,omitempty"`
	// Memory is how much of the agent's memory its runs' prompt holds:
	// none, light (long-term memory) or full (and today's and yesterday's
	// log). Default: runner.memory.
	Memory string `yaml:"memory" json:"memory,omitempty" jsonschema:"enum=none,enum=light,enum=full"`
	// MemoryFlush, if true, ends each run whose tools write memory with a
	// silent turn in which the model stores what matters (docs/memory.md;
	// one more model call per run); false turns it off for these tasks.
	// Default: runner.memory_flush.
	MemoryFlush *bool `yaml:"memory_flush" json:"memory_flush,omitempty"`
}

// Validate checks every task's name and settings; errors read
// "tasks.<name>.<field>: ...".
func (t Tasks) Validate() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(t)) {
		if !bus.ValidToken(name) {
			errs = append(errs, fmt.Errorf("tasks.%s: a task name is 1-64 characters of a-z, 0-9, _ and - (the name requests give)", name))
			continue
		}
		tc := t[name]
		if tc.MaxSteps < 0 {
			errs = append(errs, fmt.Errorf("tasks.%s.max_steps: %d: must not be negative (0: runner.max_steps)", name, tc.MaxSteps))
		}
		if tc.Timeout < 0 {
			errs = append(errs, fmt.Errorf("tasks.%s.timeout: %s: must not be negative (0: runner.timeout)", name, tc.Timeout))
		}
		errs = append(errs, tools.Scope(tc.Tools).Check("tasks."+name+".tools"))
		errs = append(errs, tools.Scope(tc.Approval).Check("tasks."+name+".approval"))
		errs = append(errs, memory.CheckLevel("tasks."+name+".memory", tc.Memory))
	}
	return errors.Join(errs...)
}

// WithTasks sets the settings of tasks by name (the tasks section).
func WithTasks(t Tasks) Option { return func(h *Handler) { h.tasks = t } }

// settingsOf returns the settings of the tasks called name: tasks.<name>.
func (h *Handler) settingsOf(_ context.Context, source, name string) (agentwork.Settings, error) {
	if source != bus.SourceTask {
		return agentwork.Settings{}, nil
	}
	tc := h.tasks[name]
	return agentwork.Settings{Tools: tc.Tools, Approval: tc.Approval, MaxSteps: tc.MaxSteps, Timeout: tc.Timeout, Model: tc.Model, Fallback: tc.Fallback, Memory: tc.Memory, MemoryFlush: tc.MemoryFlush}, nil
}
