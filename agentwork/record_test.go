package agentwork_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// TestRunRecordFitsTheMaxPayload: on a NATS server with the default 1 MB
// max_payload, a run whose model asks for 1,505 tool calls over its steps
// (a model gone wrong, or told to by a page it read), or answers with a
// reply of 600 KB, still ends with its event, which fits, and delivers
// what it was to deliver; the event says what it left out.
func TestRunRecordFitsTheMaxPayload(t *testing.T) {
	t.Parallel()
	const maxPayload = 1 << 20
	t.Run("many tool calls", func(t *testing.T) {
		t.Parallel()
		const perReply, replies = 215, 7
		args := fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", 400))
		p := model.ProviderFunc(func(_ context.Context, req model.Request) (model.Reply, error) {
			step := 0
			for _, m := range req.Messages {
				if m.Role == model.RoleAssistant {
					step++
				}
			}
			if step == replies {
				return model.Reply{Text: "done"}, nil
			}
			var calls []model.ToolCall
			if step == 0 {
				calls = append(calls, model.ToolCall{Name: tools.NotifyName, Arguments: `{"text":"the report is ready"}`})
			}
			for len(calls) < perReply {
				calls = append(calls, model.ToolCall{Name: "nope", Arguments: args})
			}
			return model.Reply{ToolCalls: calls}, nil
		})
		b := bustest.External(t, maxPayload)
		events := watchEvents(t, b)
		rec := newRecorder(nil)
		startDispatcher(t, b, connectors.Registry{"rec": rec})
		stop := startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"task": {}}, agentwork.WithConnectors("rec"))
		publish(t, b, agentwork.Request{Source: "task", Name: "calls", Prompt: "go"})
		ev := events.runEvents(1)[0]
		sent := rec.waitSent(t, 1)
		stop()
		r := ev.Run
		if r.Outcome != bus.OutcomeDone || sent[0].Text != "the report is ready" {
			t.Fatalf("event %s %q, sent %q: want done, and the notify_user message sent", r.Outcome, r.Error, sent[0].Text)
		}
		if n := len(r.ToolCalls); n > agentwork.RecordFirst+agentwork.RecordLast || r.ToolCallsOmitted == 0 || r.ToolCallsDropped == 0 ||
			n+r.ToolCallsOmitted+r.ToolCallsDropped != perReply*replies || !strings.Contains(r.ToolCallsNote, "leaves the") {
			t.Errorf("event lists %d tool calls, omits %d, dropped %d (%q): want at most %d listed, the %d asked for counted, and a note",
				n, r.ToolCallsOmitted, r.ToolCallsDropped, r.ToolCallsNote, agentwork.RecordFirst+agentwork.RecordLast, perReply*replies)
		}
		if c := r.ToolCalls[len(r.ToolCalls)-1]; c.Outcome != tools.OutcomeRefused || !strings.Contains(c.Error, "one reply may make") {
			t.Errorf("the last call listed = %+v, want the refusal that tells the model a reply asked for too many", c)
		}
	})
	t.Run("a long reply", func(t *testing.T) {
		t.Parallel()
		reply := strings.Repeat("a long report. ", 40000) // 600 KB
		p := model.ProviderFunc(func(context.Context, model.Request) (model.Reply, error) { return model.Reply{Text: reply}, nil })
		b := bustest.External(t, maxPayload)
		events := watchEvents(t, b)
		rec := newRecorder(nil)
		startDispatcher(t, b, connectors.Registry{"rec": rec})
		stop := startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"task": {}}, agentwork.WithConnectors("rec"))
		publish(t, b, agentwork.Request{Source: "task", Name: "long", Prompt: "go", Deliver: agentwork.DeliverReply})
		ev := events.runEvents(1)[0]
		sent := rec.waitSent(t, 1)
		stop()
		r := ev.Run
		if r.Outcome != bus.OutcomeDone || sent[0].Text != strings.TrimSpace(reply) {
			t.Fatalf("event %s %q, sent %d bytes: want done, and the whole reply sent", r.Outcome, r.Error, len(sent[0].Text))
		}
		raw, _ := json.Marshal(r)
		if len(raw) >= maxPayload || !strings.Contains(r.Text+r.Reply, "[cut: ") {
			t.Errorf("event data of %d bytes (reply %d, text %d), want less than %d with a note of the cut", len(raw), len(r.Reply), len(r.Text), maxPayload)
		}
	})
}
