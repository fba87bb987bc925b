package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/openai"
	"github.com/agentwork/agentwork/model/openai/openaifake"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/memory"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

// memoryRuntime is a runtime with the agent's memory as serve wires it:
// memory store and tools, a heartbeat configured by cfg (its checklist
// file in dir), a runner on the OpenAI-compatible fake, and a dispatcher
// that delivers to a recorder.
type memoryRuntime struct {
	*memoryInstance
	mem *memory.Store
	rec *recorder
}

func startMemoryRuntime(t *testing.T, b *bus.Bus, fakeURL, dir string, cfg heartbeat.Config) *memoryRuntime {
	t.Helper()
	mem, err := memory.New(b, memory.Config{}, memory.WithHeartbeatChecklist(cfg.ChecklistInMemory))
	if err != nil {
		t.Fatal(err)
	}
	h, err := heartbeat.New(b, cfg, heartbeat.WithBaseDir(dir), heartbeat.WithMemory(mem))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(append([]tools.Spec{tools.Notify()}, mem.Tools()...)...)
	if err != nil {
		t.Fatal(err)
	}
	p, err := openai.New(model.Config{Provider: "openai", BaseURL: fakeURL, Model: "gpt-test", APIKey: openaifake.DefaultKey}, openai.WithHTTPClient(httpClient(t)))
	if err != nil {
		t.Fatal(err)
	}
	runner := agentwork.NewRunner(b, p, reg, agentwork.Config{MaxAttempts: 1}, agentwork.WithConnectors(target), agentwork.WithMemory(mem))
	runner.Handle(bus.SourceHeartbeat, h.Policy())
	rec := &recorder{}
	disp := connectors.NewDispatcher(b, connectors.Registry{target: rec}, connectors.DispatcherConfig{Backoff: []time.Duration{tiny}}, nil)
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() { errs <- runner.Run(ctx) })
	wg.Go(func() { errs <- disp.Run(ctx) })
	in := &memoryInstance{b: b, h: h}
	var once sync.Once
	in.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("Run() = %v", err)
				}
			}
		})
	}
	t.Cleanup(in.stop)
	return &memoryRuntime{memoryInstance: in, mem: mem, rec: rec}
}

// waitSent waits for n delivered events and returns what the recorder
// got.
func (r *memoryRuntime) waitSent(t *testing.T, n int) []connectors.Notification {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	oc, err := r.b.JetStream().OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{r.b.Subjects.Event(bus.SourceDelivery, connectors.OutcomeDelivered)}})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := oc.Next(jetstream.FetchContext(ctx)); err != nil {
			t.Fatalf("fewer than %d deliveries: %v", n, err)
		}
	}
	return r.rec.notifications()
}

// TestHeartbeatMemoryFlush: a heartbeat with memory_flush whose model
// notifies the user, then, in the flush, appends a note and answers
// NO_REPLY. The user gets the notification of the work (and nothing of the
// flush), the note is in today's log, and the run's record has both turns'
// calls and tokens.
func TestHeartbeatMemoryFlush(t *testing.T) {
	t.Parallel()
	const note = "Disk /var reached 93%; the user was told at the first check."
	fake := openaifake.New(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, heartbeat.DefaultChecklist), []byte(checklist), 0o600); err != nil {
		t.Fatal(err)
	}
	flush := true
	fake.Enqueue(
		openaifake.Response{Reply: model.Reply{ToolCalls: []model.ToolCall{notifyCall("n1", diskFull)}, Usage: model.Usage{InputTokens: 100, OutputTokens: 10}}},
		openaifake.Response{Reply: model.Reply{Text: "I told the user about /var.", Usage: model.Usage{InputTokens: 110, OutputTokens: 8}}},
		openaifake.Response{
			Check: func(r openaifake.Request) error {
				msgs := r.Conversation.Messages
				if last := msgs[len(msgs)-1]; last.Role != model.RoleUser || !strings.Contains(last.Content, agentwork.NoReply) {
					return fmt.Errorf("flush request ends with %+v, want the flush prompt", last)
				}
				return nil
			},
			Reply: model.Reply{
				Text:      "Saving a note. The disk is full!",
				ToolCalls: []model.ToolCall{{ID: "m1", Name: memory.AppendName, Arguments: fmt.Sprintf(`{"text":%q}`, note)}, notifyCall("n2", "from the flush")},
				Usage:     model.Usage{InputTokens: 200, OutputTokens: 30},
			},
		},
		openaifake.Text(agentwork.NoReply),
	)
	rt := startMemoryRuntime(t, bustest.New(t), fake.URL, dir, heartbeat.Config{Tools: []string{"memory_*"}, MemoryFlush: &flush})
	r := rt.wakeAndWait(t)
	sent := rt.waitSent(t, 1)
	rt.stop()

	if r.Outcome != bus.OutcomeDone || r.Text != diskFull {
		t.Fatalf("run = %s %q %s, want done with the notification of the work", r.Outcome, r.Text, r.Error)
	}
	if len(sent) != 1 || sent[0].Text != diskFull {
		t.Errorf("the user got %+v, want only %q", sent, diskFull)
	}
	if got := rt.rec.notifications(); len(got) != 1 {
		t.Errorf("notifications = %d, want 1", len(got))
	}
	today, err := rt.mem.Read(t.Context(), "today")
	if err != nil || !strings.Contains(today.Text, note) {
		t.Errorf("today's log = %q, %v; want the flush's note", today.Text, err)
	}
	var calls []string
	for _, c := range r.ToolCalls {
		calls = append(calls, c.Name+":"+c.Outcome)
	}
	if strings.Join(calls, ",") != "notify_user:ok,memory_append:ok,notify_user:error" {
		t.Errorf("tool calls = %v, want the work's notify_user, then the flush's memory_append and its notify_user refused", calls)
	}
	if r.Flush == nil || r.Flush.ToolCalls != 2 || r.Flush.Reply != agentwork.NoReply || r.Flush.Error != "" {
		t.Errorf("flush = %+v, want 2 calls and NO_REPLY", r.Flush)
	}
	if want := (model.Usage{InputTokens: 410, OutputTokens: 48}); r.Usage == nil || r.Usage.InputTokens != want.InputTokens || r.Usage.OutputTokens != want.OutputTokens {
		t.Errorf("usage = %+v, want %+v: both turns", r.Usage, want)
	}
	if n := fake.Pending(); n != 0 {
		t.Errorf("%d scripted replies unused", n)
	}
}

