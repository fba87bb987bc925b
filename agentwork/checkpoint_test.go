package agentwork_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// sideTools are tools with side effects to count: append (not
// idempotent), read (idempotent) and big (a long result).
type sideTools struct {
	appends, reads atomic.Int32
	reg            *tools.Registry
}

const bigResult = 20000

func newSideTools(t *testing.T) *sideTools {
	t.Helper()
	s := &sideTools{}
	appendLine := tools.Func("append", "append a line to the log", func(_ context.Context, a struct {
		Line string `json:"line"`
	}) (string, error) {
		s.appends.Add(1)
		return "appended " + a.Line, nil
	})
	read := tools.Func("read", "read the log", func(context.Context, struct{}) (string, error) {
		s.reads.Add(1)
		return "the log", nil
	})
	read.Idempotent = true
	big := tools.Func("big", "a long answer", func(context.Context, struct{}) (string, error) {
		return strings.Repeat("é", bigResult/2), nil
	})
	s.reg = must(tools.NewRegistry(tools.Notify(), appendLine, read, big))
	return s
}

// converse is a model that records what it is asked and answers each call
// with the next of replies (then "finished").
type converse struct {
	mu      sync.Mutex
	replies []func(ctx context.Context, req model.Request) (model.Reply, error)
	seen    []model.Request
}

func (c *converse) Complete(ctx context.Context, req model.Request) (model.Reply, error) {
	c.mu.Lock()
	c.seen = append(c.seen, req)
	var next func(context.Context, model.Request) (model.Reply, error)
	if len(c.replies) > 0 {
		next, c.replies = c.replies[0], c.replies[1:]
	}
	c.mu.Unlock()
	if next == nil {
		return model.Reply{Text: "finished"}, nil
	}
	return next(ctx, req)
}

func (c *converse) requests() []model.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]model.Request(nil), c.seen...)
}

func reply(r model.Reply) func(context.Context, model.Request) (model.Reply, error) {
	return func(context.Context, model.Request) (model.Reply, error) { return r, nil }
}

func lastMessage(req model.Request) model.Message { return req.Messages[len(req.Messages)-1] }

func callList(r agentwork.Result) string {
	var out []string
	for _, c := range r.ToolCalls {
		out = append(out, c.Name+":"+c.Outcome)
	}
	return strings.Join(out, ",")
}

// storedClaim is the run claim with its checkpoint, as stored.
type storedClaim struct {
	State      string `json:"state"`
	Checkpoint *struct {
		Result       *agentwork.Result `json:"result"`
		Conversation *tools.State      `json:"conversation"`
		Flush        map[string]any    `json:"flush"`
	} `json:"checkpoint"`
	size int
}

func getClaim(ctx context.Context, b *bus.Bus, requestID string) (storedClaim, error) {
	e, err := b.Locks.Get(ctx, "run."+requestID)
	if err != nil {
		return storedClaim{}, err
	}
	var c storedClaim
	err = json.Unmarshal(e.Value(), &c)
	c.size = len(e.Value())
	return c, err
}

func taskPolicy() map[string]agentwork.Policy {
	return map[string]agentwork.Policy{"task": {Tools: []string{"*"}}}
}

