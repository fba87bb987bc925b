package console_test

import (
	"strings"
	"testing"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model"
)

// A run's page lists its model calls in a table: each numbered, with its
// model, tokens, duration, stop reason and the tool calls it asked for,
// a failed call's error as text; the calls its event left out are
// counted where they were.
func TestRunPageListsModelCalls(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const evil = `<script>alert(1)</script>`
	ev := emit(t, f.b, agentwork.Result{Source: "task", Name: "x", Outcome: bus.OutcomeError, Class: "transient", Error: "model: 503",
		ModelCalls: []agentwork.ModelCall{
			{N: 1, Model: "gpt-first", Usage: model.Usage{InputTokens: 1234, OutputTokens: 56}, DurationMS: 1500, StopReason: "tool_calls", ToolCalls: 3, Attempt: 1},
			{N: 4, Model: "gpt-last", Usage: model.Usage{InputTokens: 7}, DurationMS: 12, Flush: true, Attempt: 2},
			{N: 5, Model: "openai/gpt-last", Error: "upstream said " + evil, Attempt: 2},
		},
		ModelCallsOmitted: 2})
	b := f.browser(t).login(viewerToken)
	got := b.do("GET", "/runs/"+ev.ID, nil)
	if got.status != 200 {
		t.Fatalf("GET /runs/%s = %d:\n%s", ev.ID, got.status, got.body)
	}
	i := strings.Index(got.body, `<table id="model-calls">`)
	if i < 0 || !strings.Contains(got.body[:i], `<div class="table-wrap">`) {
		t.Fatalf("the run's page has no model calls table in a table-wrap:\n%s", got.body)
	}
	table := got.body[i : i+strings.Index(got.body[i:], "</table>")]
	for _, want := range []string{
		"<td class=\"n\">1</td><td>gpt-first</td>", ">1234</td>", ">56</td>", "1.5 s", "tool_calls", "<td class=\"n\">3</td>",
		"2 more call(s) not listed",
		"<td class=\"n\">4</td><td>gpt-last <span class=\"muted\">memory flush</span> <span class=\"muted\">attempt 2</span>", "12 ms",
		"<td class=\"n\">5</td><td>openai/gpt-last", "upstream said &lt;script&gt;alert(1)&lt;/script&gt;",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the model calls table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(got.body, evil) {
		t.Errorf("a model call's error is not escaped:\n%s", table)
	}
	if strings.Index(table, "gpt-first") > strings.Index(table, "not listed") || strings.Index(table, "not listed") > strings.Index(table, "gpt-last") {
		t.Errorf("the calls left out are not counted between the first and the last:\n%s", table)
	}

	// An event without model calls (the model never ran) says so.
	ev = emit(t, f.b, agentwork.Result{Source: "task", Name: "y", Outcome: bus.OutcomeSkip, Reason: "quiet hours"})
	if got := b.do("GET", "/runs/"+ev.ID, nil); strings.Contains(got.body, `id="model-calls"`) || !strings.Contains(got.body, "No model calls listed.") {
		t.Errorf("a run without model calls:\n%s", got.body)
	}
}
