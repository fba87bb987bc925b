package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/openai/openaifake"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/memory"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

// memoryInstance is one agentwork runtime of the memory test: its own
// connection to the bus, memory store, heartbeat and runner, as serve
// wires them.
type memoryInstance struct {
	b    *bus.Bus
	h    *heartbeat.Heartbeat
	stop func()
}

func startMemoryInstance(t *testing.T, b *bus.Bus, fakeURL, dir string) *memoryInstance {
	t.Helper()
	return startMemoryRuntime(t, b, fakeURL, dir, heartbeat.Config{Tools: []string{"memory_*"}, Memory: memory.LevelFull}).memoryInstance
}

// wakeAndWait wakes the heartbeat and returns its run's outcome.
func (in *memoryInstance) wakeAndWait(t *testing.T) agentwork.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	oc, err := in.b.JetStream().OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{in.b.Subjects.Event(bus.SourceHeartbeat, "*")}, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := in.h.Wake(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := oc.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("no event of heartbeat run %s: %v", pub.ID, err)
		}
		ev, err := bus.DecodeEvent(m.Data())
		if err != nil || ev.CausationID != pub.ID {
			continue
		}
		var r agentwork.Result
		if err := ev.DecodeData(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}
}

// TestMemorySharedByInstances is issue 12's acceptance for memory: a
// heartbeat run on one instance whose model appends to today's log, and
// the next heartbeat run, on another instance (its own connection and
// store, the first one stopped), sees the note in its system prompt.
func TestMemorySharedByInstances(t *testing.T) {
	t.Parallel()
	const note = "Disk /var was 93% full at the first check; ops were told."
	fake := openaifake.New(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, heartbeat.DefaultChecklist), []byte(checklist), 0o600); err != nil {
		t.Fatal(err)
	}
	b := bustest.New(t)

	fake.Enqueue(
		openaifake.Response{
			Check: func(r openaifake.Request) error {
				var names []string
				for _, tl := range r.Conversation.Tools {
					names = append(names, tl.Name)
				}
				if want := []string{memory.AppendName, memory.ListName, memory.ReadName, memory.ReplaceName, tools.NotifyName}; !slices.Equal(names, want) {
					return fmt.Errorf("the heartbeat was offered %v, want %v", names, want)
				}
				if !strings.Contains(r.Conversation.System, "Today's log: memory/") || strings.Contains(r.Conversation.System, note) {
					return fmt.Errorf("first system prompt = %q, want an empty memory section", r.Conversation.System)
				}
				return nil
			},
			Reply: model.Reply{ToolCalls: []model.ToolCall{{ID: "m1", Name: memory.AppendName, Arguments: fmt.Sprintf(`{"text":%q}`, note)}}},
		},
		openaifake.Text("HEARTBEAT_OK"),
	)
	first := startMemoryInstance(t, b, fake.URL, dir)
	r := first.wakeAndWait(t)
	if len(r.ToolCalls) != 1 || r.ToolCalls[0].Outcome != tools.OutcomeOK {
		t.Fatalf("first run = %s %s %+v, want one memory_append that went through", r.Outcome, r.Error, r.ToolCalls)
	}
	first.stop()

	fake.Enqueue(openaifake.Response{
		Check: func(r openaifake.Request) error {
			sys := r.Conversation.System
			if !strings.Contains(sys, memory.PromptBegin) || !strings.Contains(sys, note) || !strings.Contains(sys, "heartbeat/default, run ") {
				return fmt.Errorf("second system prompt = %q, want the memory section with the first run's note", sys)
			}
			return nil
		},
		Reply: model.Reply{Text: "HEARTBEAT_OK"},
	})
	second := startMemoryInstance(t, bustest.Client(t, b), fake.URL, dir)
	if r := second.wakeAndWait(t); r.Outcome == bus.OutcomeError {
		t.Fatalf("second run failed: %s", r.Error)
	}
	if n := fake.Pending(); n != 0 {
		t.Errorf("%d scripted replies unused", n)
	}
}
