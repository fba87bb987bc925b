package tools_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// scripted replies in order and records every request.
type scripted struct {
	replies []model.Reply
	seen    []model.Request
}

func (s *scripted) Complete(_ context.Context, req model.Request) (model.Reply, error) {
	s.seen = append(s.seen, req)
	if len(s.replies) == 0 {
		return model.Reply{Text: "done"}, nil
	}
	r := s.replies[0]
	s.replies = s.replies[1:]
	return r, nil
}

func registry(t *testing.T) *tools.Registry {
	t.Helper()
	echo := tools.Func("echo", "echo the text", func(_ context.Context, a struct {
		Text string `json:"text"`
	}) (string, error) {
		if a.Text == "boom" {
			return "", errors.New("echo refuses boom")
		}
		return a.Text, nil
	})
	reg, err := tools.NewRegistry(tools.Notify(), echo)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestLoopToolErrorsGoBackToTheModel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		call model.ToolCall
		want string // substring of the tool result the model sees
		err  bool
	}{
		{"ok", model.ToolCall{ID: "a", Name: "echo", Arguments: `{"text":"hi"}`}, "hi", false},
		{"broken json", model.ToolCall{ID: "a", Name: "echo", Arguments: `{"text":`}, "not a JSON object", true},
		{"not an object", model.ToolCall{ID: "a", Name: "echo", Arguments: `[1]`}, "not a JSON object", true},
		{"unknown field", model.ToolCall{ID: "a", Name: "echo", Arguments: `{"txt":"x"}`}, "invalid arguments", true},
		{"unknown tool", model.ToolCall{ID: "a", Name: "rm_rf", Arguments: `{}`}, `"rm_rf" is not a tool of this run`, true},
		{"handler error", model.ToolCall{ID: "a", Name: "echo", Arguments: `{"text":"boom"}`}, "echo refuses boom", true},
		{"empty args", model.ToolCall{ID: "a", Name: "echo", Arguments: ``}, "", false},
		{"notify blank", model.ToolCall{ID: "a", Name: "notify_user", Arguments: `{"text":"  "}`}, "text is empty", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &scripted{replies: []model.Reply{{ToolCalls: []model.ToolCall{tt.call}}}}
			res, err := tools.Loop(t.Context(), p, registry(t), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "go"}}}, tools.Limits{MaxSteps: 4})
			if err != nil {
				t.Fatalf("Loop: %v", err)
			}
			if len(p.seen) != 2 {
				t.Fatalf("model calls = %d, want 2", len(p.seen))
			}
			last := p.seen[1].Messages[len(p.seen[1].Messages)-1]
			if last.Role != model.RoleTool || last.IsError != tt.err || !strings.Contains(last.Content, tt.want) {
				t.Errorf("tool result = %+v, want error=%v containing %q", last, tt.err, tt.want)
			}
			if res.Text != "done" || len(res.Calls) != 1 {
				t.Errorf("result = %+v", res)
			}
		})
	}
}

func TestLoopFillsMissingCallIDsConsistently(t *testing.T) {
	t.Parallel()
	p := &scripted{replies: []model.Reply{{ToolCalls: []model.ToolCall{{Name: "echo", Arguments: `{"text":"x"}`}}}}}
	if _, err := tools.Loop(t.Context(), p, registry(t), model.Request{}, tools.Limits{MaxSteps: 4}); err != nil {
		t.Fatal(err)
	}
	msgs := p.seen[1].Messages
	asst, result := msgs[len(msgs)-2], msgs[len(msgs)-1]
	if asst.ToolCalls[0].ID == "" || asst.ToolCalls[0].ID != result.ToolCallID {
		t.Fatalf("assistant call id %q, tool result answers %q; want the same non-empty id", asst.ToolCalls[0].ID, result.ToolCallID)
	}
}

func TestLoopStopsAtMaxSteps(t *testing.T) {
	t.Parallel()
	call := model.Reply{ToolCalls: []model.ToolCall{{ID: "a", Name: "echo", Arguments: `{"text":"x"}`}}}
	p := &scripted{replies: []model.Reply{call, call, call, call}}
	res, err := tools.Loop(t.Context(), p, registry(t), model.Request{}, tools.Limits{MaxSteps: 3})
	if !errors.Is(err, tools.ErrMaxSteps) || res.Steps != 3 {
		t.Fatalf("Loop = steps %d, %v; want 3 steps and ErrMaxSteps", res.Steps, err)
	}
}

