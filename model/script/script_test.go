package script_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/script"
)

func request(source, name, prompt string) model.Request {
	return model.Request{
		Messages: []model.Message{{Role: model.RoleUser, Content: prompt}},
		Meta:     map[string]string{"source": source, "name": name},
	}
}

func TestRules(t *testing.T) {
	t.Parallel()
	p, err := script.New(script.Config{
		Rules: []script.Rule{
			{Match: script.Match{Source: "heartbeat"}, Reply: script.Reply{Text: "checked", Notify: "Disk 93% full"}},
			{Match: script.Match{Source: "task", Prompt: "(?i)disk"}, Reply: script.Reply{Text: "Disk: {{prompt}}"}},
			{Match: script.Match{Source: "cron", Name: "report"}, Reply: script.Reply{ToolCalls: []script.Call{
				{Name: "read_file", Arguments: map[string]any{"path": "/tmp/x"}},
				{Name: "broken", RawArguments: `{"path":`},
				{Name: "no_args"},
			}}},
		},
		Default: &script.Reply{Text: "default"},
	})
	if err != nil {
		t.Fatalf("script.New() error = %v", err)
	}
	tests := []struct {
		name      string
		req       model.Request
		wantText  string
		wantCalls []model.ToolCall
	}{
		{"notify shorthand", request("heartbeat", "default", "- [ ] disk"), "checked",
			[]model.ToolCall{{ID: "call_notify", Name: "notify_user", Arguments: `{"text":"Disk 93% full"}`}}},
		{"prompt regexp and template", request("task", "t", "check the DISK please"), "Disk: check the DISK please", nil},
		{"prompt not matching falls through", request("task", "t", "hello"), "default", nil},
		{"name match", request("cron", "report", "go"), "", []model.ToolCall{
			{ID: "call_0", Name: "read_file", Arguments: `{"path":"/tmp/x"}`},
			{ID: "call_1", Name: "broken", Arguments: `{"path":`},
			{ID: "call_2", Name: "no_args", Arguments: `{}`},
		}},
		{"other name", request("cron", "backup", "go"), "default", nil},
	}
	for _, tt := range tests {
		got, err := p.Complete(t.Context(), tt.req)
		if err != nil {
			t.Fatalf("%s: Complete() error = %v", tt.name, err)
		}
		if got.Text != tt.wantText || len(got.ToolCalls) != len(tt.wantCalls) {
			t.Fatalf("%s: Complete() = %+v, want text %q and calls %+v", tt.name, got, tt.wantText, tt.wantCalls)
		}
		for i := range tt.wantCalls {
			if got.ToolCalls[i] != tt.wantCalls[i] {
				t.Errorf("%s: ToolCalls[%d] = %+v, want %+v", tt.name, i, got.ToolCalls[i], tt.wantCalls[i])
			}
		}
		if got.Model != "script" {
			t.Errorf("%s: Model = %q, want script", tt.name, got.Model)
		}
	}
}

// After tool results the same rule answers with its text only, so the tool
// loop ends as it does with a real model.
func TestToolRoundTripEnds(t *testing.T) {
	t.Parallel()
	p, err := script.New(script.Config{Rules: []script.Rule{{Reply: script.Reply{Text: "done", Notify: "x"}}}})
	if err != nil {
		t.Fatal(err)
	}
	req := request("heartbeat", "default", "check")
	first, err := p.Complete(t.Context(), req)
	if err != nil || len(first.ToolCalls) != 1 {
		t.Fatalf("first Complete() = %+v, %v; want one call", first, err)
	}
	req.Messages = append(req.Messages,
		model.Message{Role: model.RoleAssistant, Content: first.Text, ToolCalls: first.ToolCalls},
		model.Message{Role: model.RoleTool, ToolCallID: first.ToolCalls[0].ID, Content: "acknowledged"})
	second, err := p.Complete(t.Context(), req)
	if err != nil || second.Text != "done" || len(second.ToolCalls) != 0 {
		t.Errorf("Complete() after tool results = %+v, %v; want text done and no calls", second, err)
	}
}

func TestFault(t *testing.T) {
	t.Parallel()
	p, err := script.New(script.Config{Rules: []script.Rule{{Reply: script.Reply{Text: "ok",
		Error: &script.Fault{Class: "transient", Times: 2, Status: 429, RetryAfter: 3 * time.Second}}}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		_, err := p.Complete(t.Context(), request("task", "t", "x"))
		var me *model.Error
		if !errors.As(err, &me) || me.Class != model.ClassTransient || me.Status != 429 || me.RetryAfter != 3*time.Second {
			t.Fatalf("call %d: Complete() error = %v, want a transient 429 retry after 3s", i+1, err)
		}
	}
	if got, err := p.Complete(t.Context(), request("task", "t", "x")); err != nil || got.Text != "ok" {
		t.Errorf("third Complete() = %+v, %v; want ok once Times is used up", got, err)
	}
}

func TestDelayHonoursContext(t *testing.T) {
	t.Parallel()
	p, err := script.New(script.Config{Default: &script.Reply{Delay: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Complete(ctx, request("task", "t", "x")); model.Classify(err) != model.ClassTimeout {
		t.Errorf("Complete() past the deadline = %v, want a timeout", err)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  script.Config
		want string // "" means valid
	}{
		{"empty", script.Config{}, ""},
		{"bad regexp", script.Config{Rules: []script.Rule{{Match: script.Match{Prompt: "("}}}}, "model.script.rules[0].match.prompt"},
		{"bad class", script.Config{Rules: []script.Rule{{}, {Reply: script.Reply{Error: &script.Fault{Class: "flaky"}}}}}, `model.script.rules[1]: error.class: "flaky"`},
		{"call without name", script.Config{Rules: []script.Rule{{Reply: script.Reply{ToolCalls: []script.Call{{}}}}}}, "tool_calls: name is required"},
		{"negative delay", script.Config{Default: &script.Reply{Delay: -time.Second}}, "model.script.default: delay: negative"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: Validate() = %v, want %q", tt.name, err, tt.want)
		}
		if _, nerr := script.New(tt.cfg); (nerr == nil) != (err == nil) {
			t.Errorf("%s: New() error = %v, Validate() = %v; want the same verdict", tt.name, nerr, err)
		}
	}
}
