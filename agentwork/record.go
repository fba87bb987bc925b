package agentwork

// What a run's event keeps: within the bus's max payload whatever the
// model did, so that its outcome can always be published and kept in
// its claim.

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/tools"
)

// RecordFirst and RecordLast are how many of a run's tool calls its event
// lists at most: the first and the last ones; those between are counted
// (Result.ToolCallsOmitted).
const (
	RecordFirst = 50
	RecordLast  = 50
)

// envelopeRoom is what a run's event data leaves of the bus's max payload
// for the event's envelope and headers, and for the fields of the claim
// that keeps it.
const envelopeRoom = 16 << 10

// defaultMaxPayload is a NATS server's default max_payload, for a bus
// that does not say.
const defaultMaxPayload = 1 << 20

// eventMax is the most bytes of JSON a run's event data may take.
func (r *Runner) eventMax() int {
	n := defaultMaxPayload
	if nc := r.bus.Conn(); nc != nil && nc.MaxPayload() > 0 {
		n = int(nc.MaxPayload())
	}
	return n - envelopeRoom
}

// recordCalls puts calls (the run's, its flush's last) on res as the event
// keeps them: each redacted and cut (tools.Call.Record), the first
// RecordFirst and the last RecordLast of them, with a count and a note of
// those left out and of the dropped ones, which replies asked for past
// what one reply may make. What it leaves out is logged, by tool and
// outcome.
func (r *Runner) recordCalls(run *Run, res *Result, calls []tools.Call, dropped int) {
	keep := calls
	if len(calls) > RecordFirst+RecordLast {
		keep = append(calls[:RecordFirst:RecordFirst], calls[len(calls)-RecordLast:]...)
		r.logLeftOut(run, calls[RecordFirst:len(calls)-RecordLast])
	}
	res.ToolCalls = make([]tools.Call, 0, len(keep))
	for _, c := range keep {
		res.ToolCalls = append(res.ToolCalls, c.Record(RecordMax, r.secrets))
	}
	res.ToolCallsOmitted, res.ToolCallsDropped = len(calls)-len(keep), dropped
	res.ToolCallsNote = callsNote(len(calls), len(keep), dropped)
}

// logLeftOut logs the calls left out of run's event, counted by tool
// and outcome.
func (r *Runner) logLeftOut(run *Run, calls []tools.Call) {
	by := map[string]int{}
	for _, c := range calls {
		by[c.Name+" "+c.Outcome]++
	}
	r.log.Warn("tool calls left out of the run's event", zap.String("run", run.ID), zap.Int("left_out", len(calls)), zap.Any("by_tool_and_outcome", by))
}

// callsNote says which calls an event leaves out: of made calls, it lists
// listed (the first half, rounded up, and the last); dropped were asked
// for past what one reply may make. "" when none is left out.
func callsNote(made, listed, dropped int) string {
	var note string
	switch left := made - listed; {
	case left > 0 && listed == 0:
		note = fmt.Sprintf("the run made %d tool calls; tool_calls lists none of them, so that the event fits the bus's max payload "+
			"(agentwork's log counts them by tool and outcome)", made)
	case left > 0:
		first := (listed + 1) / 2
		note = fmt.Sprintf("the run made %d tool calls; tool_calls lists the first %d and the last %d, and leaves the %d between out "+
			"so that the event fits the bus's max payload (agentwork's log counts them by tool and outcome)", made, first, listed-first, left)
	}
	if dropped > 0 {
		if note != "" {
			note += "; "
		}
		note += fmt.Sprintf("the model's replies asked for %d more, past what one reply may make (runner.max_tool_calls and %d notify_user): "+
			"they ran nothing and are not listed", dropped, tools.MaxNotify)
	}
	return note
}

// fit cuts res until its JSON takes at most limit bytes, so that its event
// and the claim that keeps it can be published: first the tool calls and
// the model calls it lists, half of the longer list at a time (the first
// and the last stay), down to none; then the longest of its texts, each
// cut with a note of what was kept. limit is eventMax, less what the claim
// keeps beside res.
func (r *Runner) fit(run *Run, res *Result, limit int) {
	size := jsonSize(res)
	for size > limit && len(res.ToolCalls)+len(res.ModelCalls) > 0 {
		if len(res.ModelCalls) == 0 || (len(res.ToolCalls) > 0 && jsonSize(res.ToolCalls) >= jsonSize(res.ModelCalls)) {
			r.halveToolCalls(run, res)
		} else {
			n := len(res.ModelCalls)
			res.ModelCalls = halve(res.ModelCalls)
			res.ModelCallsOmitted += n - len(res.ModelCalls)
		}
		size = jsonSize(res)
	}
	for size > limit {
		p := &res.Reply
		for _, q := range []*string{&res.Text, &res.Error, &res.Detail} {
			if len(*q) > len(*p) {
				p = q
			}
		}
		if *p == "" {
			return // nothing left to cut: the write says what is too large
		}
		why := "so that the run's event fits the bus's max payload"
		if p == &res.Text && len(res.NotificationIDs) > 0 {
			why += "; the notification has it whole: agentwork deliveries show " + res.NotificationIDs[0]
		}
		// Escapes only lengthen the JSON: cutting the excess, and room for
		// the note, is enough.
		*p = cutResult(*p, max(len(*p)-(size-limit)-256, 0), why)
		was := size
		if size = jsonSize(res); size >= was {
			return // the texts are down to their notes: the write says what is too large
		}
	}
}

// halveToolCalls lists half of the tool calls res lists, the first and
// the last, and logs and counts those it leaves out.
func (r *Runner) halveToolCalls(run *Run, res *Result) {
	n := len(res.ToolCalls)
	made := n + res.ToolCallsOmitted
	keep := n / 2
	first := (keep + 1) / 2
	r.logLeftOut(run, res.ToolCalls[first:n-(keep-first)])
	res.ToolCalls = halve(res.ToolCalls)
	res.ToolCallsOmitted += n - keep
	res.ToolCallsNote = callsNote(made, keep, res.ToolCallsDropped)
}

// halve returns half of s (rounded down): of those, the first half
// (rounded up) from its start, the rest from its end, so the first and
// the last stay.
func halve[T any](s []T) []T {
	n := len(s)
	keep := n / 2
	first := (keep + 1) / 2
	return append(s[:first:first], s[n-(keep-first):]...)
}
