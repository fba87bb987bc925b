package agentwork_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/memory"
)

const (
	workText  = "The backup ran; 3 files changed."
	flushNote = "Backups now take 4 minutes."
)

// flushModel answers a run's work with workText, and a memory flush
// (a conversation with the flush's prompt) with a memory_append of
// flushNote, then NO_REPLY; or, with fail, with a permanent error.
type flushModel struct {
	fail bool
	mu   sync.Mutex
	seen []model.Request
}

func (m *flushModel) Complete(_ context.Context, req model.Request) (model.Reply, error) {
	m.mu.Lock()
	m.seen = append(m.seen, req)
	m.mu.Unlock()
	flushing := false
	for _, msg := range req.Messages {
		flushing = flushing || (msg.Role == model.RoleUser && strings.Contains(msg.Content, agentwork.NoReply))
	}
	last := req.Messages[len(req.Messages)-1]
	switch {
	case !flushing:
		return model.Reply{Text: workText, Usage: model.Usage{InputTokens: 100, OutputTokens: 10}}, nil
	case m.fail:
		return model.Reply{}, &model.Error{Class: model.ClassPermanent, Message: "the model refused"}
	case last.Role == model.RoleUser:
		return model.Reply{Text: "storing", ToolCalls: []model.ToolCall{
			{ID: "f1", Name: memory.AppendName, Arguments: fmt.Sprintf(`{"text":%q}`, flushNote)},
			{ID: "f2", Name: tools.NotifyName, Arguments: `{"text":"flush says hi"}`},
		}, Usage: model.Usage{InputTokens: 200, OutputTokens: 20}}, nil
	}
	return model.Reply{Text: agentwork.NoReply, Usage: model.Usage{InputTokens: 300, OutputTokens: 1}}, nil
}

func (m *flushModel) requests() []model.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]model.Request(nil), m.seen...)
}

// The memory flush of a run: when its settings ask for it and its tools
// write memory, the model gets one more turn after its work; what it
// appends lands, its calls and tokens are on the run's record, and the
// user gets the work's text, never the flush's (not even a notify_user
// of the flush). A flush that fails leaves the run done.
func TestMemoryFlush(t *testing.T) {
	t.Parallel()
	on, off := true, false
	for _, tc := range []struct {
		name   string
		runner bool
		own    *bool
		scope  []string
		fail   bool
		flush  bool // a flush ran
	}{
		{name: "on", runner: true, scope: []string{"memory_*"}, flush: true},
		{name: "own setting", own: &on, scope: []string{"memory_append"}, flush: true},
		{name: "off by default", scope: []string{"memory_*"}},
		{name: "own setting off", runner: true, own: &off, scope: []string{"memory_*"}},
		{name: "no tool that writes memory", runner: true, scope: []string{"memory_read"}},
		{name: "failed", runner: true, scope: []string{"memory_*"}, fail: true, flush: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			mem, err := memory.New(b, memory.Config{})
			if err != nil {
				t.Fatal(err)
			}
			reg, err := tools.NewRegistry(append([]tools.Spec{tools.Notify()}, mem.Tools()...)...)
			if err != nil {
				t.Fatal(err)
			}
			m := &flushModel{fail: tc.fail}
			cfg := testConfig()
			cfg.MemoryFlush = tc.runner
			pol := agentwork.Policy{Tools: tc.scope, SettingsFor: func(context.Context, string, string) (agentwork.Settings, error) {
				return agentwork.Settings{MemoryFlush: tc.own}, nil
			}}
			rec := newRecorder(nil)
			sink := watchEvents(t, b)
			startDispatcher(t, b, connectors.Registry{"c": rec})
			r := agentwork.NewRunner(b, m, reg, cfg, agentwork.WithConnectors("c"))
			r.Handle(bus.SourceTask, pol)
			runInBackground(t, "Runner", r.Run)
			publish(t, b, agentwork.Request{Source: bus.SourceTask, Name: "backup", Prompt: "run the backup", Deliver: agentwork.DeliverAuto})

			ev := sink.runEvents(1)[0]
			res := ev.Run
			sent := rec.waitSent(t, 1)
			if res.Outcome != bus.OutcomeDone || res.Text != workText || res.Reply != workText {
				t.Errorf("run = %s %q (reply %q) %s, want done with the work's text", res.Outcome, res.Text, res.Reply, res.Error)
			}
			if len(sent) != 1 || sent[0].Text != workText {
				t.Errorf("the user got %+v, want the work's text %q only", sent, workText)
			}
			note, _ := mem.Read(t.Context(), "today")
			reqs := m.requests()
			if !tc.flush {
				if len(reqs) != 1 || res.Flush != nil || len(res.ToolCalls) != 0 || strings.Contains(note.Text, flushNote) {
					t.Errorf("model calls = %d, flush %+v, tool calls %+v; want one call and no flush", len(reqs), res.Flush, res.ToolCalls)
				}
				return
			}
			if res.Flush == nil {
				t.Fatalf("done event = %+v, want a flush", res)
			}
			if last := reqs[1].Messages[len(reqs[1].Messages)-1]; last.Role != model.RoleUser || !strings.Contains(last.Content, memory.AppendName) {
				t.Errorf("flush prompt = %+v, want a user turn naming %s", last, memory.AppendName)
			}
			if prev := reqs[1].Messages[len(reqs[1].Messages)-2]; prev.Content != workText {
				t.Errorf("the flush's conversation goes on from %+v, want the work's reply", prev)
			}
			if tc.fail {
				if !strings.Contains(res.Flush.Error, "the model refused") || res.Flush.ToolCalls != 0 || res.Usage.InputTokens != 100 {
					t.Errorf("flush = %+v, usage %+v; want its error and the work's tokens", res.Flush, res.Usage)
				}
				return
			}
			if !strings.Contains(note.Text, flushNote) || !strings.Contains(note.Text, "task/backup, run "+ev.Event.RunID) {
				t.Errorf("today's log = %q, want the flush's note by the run", note.Text)
			}
			if *res.Flush != (agentwork.FlushResult{ToolCalls: 2, Reply: agentwork.NoReply}) {
				t.Errorf("flush = %+v, want 2 calls and NO_REPLY", res.Flush)
			}
			if len(res.ToolCalls) != 2 || res.ToolCalls[0].Name != memory.AppendName || res.ToolCalls[0].Outcome != tools.OutcomeOK ||
				res.ToolCalls[1].Name != tools.NotifyName || !strings.Contains(res.ToolCalls[1].Error, "not sent") {
				t.Errorf("tool calls = %+v, want the flush's memory_append, and its notify_user refused", res.ToolCalls)
			}
			if want := (model.Usage{InputTokens: 600, OutputTokens: 31}); res.Usage == nil || *res.Usage != want {
				t.Errorf("usage = %+v, want %+v (the work's and the flush's)", res.Usage, want)
			}
			var flags []bool
			for _, c := range res.ModelCalls {
				flags = append(flags, c.Flush)
			}
			if fmt.Sprint(flags) != "[false true true]" {
				t.Errorf("model calls flagged as the flush's: %v, want [false true true] (the work's, then the flush's two)", flags)
			}
		})
	}
}