func TestNotifySchema(t *testing.T) {
	t.Parallel()
	reg := registry(t)
	ts, err := reg.Tools("notify_user")
	if err != nil {
		t.Fatal(err)
	}
	s := string(ts[0].Parameters)
	for _, want := range []string{`"text"`, `"urgency"`, `"important"`, `"required":["text"]`, `"additionalProperties":false`} {
		if !strings.Contains(s, want) {
			t.Errorf("notify_user schema %s lacks %s", s, want)
		}
	}
	if _, err := reg.Tools("nope"); err == nil {
		t.Error("Tools(unknown) = nil error")
	}
	if _, err := tools.NewRegistry(tools.Notify(), tools.Notify()); !errors.Is(err, tools.ErrDuplicate) {
		t.Errorf("duplicate register = %v, want ErrDuplicate", err)
	}
}

func FuzzDecodeNotify(f *testing.F) {
	f.Add(`{"text":"hi","urgency":"important"}`)
	f.Add(`{"text":`)
	f.Fuzz(func(t *testing.T, raw string) {
		a, err := tools.DecodeNotify(raw)
		if err == nil && strings.TrimSpace(a.Text) == "" {
			t.Fatalf("DecodeNotify(%q) accepted blank text", raw)
		}
	})
}

// TestLoopBoundsTheCallsOfOneReply: of a reply that asks for more calls
// than a run may make (MaxCalls and MaxNotify), the first past them is
// refused, telling the model, and the rest are dropped: not run, and kept
// neither in the conversation nor in the calls, only counted.
func TestLoopBoundsTheCallsOfOneReply(t *testing.T) {
	t.Parallel()
	var calls []model.ToolCall
	for range 40 {
		calls = append(calls, model.ToolCall{Name: "echo", Arguments: `{"text":"x"}`})
	}
	p := &scripted{replies: []model.Reply{{ToolCalls: calls}}}
	lim := tools.Limits{MaxSteps: 4, MaxCalls: 2}
	res, err := tools.Loop(t.Context(), p, registry(t), model.Request{}, lim)
	if err != nil {
		t.Fatal(err)
	}
	n := lim.PerReply()
	if n != 2+tools.MaxNotify || len(res.Calls) != n+1 || res.Dropped != 40-(n+1) {
		t.Fatalf("PerReply %d, %d calls kept, %d dropped; want %d, %d and %d", n, len(res.Calls), res.Dropped, 2+tools.MaxNotify, n+1, 40-(n+1))
	}
	if c := res.Calls[n]; c.Outcome != tools.OutcomeRefused || !strings.Contains(c.Error, "one reply may make") {
		t.Errorf("call %d = %+v, want refused telling the model a reply asked for too many", n, c)
	}
	msgs := p.seen[1].Messages
	if asst := msgs[len(msgs)-(n+2)]; asst.Role != model.RoleAssistant || len(asst.ToolCalls) != n+1 {
		t.Errorf("the conversation's reply = %+v, want its first %d calls only", asst, n+1)
	}
}

// The Loop hands its secrets (WithSecrets) to every tool it calls in the
// context (secret.FromContext), so a tool that cuts its output to a cap
// cuts them out first and leaves no part of one at the cut.
func TestLoopHandsItsSecretsToTheTools(t *testing.T) {
	t.Parallel()
	const key = "cfg-key-fedcba9876543210"
	var seen []string
	peek := tools.Func("peek", "look", func(ctx context.Context, _ struct{}) (string, error) {
		seen = secret.FromContext(ctx)
		return "seen", nil
	})
	reg, err := tools.NewRegistry(peek)
	if err != nil {
		t.Fatal(err)
	}
	p := &scripted{replies: []model.Reply{{ToolCalls: []model.ToolCall{{ID: "a", Name: "peek", Arguments: `{}`}}}}}
	if _, err := tools.Loop(t.Context(), p, reg, model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "go"}}}, tools.Limits{MaxSteps: 4}, tools.WithSecrets(key)); err != nil {
		t.Fatalf("Loop: %v", err)
	}
	if !slices.Equal(seen, []string{key}) {
		t.Errorf("the tool's secret.FromContext = %q, want the Loop's secrets", seen)
	}
}
