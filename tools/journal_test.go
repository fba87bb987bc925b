package tools_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// journal records every State it is given, as the shape of its
// conversation: the role of each message and, for an assistant turn,
// its calls ("user assistant:echo tool").
type journal struct {
	saved []string
	fail  error
}

func (j *journal) Save(_ context.Context, s tools.State) error {
	if j.fail != nil {
		return j.fail
	}
	j.saved = append(j.saved, shape(s.Messages))
	return nil
}

func shape(msgs []model.Message) string {
	var parts []string
	for _, m := range msgs {
		p := string(m.Role)
		for i, tc := range m.ToolCalls {
			sep := ","
			if i == 0 {
				sep = ":"
			}
			p += sep + tc.Name
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

// sideEffects is a registry with notify_user, echo (idempotent) and
// append (not), counting the runs of each.
type sideEffects struct {
	echo, append atomic.Int32
	reg          *tools.Registry
}

func newSideEffects(t *testing.T) *sideEffects {
	t.Helper()
	s := &sideEffects{}
	echo := tools.Func("echo", "echo the text", func(_ context.Context, a struct {
		Text string `json:"text"`
	}) (string, error) {
		s.echo.Add(1)
		return a.Text, nil
	})
	echo.Idempotent = true
	appendLine := tools.Func("append", "append a line to the log", func(_ context.Context, a struct {
		Line string `json:"line"`
	}) (string, error) {
		s.append.Add(1)
		return "appended " + a.Line, nil
	})
	var err error
	s.reg, err = tools.NewRegistry(tools.Notify(), echo, appendLine)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func appendCall(id, line string) model.ToolCall {
	return model.ToolCall{ID: id, Name: "append", Arguments: fmt.Sprintf(`{"line":%q}`, line)}
}

func notifyCall(id, text string) model.ToolCall {
	return model.ToolCall{ID: id, Name: tools.NotifyName, Arguments: fmt.Sprintf(`{"text":%q}`, text)}
}

var prompt = []model.Message{{Role: model.RoleUser, Content: "go"}}

// The loop saves its state from the first call of a tool other than
// notify_user on: after every reply (before its calls run) and after every
// call but notify_user's (before the next call or model call).
func TestLoopSavesBeforeEveryStepItCannotTakeBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		replies []model.Reply
		saved   []string
	}{
		{"no tools", []model.Reply{{Text: "all well"}}, nil},
		{"notify_user only: nothing saved", []model.Reply{calls(notifyCall("n", "disk full")), {Text: "sent"}}, nil},
		{"a call: the reply, its result, the final reply", []model.Reply{calls(appendCall("a", "x")), {Text: "done"}}, []string{
			"user assistant:append",
			"user assistant:append tool",
			"user assistant:append tool assistant",
		}},
		{"notify_user results ride along with the next save", []model.Reply{
			calls(notifyCall("n1", "first"), appendCall("a", "x"), notifyCall("n2", "second")),
			calls(notifyCall("n3", "third")),
			{Text: "done"},
		}, []string{
			"user assistant:notify_user,append,notify_user",
			"user assistant:notify_user,append,notify_user tool tool",
			"user assistant:notify_user,append,notify_user tool tool tool assistant:notify_user",
			"user assistant:notify_user,append,notify_user tool tool tool assistant:notify_user tool assistant",
		}},
		{"a refused call is saved as any other", []model.Reply{calls(model.ToolCall{ID: "r", Name: "rm", Arguments: `{}`}), {Text: "done"}}, []string{
			"user assistant:rm",
			"user assistant:rm tool",
			"user assistant:rm tool assistant",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSideEffects(t)
			j := &journal{}
			p := &scripted{replies: tt.replies}
			if _, err := tools.Loop(t.Context(), p, s.reg, model.Request{Messages: prompt}, tools.Limits{}, tools.WithJournal(j)); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(j.saved, tt.saved) {
				t.Errorf("saved:\n  %s\nwant:\n  %s", strings.Join(j.saved, "\n  "), strings.Join(tt.saved, "\n  "))
			}
		})
	}
}

// A state that cannot be saved runs nothing more: the call it would
// have been saved before does not run.
func TestLoopStopsWhenItCannotSave(t *testing.T) {
	t.Parallel()
	s := newSideEffects(t)
	bad := errors.New("the bus is down")
	p := &scripted{replies: []model.Reply{calls(appendCall("a", "x"))}}
	_, err := tools.Loop(t.Context(), p, s.reg, model.Request{Messages: prompt}, tools.Limits{}, tools.WithJournal(&journal{fail: bad}))
	if !errors.Is(err, bad) {
		t.Fatalf("Loop = %v, want the journal's error", err)
	}
	if n := s.append.Load(); n != 0 {
		t.Errorf("append ran %d times, want 0: its reply was not saved", n)
	}
	if len(p.seen) != 1 {
		t.Errorf("model calls = %d, want 1", len(p.seen))
	}
}

func asst(calls ...model.ToolCall) model.Message {
	return model.Message{Role: model.RoleAssistant, ToolCalls: calls}
}

func result(id, name, content string) model.Message {
	return model.Message{Role: model.RoleTool, ToolCallID: id, ToolName: name, Content: content}
}

func okCall(tc model.ToolCall, result string) tools.Call {
	return tools.Call{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments, Result: result, Outcome: tools.OutcomeOK}
}

// A loop that goes on from a saved state asks the model nothing it
// answered already and makes no call again that finished; of the calls
// it does not know the end of, only an idempotent one runs again, and
// the model is told the outcome of any other is unknown.
func TestLoopGoesOnFromItsState(t *testing.T) {
	t.Parallel()
	a, b := appendCall("a", "x"), appendCall("b", "y")
	e := model.ToolCall{ID: "e", Name: "echo", Arguments: `{"text":"hi"}`}
	n := notifyCall("n", "disk full")
	tests := []struct {
		name   string
		state  tools.State
		lim    tools.Limits
		models int    // model calls
		append int32  // runs of append
		echo   int32  // runs of echo
		calls  string // name:outcome of every call, in order
		last   string // in the tool result the model got last ("" none)
		saved  int    // states saved
	}{
		{
			name:  "after the final reply: nothing to do",
			state: tools.State{Messages: append(slices.Clone(prompt), asst(a), result("a", "append", "appended x"), model.Message{Role: model.RoleAssistant, Content: "all done"}), Calls: []tools.Call{okCall(a, "appended x")}, Steps: 2},
			calls: "append:ok",
		},
		{
			name:   "after a result: the next reply, nothing run again",
			state:  tools.State{Messages: append(slices.Clone(prompt), asst(a), result("a", "append", "appended x")), Calls: []tools.Call{okCall(a, "appended x")}, Steps: 1},
			models: 1, calls: "append:ok", last: "appended x", saved: 1,
		},
		{
			name:   "a call in flight is not made again; the calls after it are",
			state:  tools.State{Messages: append(slices.Clone(prompt), asst(a, b)), Steps: 1},
			models: 1, append: 1, calls: "append:interrupted,append:ok", last: "appended y", saved: 3,
		},
		{
			name:   "notify_user before the call in flight runs again",
			state:  tools.State{Messages: append(slices.Clone(prompt), asst(n, a)), Steps: 1},
			models: 1, calls: "notify_user:ok,append:interrupted", last: "outcome unknown", saved: 2,
		},
		{
			name:   "an idempotent call in flight is made again",
			state:  tools.State{Messages: append(slices.Clone(prompt), asst(e, a)), Steps: 1},
			models: 1, echo: 1, append: 1, calls: "echo:ok,append:ok", last: "appended x", saved: 3,
		},
		{
			name:   "a call past max_tool_calls is refused, not interrupted",
			state:  tools.State{Messages: append(slices.Clone(prompt), asst(a)), Steps: 1, Counted: 2},
			lim:    tools.Limits{MaxCalls: 2},
			models: 1, calls: "append:refused", last: "made its 2 tool calls", saved: 2,
		},
		{
			name:   "a call that never ran past the one in flight is counted",
			state:  tools.State{Messages: append(slices.Clone(prompt), asst(a, b)), Steps: 1, Counted: 1},
			lim:    tools.Limits{MaxCalls: 2},
			models: 1, calls: "append:interrupted,append:refused", last: "made its 2 tool calls", saved: 3,
		},
		{
			name: "the saved notify_user messages count towards the bound",
			state: tools.State{Messages: append(slices.Clone(prompt), asst(n, n, n, n, n),
				result("n", tools.NotifyName, "ok"), result("n", tools.NotifyName, "ok"), result("n", tools.NotifyName, "ok"), result("n", tools.NotifyName, "ok"), result("n", tools.NotifyName, "ok"),
				asst(n)), Calls: []tools.Call{okCall(n, "ok"), okCall(n, "ok"), okCall(n, "ok"), okCall(n, "ok"), okCall(n, "ok")}, Steps: 2},
			models: 1, calls: "notify_user:ok,notify_user:ok,notify_user:ok,notify_user:ok,notify_user:ok,notify_user:error", last: "at most 5", saved: 1,
		},
		{
			name:   "the steps so far count towards max_steps",
			state:  tools.State{Messages: append(slices.Clone(prompt), asst(e), result("e", "echo", "hi")), Calls: []tools.Call{okCall(e, "hi")}, Steps: 2},
			lim:    tools.Limits{MaxSteps: 3},
			models: 1, calls: "echo:ok", last: "hi", saved: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSideEffects(t)
			j := &journal{}
			p := &scripted{replies: []model.Reply{{Text: "finished"}}}
			ctx := tools.WithDelivery(t.Context(), &tools.Delivery{Mode: tools.DeliveryNotify})
			res, err := tools.Loop(ctx, p, s.reg, model.Request{Messages: prompt}, tt.lim, tools.WithJournal(j), tools.From(tt.state))
			if err != nil {
				t.Fatal(err)
			}
			if len(p.seen) != tt.models {
				t.Errorf("model calls = %d, want %d", len(p.seen), tt.models)
			}
			if got := s.append.Load(); got != tt.append {
				t.Errorf("append ran %d times, want %d", got, tt.append)
			}
			if got := s.echo.Load(); got != tt.echo {
				t.Errorf("echo ran %d times, want %d", got, tt.echo)
			}
			var got []string
			for _, c := range res.Calls {
				got = append(got, c.Name+":"+c.Outcome)
			}
			if strings.Join(got, ",") != tt.calls {
				t.Errorf("calls = %s, want %s", strings.Join(got, ","), tt.calls)
			}
			if tt.last != "" {
				msgs := p.seen[0].Messages
				if m := msgs[len(msgs)-1]; m.Role != model.RoleTool || !strings.Contains(m.Content, tt.last) {
					t.Errorf("the model got last %+v, want a tool result with %q", m, tt.last)
				}
			}
			if len(j.saved) != tt.saved {
				t.Errorf("saved %d states, want %d:\n  %s", len(j.saved), tt.saved, strings.Join(j.saved, "\n  "))
			}
			if tt.models == 0 && (res.Text != "all done" || res.Steps != tt.state.Steps) {
				t.Errorf("result = %q after %d steps, want the saved reply after %d", res.Text, res.Steps, tt.state.Steps)
			}
			for _, c := range res.Calls {
				if c.Outcome == tools.OutcomeInterrupted && (!strings.Contains(c.Error, "may or may not have taken effect") || c.ResultBytes != len(c.Error)) {
					t.Errorf("interrupted call = %+v, want an error saying its outcome is unknown", c)
				}
			}
		})
	}
}

// A call cut short by ctx has no result in the state: a loop that goes on
// from it treats it as the call in flight.
func TestLoopKeepsNoResultOfACallCutShort(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	var saved []tools.State
	j := journalFunc(func(_ context.Context, s tools.State) error {
		saved = append(saved, tools.State{Messages: slices.Clone(s.Messages), Calls: slices.Clone(s.Calls), Steps: s.Steps})
		return nil
	})
	slow := tools.Func("slow", "waits for ctx", func(ctx context.Context, _ struct{}) (string, error) {
		cancel()
		<-ctx.Done()
		return "", ctx.Err()
	})
	reg := must(tools.NewRegistry(slow))
	p := &scripted{replies: []model.Reply{calls(model.ToolCall{ID: "s", Name: "slow", Arguments: `{}`})}}
	res, err := tools.Loop(ctx, p, reg, model.Request{Messages: prompt}, tools.Limits{}, tools.WithJournal(j))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Loop = %v, want context.Canceled", err)
	}
	if len(res.Calls) != 1 || res.Calls[0].Name != "slow" {
		t.Errorf("result calls = %+v, want the call cut short (for the record)", res.Calls)
	}
	if len(saved) != 1 || shape(saved[0].Messages) != "user assistant:slow" || len(saved[0].Calls) != 0 {
		t.Fatalf("saved %d states (last %+v), want only the reply, without a result", len(saved), saved)
	}
	p2 := &scripted{}
	res, err = tools.Loop(t.Context(), p2, reg, model.Request{Messages: prompt}, tools.Limits{}, tools.From(saved[0]))
	if err != nil || len(res.Calls) != 1 || res.Calls[0].Outcome != tools.OutcomeInterrupted {
		t.Fatalf("Loop from the state = %+v, %v; want the slow call interrupted", res.Calls, err)
	}
}

