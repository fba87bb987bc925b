package agentwork

import (
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/tools"
)

// fit lists fewer calls before it cuts a text, keeps the first and the
// last, and its note and counts say what it left out.
func TestFitListsFewerCallsFirst(t *testing.T) {
	t.Parallel()
	r := &Runner{log: zap.NewNop()}
	run := &Run{ID: "run"}
	var calls []tools.Call
	for i := range 300 {
		calls = append(calls, tools.Call{ID: string(rune('a'+i%26)) + strings.Repeat("x", i), Name: "read", Result: strings.Repeat("r", 900), Outcome: tools.OutcomeOK})
	}
	res := &Result{Reply: strings.Repeat("a reply. ", 1000)}
	r.recordCalls(run, res, calls, 7)
	if len(res.ToolCalls) != RecordFirst+RecordLast || res.ToolCallsOmitted != 200 || res.ToolCallsDropped != 7 {
		t.Fatalf("recorded %d calls, %d omitted, %d dropped; want %d, 200, 7", len(res.ToolCalls), res.ToolCallsOmitted, res.ToolCallsDropped, RecordFirst+RecordLast)
	}
	const limit = 40 << 10
	r.fit(run, res, limit)
	n := len(res.ToolCalls)
	if size := jsonSize(res); size > limit || n == 0 || n >= RecordFirst+RecordLast || n+res.ToolCallsOmitted != 300 {
		t.Fatalf("fit to %d bytes: %d bytes, %d calls listed, %d omitted; want within the limit, fewer calls, all counted", limit, size, n, res.ToolCallsOmitted)
	}
	if first, last := res.ToolCalls[0].ID, res.ToolCalls[n-1].ID; first != calls[0].ID || last != calls[299].ID {
		t.Errorf("calls listed from %.3q to %.3q, want the first and the last", first, last)
	}
	if len(res.Reply) != 9000 || !strings.Contains(res.ToolCallsNote, "leaves the") || !strings.Contains(res.ToolCallsNote, "asked for 7 more") {
		t.Errorf("reply of %d bytes, note %q: want the reply whole while calls can go, and the note to say what is left out", len(res.Reply), res.ToolCallsNote)
	}
	r.fit(run, res, 4<<10)
	if size := jsonSize(res); size > 4<<10 || len(res.ToolCalls) != 0 || !strings.Contains(res.Reply, "…[cut: the first ") {
		t.Errorf("fit to 4 KiB: %d bytes, %d calls, reply %.40q…; want no call listed and the reply cut with a note", size, len(res.ToolCalls), res.Reply)
	}
}

// fit lists fewer model calls too, the first and the last kept, those it
// leaves out counted, before it cuts a text.
func TestFitListsFewerModelCalls(t *testing.T) {
	t.Parallel()
	r := &Runner{log: zap.NewNop()}
	run := &Run{ID: "run"}
	var mc modelCalls
	for i := range 130 {
		mc.add(ModelCall{Model: fmt.Sprint("m-", i), Error: strings.Repeat("e", 900)})
	}
	res := &Result{Reply: strings.Repeat("a reply. ", 1000), ModelCalls: mc.List, ModelCallsOmitted: mc.Omitted}
	if n := len(res.ModelCalls); n != RecordFirst+RecordLast || res.ModelCallsOmitted != 30 {
		t.Fatalf("recorded %d model calls, %d omitted; want %d, 30", n, res.ModelCallsOmitted, RecordFirst+RecordLast)
	}
	const limit = 40 << 10
	r.fit(run, res, limit)
	n := len(res.ModelCalls)
	if size := jsonSize(res); size > limit || n == 0 || n >= RecordFirst+RecordLast || n+res.ModelCallsOmitted != 130 || len(res.Reply) != 9000 {
		t.Fatalf("fit to %d bytes: %d bytes, %d model calls listed, %d omitted, reply of %d bytes; want within the limit, fewer calls, all counted, the reply whole",
			limit, size, n, res.ModelCallsOmitted, len(res.Reply))
	}
	if first, last := res.ModelCalls[0].Model, res.ModelCalls[n-1].Model; first != "m-0" || last != "m-129" {
		t.Errorf("model calls listed from %s to %s, want the first and the last", first, last)
	}
	r.fit(run, res, 4<<10)
	if size := jsonSize(res); size > 4<<10 || len(res.ModelCalls) != 0 || res.ModelCallsOmitted != 130 {
		t.Errorf("fit to 4 KiB: %d bytes, %d model calls, %d omitted; want none listed, all counted", size, len(res.ModelCalls), res.ModelCallsOmitted)
	}
}
