package agentwork

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// A claim keeps a conversation without the runner's secrets (but in the
// user's own prompt) and without a second copy of the calls' arguments
// and results; unpacked, the calls have them back.
func TestPackState(t *testing.T) {
	t.Parallel()
	const key = "sk-live-0123456789abcdef"
	s := tools.State{
		Messages: []model.Message{
			{Role: model.RoleUser, Content: "use " + key},
			{Role: model.RoleAssistant, Content: "reading", ToolCalls: []model.ToolCall{
				{ID: "r", Name: "read", Arguments: `{"token":"` + key + `"}`},
				{ID: "w", Name: "write", Arguments: `{}`},
			}},
			{Role: model.RoleTool, ToolCallID: "r", ToolName: "read", Content: "the key is " + key},
			{Role: model.RoleTool, ToolCallID: "w", ToolName: "write", Content: "error: disk full", IsError: true},
		},
		Calls: []tools.Call{
			{ID: "r", Name: "read", Arguments: `{"token":"` + key + `"}`, Result: "the key is " + key, Outcome: tools.OutcomeOK, DurationMS: 2, ArgumentsBytes: 36, ResultBytes: 35},
			{ID: "w", Name: "write", Arguments: `{}`, Error: "disk full", Outcome: tools.OutcomeError, ArgumentsBytes: 2, ResultBytes: 9},
		},
		Steps: 1, Counted: 2,
	}
	p, err := packState(s, []string{key}, MaxConversation)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(p)
	if n := strings.Count(string(raw), key); n != 1 {
		t.Errorf("the packed state holds the secret %d times, want once (in the user's prompt): %s", n, raw)
	}
	if strings.Contains(string(raw), `"result"`) || strings.Contains(string(raw), `"error":`) {
		t.Errorf("the packed calls keep their results: %s", raw)
	}
	if s.Messages[2].Content != "the key is "+key {
		t.Error("packState changed the state it was given")
	}
	got := unpackState(p)
	want := []tools.Call{
		{ID: "r", Name: "read", Arguments: `{"token":"[redacted]"}`, Result: "the key is [redacted]", Outcome: tools.OutcomeOK, DurationMS: 2, ArgumentsBytes: 36, ResultBytes: 35},
		{ID: "w", Name: "write", Arguments: `{}`, Error: "disk full", Outcome: tools.OutcomeError, ArgumentsBytes: 2, ResultBytes: 9},
	}
	for i := range want {
		if got.Calls[i] != want[i] {
			t.Errorf("unpacked call %d = %+v, want %+v", i, got.Calls[i], want[i])
		}
	}
	if got.Steps != 1 || got.Counted != 2 || len(got.Messages) != 4 {
		t.Errorf("unpacked = %+v, want the steps, the count and the messages", got)
	}
}