// A run taken over after its instance died goes on from the conversation
// its claim kept: a call that finished is not made again, a reply the
// model gave is not asked for again, a call that may have been running is
// made again only if its tool is idempotent, and otherwise the model is
// told its outcome is unknown. The event lists every call once.
func TestRunGoesOnFromItsConversation(t *testing.T) {
	t.Parallel()
	user := model.Message{Role: model.RoleUser, Content: "append x to the log"}
	appendX := model.ToolCall{ID: "a", Name: "append", Arguments: `{"line":"x"}`}
	readLog := model.ToolCall{ID: "r", Name: "read", Arguments: `{}`}
	asked := func(tc model.ToolCall) model.Message {
		return model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{tc}}
	}
	appended := model.Message{Role: model.RoleTool, ToolCallID: "a", ToolName: "append", Content: "appended x"}
	// The calls as a claim keeps them: their arguments and results are
	// those of the messages.
	appendedCall := tools.Call{ID: "a", Name: "append", Outcome: tools.OutcomeOK, DurationMS: 1.5, ArgumentsBytes: 12, ResultBytes: 10}
	tests := []struct {
		name    string
		conv    tools.State
		models  int    // model calls
		last    string // in the last message the model got
		appends int32
		reads   int32
		calls   string
		reply   string
	}{
		{
			name:   "after a tool result: the next reply, the call not made again",
			conv:   tools.State{Messages: []model.Message{user, asked(appendX), appended}, Calls: []tools.Call{appendedCall}, Steps: 1, Counted: 1},
			models: 1, last: "appended x", calls: "append:ok", reply: "finished",
		},
		{
			name:   "a call that was running is not made again; the model is told",
			conv:   tools.State{Messages: []model.Message{user, asked(appendX)}, Steps: 1},
			models: 1, last: "outcome unknown", calls: "append:interrupted", reply: "finished",
		},
		{
			name:   "an idempotent call that was running is made again",
			conv:   tools.State{Messages: []model.Message{user, asked(readLog)}, Steps: 1},
			models: 1, last: "the log", reads: 1, calls: "read:ok", reply: "finished",
		},
		{
			name: "after the final reply: no model call",
			conv: tools.State{Messages: []model.Message{user, asked(appendX), appended, {Role: model.RoleAssistant, Content: "appended it"}},
				Calls: []tools.Call{appendedCall}, Steps: 2, Counted: 1},
			calls: "append:ok", reply: "appended it",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watchEvents(t, b)
			side := newSideTools(t)
			m := &converse{}
			id, crashed := bus.NewID(), bus.NewID()
			raw, _ := json.Marshal(map[string]any{
				"state": "running", "run_id": crashed, "owner": "gone", "expires": time.Now().Add(-time.Second), "attempts": 1,
				"checkpoint": map[string]any{"conversation": tt.conv},
			})
			if _, err := b.Locks.Put(t.Context(), "run."+id, raw); err != nil {
				t.Fatal(err)
			}
			r := agentwork.NewRunner(b, m, side.reg, testConfig())
			r.Handle("task", taskPolicy()["task"])
			stop := runInBackground(t, "Runner", r.Run)
			if _, err := agentwork.Publish(t.Context(), b, agentwork.Request{Source: "task", Name: "log", Prompt: user.Content, Deliver: agentwork.DeliverNone},
				agentwork.PublishOptions{EventID: id}); err != nil {
				t.Fatal(err)
			}
			events.runEvents(1)
			waitRequestsSettled(t, b)
			stop()
			evs := runOnly(events.final())
			if len(evs) != 1 {
				t.Fatalf("%d run events, want 1:\n%s", len(evs), dump(evs))
			}
			ev := evs[0]
			if ev.Run.Outcome != bus.OutcomeDone || ev.Event.RunID != crashed || ev.Run.Reply != tt.reply || ev.Run.Attempt != 2 {
				t.Errorf("event = %s (%s) run %s reply %q attempt %d, want done by run %s with %q, attempt 2", ev.Run.Outcome, ev.Run.Error, ev.Event.RunID, ev.Run.Reply, ev.Run.Attempt, crashed, tt.reply)
			}
			seen := m.requests()
			if len(seen) != tt.models {
				t.Fatalf("model calls = %d, want %d", len(seen), tt.models)
			}
			if tt.models > 0 {
				if got := seen[0].Messages; len(got) < 2 || got[0].Content != user.Content || got[1].Role != model.RoleAssistant {
					t.Errorf("the model was asked with %+v, want the saved conversation", got)
				}
				if last := lastMessage(seen[0]); last.Role != model.RoleTool || !strings.Contains(last.Content, tt.last) {
					t.Errorf("the model got last %+v, want a tool result with %q", last, tt.last)
				}
			}
			if n := side.appends.Load(); n != tt.appends {
				t.Errorf("append ran %d times, want %d", n, tt.appends)
			}
			if n := side.reads.Load(); n != tt.reads {
				t.Errorf("read ran %d times, want %d", n, tt.reads)
			}
			if got := callList(ev.Run); got != tt.calls {
				t.Errorf("the event lists %s, want %s", got, tt.calls)
			}
			if c := ev.Run.ToolCalls; len(c) > 0 && c[0].Name == "append" && (c[0].Arguments != `{"line":"x"}` || c[0].ArgumentsBytes != 12) {
				t.Errorf("the event's append call = %+v, want its arguments and sizes back", c[0])
			}
			if c := ev.Run.ToolCalls; len(c) > 0 && c[0].Outcome == tools.OutcomeOK && c[0].Name == "append" && (c[0].Result != "appended x" || c[0].DurationMS != 1.5) {
				t.Errorf("the event's append call = %+v, want its result and duration back", c[0])
			}
		})
	}
}

