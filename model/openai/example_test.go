package openai_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/openai"
)

func Example() {
	// A stand-in for Ollama's OpenAI-compatible API.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"llama3.1","choices":[{"index":0,"message":{"role":"assistant","content":null,
			"tool_calls":[{"id":"call_1","type":"function","function":{"name":"notify_user","arguments":"{\"text\":\"Disk is 91% full\"}"}}]},
			"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":120,"completion_tokens":18}}`)
	}))
	defer srv.Close()

	p, err := openai.New(model.Config{Provider: "openai", BaseURL: srv.URL + "/v1", Model: "llama3.1"})
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
	for _, tc := range reply.ToolCalls {
		fmt.Println(tc.Name, tc.Arguments)
	}
	fmt.Println(reply.Usage.InputTokens, reply.Usage.OutputTokens)
	// Output:
	// openai/llama3.1
	// notify_user {"text":"Disk is 91% full"}
	// 120 18
}
