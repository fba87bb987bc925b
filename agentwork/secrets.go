package agentwork

import (
	"slices"

	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/tools"
)

// redact returns s with the runner's secrets cut out (WithSecrets).
func (r *Runner) redact(s string) string {
	if s == "" || len(r.secrets) == 0 {
		return s
	}
	return secret.Redact(s, r.secrets)
}

// sendable returns out with the runner's secrets cut out of what a run
// may send: the model's reply and its notify_user messages. It is applied
// before the output gates, so the notice they decide on, and its dedup
// key, are those of the text that is sent. (The tool results the model
// read were cut by the tool loop; the records cut every call.)
func (r *Runner) sendable(out Output) Output {
	if len(r.secrets) == 0 {
		return out
	}
	out.Text = r.redact(out.Text)
	out.Calls = slices.Clone(out.Calls)
	for i, c := range out.Calls {
		if c.Name == tools.NotifyName {
			out.Calls[i].Arguments = r.redact(c.Arguments)
		}
	}
	return out
}