// A run that calls a tool keeps its conversation in its claim before each
// next step: a run stopped while the model works on the step after a tool
// call goes on, on another instance, from there. The call is made once,
// and the model is not asked again for the step that asked for it.
func TestToolResultIsCheckpointedBeforeTheNextModelCall(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watchEvents(t, b)
	side := newSideTools(t)
	id := bus.NewID()

	waiting := make(chan storedClaim, 1)
	first := &converse{replies: []func(context.Context, model.Request) (model.Reply, error){
		reply(model.Reply{ToolCalls: []model.ToolCall{{ID: "a", Name: "append", Arguments: `{"line":"x"}`}}}),
		func(ctx context.Context, _ model.Request) (model.Reply, error) {
			// The second model call: what does the claim hold now?
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
	cfg.ShutdownGrace = 100 * time.Millisecond // the run in flight is put back at once
	r1 := agentwork.NewRunner(b, first, side.reg, cfg)
	r1.Handle("task", taskPolicy()["task"])
	stop1 := runInBackground(t, "Runner", r1.Run)
	if _, err := agentwork.Publish(t.Context(), b, agentwork.Request{Source: "task", Name: "log", Prompt: "append x", Deliver: agentwork.DeliverNone},
		agentwork.PublishOptions{EventID: id}); err != nil {
		t.Fatal(err)
	}
	var c storedClaim
	select {
	case c = <-waiting:
	case <-time.After(waitTimeout):
		t.Fatal("no second model call")
	}
	if c.Checkpoint == nil || c.Checkpoint.Conversation == nil {
		t.Fatalf("claim during the second model call = %+v, want a conversation checkpoint", c)
	}
	conv := c.Checkpoint.Conversation
	if n := len(conv.Messages); n != 3 || conv.Messages[2].Content != "appended x" || len(conv.Calls) != 1 || conv.Steps != 1 {
		t.Fatalf("checkpoint = %+v, want the prompt, the reply and the tool's result", conv)
	}
	stop1()

	second := &converse{}
	r2 := agentwork.NewRunner(b, second, side.reg, testConfig())
	r2.Handle("task", taskPolicy()["task"])
	stop2 := runInBackground(t, "Runner", r2.Run)
	events.runEvents(1)
	waitRequestsSettled(t, b)
	stop2()
	evs := runOnly(events.final())
	if len(evs) != 1 || evs[0].Run.Outcome != bus.OutcomeDone || callList(evs[0].Run) != "append:ok" {
		t.Fatalf("events:\n%s\nwant one done event listing append:ok", dump(evs))
	}
	if n := side.appends.Load(); n != 1 {
		t.Errorf("append ran %d times, want once", n)
	}
	seen := second.requests()
	if len(seen) != 1 || lastMessage(seen[0]).Content != "appended x" {
		t.Errorf("the second instance asked the model %d times (first with %+v), want once, from the tool's result", len(seen), seen)
	}
	// Done, the claim keeps no conversation: it stays for days.
	if c, err := getClaim(t.Context(), b, id); err != nil || c.State != "done" || (c.Checkpoint != nil && c.Checkpoint.Conversation != nil) {
		t.Errorf("claim = %+v, %v; want done, without the conversation", c, err)
	}
}

// A run whose model calls no tool but notify_user writes its claim as
// before: taken, checkpointed with its outcome, settled. One that calls a
// tool writes it once more for every model reply from the first call of
// a tool on (the final one included) and once for every tool call.
func TestCheckpointWritesPerRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		replies       []model.Reply
		writes, convs int
	}{
		{"notify_user only", []model.Reply{
			{ToolCalls: []model.ToolCall{{ID: "n", Name: tools.NotifyName, Arguments: `{"text":"disk full"}`}}},
			{Text: "sent"},
		}, 3, 0},
		{"one tool call", []model.Reply{
			{ToolCalls: []model.ToolCall{{ID: "a", Name: "append", Arguments: `{"line":"x"}`}}},
			{ToolCalls: []model.ToolCall{{ID: "n", Name: tools.NotifyName, Arguments: `{"text":"appended x"}`}}},
			{Text: "sent"},
		}, 3 + 3 + 1, 4},
		{"two calls in one reply", []model.Reply{
			{ToolCalls: []model.ToolCall{{ID: "a", Name: "append", Arguments: `{"line":"x"}`}, {ID: "r", Name: "read", Arguments: `{}`}}},
			{ToolCalls: []model.ToolCall{{ID: "n", Name: tools.NotifyName, Arguments: `{"text":"appended x"}`}}},
			{Text: "sent"},
		}, 3 + 3 + 2, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			events := watchEvents(t, b)
			side := newSideTools(t)
			m := &converse{}
			for _, r := range tt.replies {
				m.replies = append(m.replies, reply(r))
			}
			id := bus.NewID()
			// Every write of the claim is a message on its subject: a core
			// subscription sees them all (a KV watch may skip some, as the
			// bucket keeps only the last).
			writes := make(chan *nats.Msg, 64)
			sub, err := b.Conn().ChanSubscribe("$KV."+b.Locks.Bucket()+".run."+id, writes)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := b.Conn().Flush(); err != nil {
				t.Fatal(err)
			}
			r := agentwork.NewRunner(b, m, side.reg, testConfig(), agentwork.WithConnectors("rec"))
			r.Handle("task", taskPolicy()["task"])
			stop := runInBackground(t, "Runner", r.Run)
			if _, err := agentwork.Publish(t.Context(), b, agentwork.Request{Source: "task", Name: "log", Prompt: "go"}, agentwork.PublishOptions{EventID: id}); err != nil {
				t.Fatal(err)
			}
			ev := events.runEvents(1)[0]
			waitRequestsSettled(t, b)
			stop()
			if ev.Run.Outcome != bus.OutcomeDone || ev.Run.Text == "" {
				t.Fatalf("event = %s %q (%s), want done with a notice", ev.Run.Outcome, ev.Run.Text, ev.Run.Error)
			}
			n, convs := 0, 0
			for done := false; !done; {
				select {
				case m := <-writes:
					n++
					if strings.Contains(string(m.Data), `"conversation"`) {
						convs++
					}
					done = strings.Contains(string(m.Data), `"state":"done"`)
				case <-time.After(waitTimeout):
					t.Fatalf("the claim did not reach done after %d writes", n)
				}
			}
			if n != tt.writes || convs != tt.convs {
				t.Errorf("the claim was written %d times, %d of them with the conversation; want %d and %d", n, convs, tt.writes, tt.convs)
			}
		})
	}
}

