package agentwork

import (
	"context"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/tools/memory"
)

// Memory is the agent's memory as the runner puts it into a run's prompt
// (a *memory.Store of tools/memory). Prompt returns the delimited section
// for level (none, light, full; "" for none), cut to size with a line that
// says so; an error only when the memory cannot be read at all. It is
// called once per model run, must be safe for concurrent use and return
// when ctx is done.
type Memory interface {
	Prompt(ctx context.Context, level string) (string, error)
}

// withMemory returns system with the run's memory section after it, for
// level. Memory that cannot be read is said in the prompt, not left out
// silently: the run goes on without it.
func (r *Runner) withMemory(ctx context.Context, run *Run, system, level string) string {
	if r.memory == nil || level == "" || level == memory.LevelNone {
		return system
	}
	section, err := r.memory.Prompt(ctx, level)
	if err != nil {
		r.log.Warn("memory not in the prompt", zap.String("run", run.ID), zap.Error(err))
		section = memory.UnreadablePrompt(err)
	}
	if section == "" {
		return system
	}
	if system == "" {
		return section
	}
	return system + "\n\n" + section
}
