package agentwork_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
)

// TestDeliveryModes: what a task's model reports through notify_user
// reaches the user by default (not its closing "I've notified you."), and
// what notify_user answers the model is what happens in every mode.
func TestDeliveryModes(t *testing.T) {
	t.Parallel()
	const report, closing = "Sales fell 30% in EMEA", "I've notified you."
	tests := []struct {
		name, deliver string
		notify        bool   // the model calls notify_user
		sent          string // the text delivered; "" nothing
		toolSays      string // what notify_user answered ("" not called)
		toolErr       bool
	}{
		{"default, with notify_user", "", true, report, "will be sent to the user", false},
		{"default, without notify_user", "", false, closing, "", false},
		{"auto", agentwork.DeliverAuto, true, report, "will be sent to the user", false},
		{"notify", agentwork.DeliverNotify, true, report, "will be sent to the user", false},
		{"reply", agentwork.DeliverReply, true, closing, "not sent: this run sends your final reply", true},
		{"none", agentwork.DeliverNone, true, "", "not sent: this run sends nothing", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watchEvents(t, b)
			reply := script.Reply{Text: closing}
			if tt.notify {
				reply.Notify = report
			}
			sp := must(script.New(script.Config{Rules: []script.Rule{{Match: script.Match{Source: "task"}, Reply: reply}}}))
			var mu sync.Mutex
			var seen []model.Request
			p := model.ProviderFunc(func(ctx context.Context, req model.Request) (model.Reply, error) {
				mu.Lock()
				seen = append(seen, req)
				mu.Unlock()
				return sp.Complete(ctx, req)
			})
			// The task policy as serve wires it: the runner's default gate.
			stop := startRunner(t, b, p, testConfig(), map[string]agentwork.Policy{"task": {}}, agentwork.WithConnectors("rec"))
			publish(t, b, agentwork.Request{Source: "task", Name: "sales", Prompt: "look at the sales", Deliver: tt.deliver})
			ev := events.runEvents(1)[0]
			stop()
			if ev.Run.Outcome != bus.OutcomeDone || ev.Run.Text != tt.sent {
				t.Errorf("event = %s text %q, want done with text %q", ev.Run.Outcome, ev.Run.Text, tt.sent)
			}
			q := queued(t, b)
			switch {
			case tt.sent == "" && len(q) != 0:
				t.Errorf("queued %+v, want nothing", q)
			case tt.sent != "" && (len(q) != 1 || q[0].Text != tt.sent):
				t.Errorf("queued %+v, want one notification %q", q, tt.sent)
			}
			if tt.toolSays == "" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			var got *model.Message
			for _, req := range seen {
				for i, m := range req.Messages {
					if m.Role == model.RoleTool && m.ToolName == tools.NotifyName {
						got = &req.Messages[i]
					}
				}
			}
			if got == nil || !strings.Contains(got.Content, tt.toolSays) || got.IsError != tt.toolErr {
				t.Errorf("notify_user answered %+v, want %q (error %v)", got, tt.toolSays, tt.toolErr)
			}
		})
	}
}

// TestNotificationIDsAreTheQueuedIDs: the done event names each
// notification by the id it is queued under, for a target with a
// destination too (connectors.NotificationID hashes the destination), so
// `agentwork deliveries show <id>` finds what the event lists.
func TestNotificationIDsAreTheQueuedIDs(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watchEvents(t, b)
	sp := must(script.New(script.Config{Default: &script.Reply{Text: "disk full"}}))
	stop := startRunner(t, b, sp, testConfig(), map[string]agentwork.Policy{"task": {}}, agentwork.WithConnectors("alerts", "console"))
	targets := []string{"alerts:some.subject", "console", "alerts:-100123:thread/7"}
	publish(t, b, agentwork.Request{Source: "task", Name: "disk", Prompt: "check the disk", Targets: targets})
	ev := events.runEvents(1)[0]
	stop()
	var ids []string
	for _, n := range queued(t, b) {
		ids = append(ids, n.ID)
	}
	if ev.Run.Outcome != bus.OutcomeDone || !slices.Equal(ev.Run.NotificationIDs, ids) || len(ids) != len(targets) {
		t.Errorf("event %s notification_ids = %q, want the ids of the %d queued notifications %q", ev.Run.Outcome, ev.Run.NotificationIDs, len(targets), ids)
	}
}