// A conversation longer than a claim keeps is kept with its tool results
// cut to fit (the model got them whole, and a run that goes on reads them
// cut, with a note); one that does not fit even so ends the run with an
// error event before the tool runs.
func TestConversationCutToFitTheClaim(t *testing.T) {
	t.Parallel()
	const limit = 4096
	t.Run("cut", func(t *testing.T) {
		t.Parallel()
		b := bustest.New(t)
		events := watchEvents(t, b)
		side := newSideTools(t)
		id := bus.NewID()
		var during storedClaim
		m := &converse{replies: []func(context.Context, model.Request) (model.Reply, error){
			reply(model.Reply{ToolCalls: []model.ToolCall{{ID: "b", Name: "big", Arguments: `{}`}}}),
			func(ctx context.Context, req model.Request) (model.Reply, error) {
				if got := len(lastMessage(req).Content); got != bigResult {
					t.Errorf("the model got %d bytes of the result, want all %d", got, bigResult)
				}
				c, err := getClaim(ctx, b, id)
				if err != nil {
					t.Error(err)
				}
				during = c
				return model.Reply{Text: "read it"}, nil
			},
		}}
		r := agentwork.NewRunner(b, m, side.reg, testConfig(), agentwork.WithMaxConversation(limit))
		r.Handle("task", taskPolicy()["task"])
		stop := runInBackground(t, "Runner", r.Run)
		if _, err := agentwork.Publish(t.Context(), b, agentwork.Request{Source: "task", Name: "big", Prompt: "go", Deliver: agentwork.DeliverNone}, agentwork.PublishOptions{EventID: id}); err != nil {
			t.Fatal(err)
		}
		ev := events.runEvents(1)[0]
		waitRequestsSettled(t, b)
		stop()
		if ev.Run.Outcome != bus.OutcomeDone || len(ev.Run.ToolCalls) != 1 || ev.Run.ToolCalls[0].ResultBytes != bigResult {
			t.Errorf("event = %s (%s) with %+v, want done, the call's whole size on record", ev.Run.Outcome, ev.Run.Error, ev.Run.ToolCalls)
		}
		if during.Checkpoint == nil || during.Checkpoint.Conversation == nil {
			t.Fatalf("claim = %+v, want a conversation", during)
		}
		kept := during.Checkpoint.Conversation.Messages[2].Content
		if !strings.Contains(kept, fmt.Sprintf("of %d bytes were kept when agentwork checkpointed this run]", bigResult)) || len(kept) > limit {
			t.Errorf("the claim keeps the result as %d bytes ending %q, want it cut with a note", len(kept), kept[max(0, len(kept)-80):])
		}
		if raw, _ := json.Marshal(during.Checkpoint.Conversation); len(raw) > limit {
			t.Errorf("the conversation is %d bytes in the claim, want at most %d", len(raw), limit)
		}
	})
	t.Run("too large", func(t *testing.T) {
		t.Parallel()
		b := bustest.New(t)
		events := watchEvents(t, b)
		side := newSideTools(t)
		m := &converse{replies: []func(context.Context, model.Request) (model.Reply, error){
			reply(model.Reply{ToolCalls: []model.ToolCall{{ID: "a", Name: "append", Arguments: `{"line":"x"}`}}}),
		}}
		r := agentwork.NewRunner(b, m, side.reg, testConfig(), agentwork.WithMaxConversation(limit))
		r.Handle("task", taskPolicy()["task"])
		stop := runInBackground(t, "Runner", r.Run)
		publish(t, b, agentwork.Request{Source: "task", Name: "long", Prompt: strings.Repeat("a long prompt ", limit/10), Deliver: agentwork.DeliverNone})
		ev := events.runEvents(1)[0]
		waitRequestsSettled(t, b)
		stop()
		if ev.Run.Outcome != bus.OutcomeError || ev.Run.Class != string(model.ClassPermanent) || !strings.Contains(ev.Run.Error, "too large to checkpoint") {
			t.Errorf("event = %s %s %q, want a permanent error saying the conversation is too large to checkpoint", ev.Run.Outcome, ev.Run.Class, ev.Run.Error)
		}
		if n := side.appends.Load(); n != 0 {
			t.Errorf("append ran %d times, want 0: the run stops before the call it could not checkpoint", n)
		}
		if n := len(m.requests()); n != 1 {
			t.Errorf("model calls = %d, want 1", n)
		}
	})
}