type journalFunc func(context.Context, tools.State) error

func (f journalFunc) Save(ctx context.Context, s tools.State) error { return f(ctx, s) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A finished Loop's State with a user turn appended goes on: the model is
// asked again, its calls run within what is left of the limits, and the
// result holds the whole run (calls, steps, usage).
func TestLoopGoesOnAfterAUserTurn(t *testing.T) {
	t.Parallel()
	s := newSideEffects(t)
	p := &scripted{replies: []model.Reply{
		{ToolCalls: []model.ToolCall{appendCall("a", "x")}, Usage: model.Usage{InputTokens: 10}},
		{Text: "done", Usage: model.Usage{InputTokens: 20}},
		{ToolCalls: []model.ToolCall{appendCall("b", "y"), appendCall("c", "z")}, Usage: model.Usage{InputTokens: 30}},
		{Text: "NO_REPLY", Usage: model.Usage{InputTokens: 40}},
	}}
	lim := tools.Limits{MaxSteps: 4, MaxCalls: 2}
	first, err := tools.Loop(t.Context(), p, s.reg, model.Request{Messages: prompt}, lim)
	if err != nil || first.Text != "done" {
		t.Fatalf("first Loop = %q, %v; want done", first.Text, err)
	}
	st := first.State()
	st.Messages = append(st.Messages, model.Message{Role: model.RoleUser, Content: "store what matters"})
	j := &journal{}
	res, err := tools.Loop(t.Context(), p, s.reg, model.Request{}, lim, tools.From(st), tools.WithJournal(j))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range res.Calls {
		got = append(got, c.Name+":"+c.Outcome)
	}
	if strings.Join(got, ",") != "append:ok,append:ok,append:refused" || s.append.Load() != 2 {
		t.Errorf("calls = %v (append ran %d times), want the first run's call, one more, and one past max_tool_calls refused", got, s.append.Load())
	}
	if res.Text != "NO_REPLY" || res.Steps != 4 || res.Usage.InputTokens != 100 {
		t.Errorf("result = %q after %d steps, %d input tokens; want NO_REPLY after 4, 100", res.Text, res.Steps, res.Usage.InputTokens)
	}
	if n := len(p.seen); n != 4 || p.seen[2].Messages[len(p.seen[2].Messages)-1].Content != "store what matters" {
		t.Errorf("model calls = %d, want 4, the third ending with the user turn", n)
	}
	if len(j.saved) == 0 || !strings.HasPrefix(j.saved[0], "user assistant:append tool assistant user assistant:append,append") {
		t.Errorf("saved = %v, want the whole conversation from the first reply after the user turn", j.saved)
	}
}
