package heartbeat

import (
	"strings"
	"time"

	"github.com/agentwork/agentwork/tools"
)

// OKToken is the reply that means "nothing needs attention" in ok_token mode.
const OKToken = "HEARTBEAT_OK"

// DefaultPrompt is the instruction given before the checklist in notify mode.
const DefaultPrompt = `This is a heartbeat: a routine check that runs on a schedule, without anyone asking.

Go through the checklist below. Use your tools where an item asks you to look something up.

- If something needs the user's attention, call ` + tools.NotifyName + ` once with a short message: what happened and what to do, in the user's language.
- If nothing needs attention, do not call ` + tools.NotifyName + `; reply in a few words that all is well. Silence is the normal case: the user hears from you only when something matters.
- Do not repeat what you reported before unless it changed or still needs action. Do not invent tasks that are not on the checklist.`

// DefaultOKTokenPrompt is the instruction in ok_token mode, for models
// without tool calling.
const DefaultOKTokenPrompt = `This is a heartbeat: a routine check that runs on a schedule, without anyone asking.

Go through the checklist below.

- If nothing needs attention, reply with exactly ` + OKToken + ` and nothing else.
- If something needs the user's attention, reply with only the short message for the user (what happened and what to do, in the user's language), without ` + OKToken + `. Your reply is sent to the user as it is.
- Do not repeat what you reported before unless it changed or still needs action. Do not invent tasks that are not on the checklist.`

// buildPrompt is the user turn of a heartbeat: instructions, the time, and
// the checklist.
func buildPrompt(instructions string, at time.Time, loc *time.Location, checklistName string, c Checklist) string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(instructions))
	b.WriteString("\n\nThe time is ")
	b.WriteString(at.In(loc).Format("Monday 2006-01-02 15:04 MST"))
	if loc != time.UTC {
		b.WriteString(" (" + loc.String() + ")")
	}
	b.WriteString(".\n")
	if c.Text != "" {
		b.WriteString("\nChecklist (" + checklistName + "):\n\n")
		b.WriteString(c.Text)
		b.WriteString("\n")
	}
	return b.String()
}