// A run whose claim another instance took over (this one looked dead)
// cannot checkpoint its next step: it makes no call and emits nothing,
// even at its last attempt, and leaves the run to the other instance.
func TestRunTakenOverMakesNoFurtherCall(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watchEvents(t, b)
	side := newSideTools(t)
	id, runID := bus.NewID(), bus.NewID()
	// A takeover at the last attempt (testConfig: 3).
	putClaim(t, b, id, claimRecord{State: "running", RunID: runID, Owner: "gone", Expires: time.Now().Add(-time.Second), Attempts: 2})
	m := &converse{replies: []func(context.Context, model.Request) (model.Reply, error){
		func(ctx context.Context, _ model.Request) (model.Reply, error) {
			// Meanwhile another instance took the run over and finished it.
			raw, _ := json.Marshal(map[string]any{"state": "done", "run_id": runID, "owner": "other", "token": "other", "attempts": 4, "outcome": "done"})
			if _, err := b.Locks.Put(ctx, "run."+id, raw); err != nil {
				t.Error(err)
			}
			return model.Reply{ToolCalls: []model.ToolCall{{ID: "a", Name: "append", Arguments: `{"line":"x"}`}}}, nil
		},
	}}
	r := agentwork.NewRunner(b, m, side.reg, testConfig())
	r.Handle("task", taskPolicy()["task"])
	stop := runInBackground(t, "Runner", r.Run)
	if _, err := agentwork.Publish(t.Context(), b, agentwork.Request{Source: "task", Name: "log", Prompt: "append x"}, agentwork.PublishOptions{EventID: id}); err != nil {
		t.Fatal(err)
	}
	waitRequestsSettled(t, b)
	stop()
	if evs := runOnly(events.final()); len(evs) != 0 {
		t.Errorf("%d run events, want none from the instance that lost the run:\n%s", len(evs), dump(evs))
	}
	if n := side.appends.Load(); n != 0 {
		t.Errorf("append ran %d times, want 0", n)
	}
	if n := len(m.requests()); n != 1 {
		t.Errorf("model calls = %d, want 1", n)
	}
}