// A run whose work called nothing but notify_user, cut short while the
// model works on its memory flush, goes on from the flush on another
// instance: the claim kept the flush's conversation before its first
// model call, so the work is not done again (no second notify_user, the
// model not asked for the work again).
func TestFlushCheckpointedBeforeItsFirstModelCall(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watchEvents(t, b)
	mem, err := memory.New(b, memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(append([]tools.Spec{tools.Notify()}, mem.Tools()...)...)
	if err != nil {
		t.Fatal(err)
	}
	pol := agentwork.Policy{Tools: []string{"memory_*", tools.NotifyName}}
	id := bus.NewID()
	waiting := make(chan storedClaim, 1)
	first := &converse{replies: []func(context.Context, model.Request) (model.Reply, error){
		reply(model.Reply{ToolCalls: []model.ToolCall{{ID: "n", Name: tools.NotifyName, Arguments: `{"text":"the disk is full"}`}}}),
		reply(model.Reply{Text: workText}),
		func(ctx context.Context, _ model.Request) (model.Reply, error) {
			// The flush's first model call: what does the claim hold now?
			c, err := getClaim(ctx, b, id)
			if err != nil {
				t.Error(err)
			}
			waiting <- c
			<-ctx.Done() // until the instance stops
			return model.Reply{}, ctx.Err()
		},
	}}
	cfg := testConfig()
	cfg.MemoryFlush = true
	cfg.ShutdownGrace = 100 * time.Millisecond // the run in flight is put back at once
	r1 := agentwork.NewRunner(b, first, reg, cfg)
	r1.Handle(bus.SourceTask, pol)
	stop1 := runInBackground(t, "Runner", r1.Run)
	if _, err := agentwork.Publish(t.Context(), b, agentwork.Request{Source: bus.SourceTask, Name: "check", Prompt: "check the disk", Deliver: agentwork.DeliverNone},
		agentwork.PublishOptions{EventID: id}); err != nil {
		t.Fatal(err)
	}
	var c storedClaim
	select {
	case c = <-waiting:
	case <-time.After(waitTimeout):
		t.Fatal("no flush")
	}
	if c.Checkpoint == nil || c.Checkpoint.Conversation == nil || c.Checkpoint.Flush == nil {
		t.Fatalf("claim during the flush's first model call = %+v, want the flush's conversation and mark", c.Checkpoint)
	}
	if msgs := c.Checkpoint.Conversation.Messages; len(msgs) != 5 || !strings.Contains(msgs[4].Content, agentwork.NoReply) {
		t.Fatalf("checkpoint = %+v, want the work's conversation and the flush's prompt", msgs)
	}
	stop1()

	second := &converse{replies: []func(context.Context, model.Request) (model.Reply, error){
		reply(model.Reply{ToolCalls: []model.ToolCall{{ID: "f", Name: memory.AppendName, Arguments: fmt.Sprintf(`{"text":%q}`, flushNote)}}}),
		reply(model.Reply{Text: agentwork.NoReply}),
	}}
	cfg.ShutdownGrace = testConfig().ShutdownGrace
	r2 := agentwork.NewRunner(b, second, reg, cfg)
	r2.Handle(bus.SourceTask, pol)
	stop2 := runInBackground(t, "Runner", r2.Run)
	events.runEvents(1)
	waitRequestsSettled(t, b)
	stop2()
	evs := runOnly(events.final())
	if len(evs) != 1 || evs[0].Run.Outcome != bus.OutcomeDone || callList(evs[0].Run) != "notify_user:error,memory_append:ok" {
		t.Fatalf("events:\n%s\nwant one done event listing the work's notify_user (not sent: the run delivers nothing) and the flush's memory_append, each once", dump(evs))
	}
	if f := evs[0].Run.Flush; f == nil || f.Error != "" || f.Reply != agentwork.NoReply {
		t.Errorf("flush = %+v, want it done", f)
	}
	seen := second.requests()
	if len(seen) != 2 || !strings.Contains(lastMessage(seen[0]).Content, agentwork.NoReply) {
		t.Errorf("the second instance asked the model %d times (first with %+v), want twice, from the flush's prompt", len(seen), seen)
	}
	if note, err := mem.Read(t.Context(), "today"); err != nil || !strings.Contains(note.Text, flushNote) {
		t.Errorf("today's log = %q, %v; want the flush's note", note.Text, err)
	}
}

// A run that left its flush fewer than 2 model calls (the one that
// stores, the NO_REPLY) or no tool call does not flush, and says so on
// its record: the flush would otherwise write and then fail on max_steps,
// or have every write refused.
func TestFlushNeedsStepsAndCallsLeft(t *testing.T) {
	t.Parallel()
	readLong := model.ToolCall{ID: "r", Name: memory.ReadName, Arguments: `{"name":"long"}`}
	for _, tc := range []struct {
		name     string
		maxSteps int
		maxCalls int
		work     []model.Reply
		why      string
	}{
		{name: "one step left", maxSteps: 2, work: []model.Reply{{Text: workText}}, why: "left 1 of its 2 model calls (max_steps)"},
		{name: "no tool call left", maxSteps: 8, maxCalls: 1, work: []model.Reply{{ToolCalls: []model.ToolCall{readLong}}, {Text: workText}}, why: "made its 1 tool calls (runner.max_tool_calls)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			mem, err := memory.New(b, memory.Config{})
			if err != nil {
				t.Fatal(err)
			}
			reg, err := tools.NewRegistry(mem.Tools()...)
			if err != nil {
				t.Fatal(err)
			}
			m := &converse{}
			for _, w := range tc.work {
				m.replies = append(m.replies, reply(w))
			}
			m.replies = append(m.replies,
				reply(model.Reply{ToolCalls: []model.ToolCall{{ID: "f", Name: memory.AppendName, Arguments: fmt.Sprintf(`{"text":%q}`, flushNote)}}}),
				reply(model.Reply{Text: agentwork.NoReply}))
			cfg := testConfig()
			cfg.MemoryFlush = true
			cfg.MaxSteps, cfg.MaxToolCalls = tc.maxSteps, tc.maxCalls
			events := watchEvents(t, b)
			r := agentwork.NewRunner(b, m, reg, cfg)
			r.Handle(bus.SourceTask, agentwork.Policy{Tools: []string{"memory_*"}})
			runInBackground(t, "Runner", r.Run)
			publish(t, b, agentwork.Request{Source: bus.SourceTask, Name: "backup", Prompt: "run the backup", Deliver: agentwork.DeliverNone})
			res := events.runEvents(1)[0].Run
			if res.Outcome != bus.OutcomeDone || res.Flush == nil || !strings.Contains(res.Flush.Error, "not run") || !strings.Contains(res.Flush.Error, tc.why) || res.Flush.ToolCalls != 0 {
				t.Errorf("run = %s, flush %+v; want done, the flush not run because it %s", res.Outcome, res.Flush, tc.why)
			}
			if n := len(m.requests()); n != len(tc.work) {
				t.Errorf("model calls = %d, want %d: the work's only", n, len(tc.work))
			}
		})
	}
}
