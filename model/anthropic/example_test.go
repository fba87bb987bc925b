package anthropic_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/anthropic"
)

func Example() {
	// A stand-in for api.anthropic.com.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",
			"content":[{"type":"text","text":"The disk is nearly full."},
			{"type":"tool_use","id":"toolu_1","name":"notify_user","input":{"text":"Disk is 91% full"}}],
			"stop_reason":"tool_use","usage":{"input_tokens":120,"output_tokens":31}}`)
	}))
	defer srv.Close()

	p, err := anthropic.New(model.Config{Provider: "anthropic", BaseURL: srv.URL, Model: "claude-sonnet-4-5", APIKey: "sk-ant-..."})
	if err != nil {
		fmt.Println(err)
		return
	}
	reply, err := p.Complete(context.Background(), model.Request{
		System:   "Call notify_user only if something needs attention.",
		Messages: []model.Message{{Role: model.RoleUser, Content: "- disk usage below 90%"}},
	})
	if err != nil {
		fmt.Println(model.Classify(err), err)
		return
	}
	fmt.Println(p.Name())
	fmt.Println(reply.Text)
	for _, tc := range reply.ToolCalls {
		fmt.Println(tc.Name, tc.Arguments)
	}
	// Output:
	// anthropic/claude-sonnet-4-5
	// The disk is nearly full.
	// notify_user {"text":"Disk is 91% full"}
}