// TestHeartbeatUpdatesItsChecklist: a heartbeat whose checklist lives in
// memory (filled from HEARTBEAT.md on first use) and whose model calls
// checklist_update at the revision its prompt names; an empty checklist
// is refused with an error the model
// reads; the next heartbeat's prompt holds the new checklist, and the
// previous revision is in the document's history.
func TestHeartbeatUpdatesItsChecklist(t *testing.T) {
	t.Parallel()
	const next = "# Heartbeat\n\n- [ ] Did last night's backup complete?\n"
	fake := openaifake.New(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, heartbeat.DefaultChecklist), []byte(checklist), 0o600); err != nil {
		t.Fatal(err)
	}
	// The model passes the revision its prompt named.
	update := func(id, text string) model.ToolCall {
		return model.ToolCall{ID: id, Name: memory.ChecklistName, Arguments: fmt.Sprintf(`{"text":%q,"revision":1}`, text)}
	}
	fake.Enqueue(
		openaifake.Response{
			Check: func(r openaifake.Request) error {
				var offered []string
				for _, tl := range r.Conversation.Tools {
					offered = append(offered, tl.Name)
				}
				if !slices.Contains(offered, memory.ChecklistName) {
					return fmt.Errorf("offered %v, want %s", offered, memory.ChecklistName)
				}
				if p := r.Conversation.Messages[0].Content; !strings.Contains(p, "Is the disk /var below 90%?") || !strings.Contains(p, "HEARTBEAT.md in your memory, revision 1") {
					return fmt.Errorf("first prompt = %q, want the checklist copied from the file into memory", p)
				}
				return nil
			},
			Reply: model.Reply{ToolCalls: []model.ToolCall{update("u1", "  ")}},
		},
		openaifake.Response{
			Check: func(r openaifake.Request) error {
				if m, err := lastToolResult(r.Conversation); err != nil || !strings.HasPrefix(m.Content, "error: the checklist is empty") {
					return fmt.Errorf("result of an empty checklist_update = %+v, %v; want an error saying it is empty", m, err)
				}
				return nil
			},
			Reply: model.Reply{ToolCalls: []model.ToolCall{update("u2", next)}},
		},
		openaifake.Response{
			Check: func(r openaifake.Request) error {
				if m, err := lastToolResult(r.Conversation); err != nil || strings.HasPrefix(m.Content, "error") || !strings.Contains(m.Content, "revision 1 is kept") {
					return fmt.Errorf("result of checklist_update = %+v, %v; want it replaced with revision 1 kept", m, err)
				}
				return nil
			},
			Reply: model.Reply{Text: heartbeat.OKToken},
		},
	)
	rt := startMemoryRuntime(t, bustest.New(t), fake.URL, dir, heartbeat.Config{Tools: []string{"memory_*", memory.ChecklistName}, ChecklistInMemory: true})
	if r := rt.wakeAndWait(t); r.Outcome == bus.OutcomeError || len(r.ToolCalls) != 2 || r.ToolCalls[1].Outcome != tools.OutcomeOK {
		t.Fatalf("first run = %s %s %+v, want the second checklist_update through", r.Outcome, r.Error, r.ToolCalls)
	}

	fake.Enqueue(openaifake.Text(heartbeat.OKToken))
	if r := rt.wakeAndWait(t); r.Outcome == bus.OutcomeError {
		t.Fatalf("second run failed: %s", r.Error)
	}
	reqs := fake.Requests()
	if p := reqs[len(reqs)-1].Conversation.Messages[0].Content; !strings.Contains(p, "Did last night's backup complete?") || strings.Contains(p, "/var") {
		t.Errorf("second prompt = %q, want the new checklist only", p)
	}
	h, err := rt.mem.History(t.Context(), memory.Checklist)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h[0].Text != next || !strings.HasPrefix(h[0].By, "heartbeat/default, run ") || h[1].Text != checklist || !strings.Contains(h[1].By, "copied from HEARTBEAT.md") {
		t.Errorf("history = %+v, want the update over the copy of the file", h)
	}
	if n := fake.Pending(); n != 0 {
		t.Errorf("%d scripted replies unused", n)
	}
}
