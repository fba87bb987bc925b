package anthropic_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/anthropic"
	"github.com/agentwork/agentwork/model/anthropic/anthropicfake"
)

func newClient(t *testing.T, cfg model.Config, opts ...anthropic.Option) *anthropic.Client {
	t.Helper()
	c, err := anthropic.New(cfg, opts...)
	if err != nil {
		t.Fatalf("anthropic.New() error = %v", err)
	}
	return c
}

func hello() model.Request {
	return model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}
}

func TestNew(t *testing.T) {
	t.Parallel()
	hot, ok := 1.5, 0.7
	tests := []struct {
		name    string
		cfg     model.Config
		opts    []anthropic.Option
		wantErr string
	}{
		{"minimal", model.Config{Model: "claude-sonnet-4-5"}, nil, ""},
		{"provider anthropic", model.Config{Provider: "anthropic", Model: "m", Temperature: &ok}, nil, ""},
		{"wrong provider", model.Config{Provider: "openai", Model: "m"}, nil, `model.provider is "openai"`},
		{"no model", model.Config{}, nil, "model.model: required"},
		{"temperature above 1", model.Config{Model: "m", Temperature: &hot}, nil, "model.temperature: 1.5 is out of range for Anthropic (want 0-1)"},
		{"key with inner newline", model.Config{Model: "m", APIKey: "sk-ant\n-x"}, nil, "model.api_key: contains a control character"},
		{"nil http client", model.Config{Model: "m"}, []anthropic.Option{anthropic.WithHTTPClient(nil)}, "WithHTTPClient(nil)"},
		{"nil logger is nop", model.Config{Model: "m"}, []anthropic.Option{anthropic.WithLogger(nil)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := anthropic.New(tt.cfg, tt.opts...)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("New() error = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("New() error = %v, want one containing %q", err, tt.wantErr)
			case err == nil && c.Name() != "anthropic/"+tt.cfg.Model:
				t.Errorf("Name() = %q, want %q", c.Name(), "anthropic/"+tt.cfg.Model)
			}
		})
	}
}

// TestBaseURL: the root with or without /v1 reaches /v1/messages.
func TestBaseURL(t *testing.T) {
	t.Parallel()
	for _, suffix := range []string{"", "/", "/v1", "/v1/"} {
		t.Run(suffix, func(t *testing.T) {
			t.Parallel()
			srv := anthropicfake.New(t)
			srv.Enqueue(anthropicfake.Text("ok"))
			cfg := srv.Config()
			cfg.BaseURL += suffix
			if _, err := newClient(t, cfg).Complete(t.Context(), hello()); err != nil {
				t.Fatalf("Complete() with base_url %s error = %v", cfg.BaseURL, err)
			}
			if p := srv.Requests()[0].Path; p != "/v1/messages" {
				t.Errorf("path = %s, want /v1/messages", p)
			}
		})
	}
}

func TestRequestWireFormat(t *testing.T) {
	t.Parallel()
	srv := anthropicfake.New(t)
	srv.Enqueue(anthropicfake.Text("ok"))
	cfg := srv.Config()
	temp := 0.5
	cfg.MaxTokens, cfg.Temperature = 300, &temp
	cfg.Headers = map[string]string{"anthropic-beta": "token-efficient-tools-2025-02-19"}
	_, err := newClient(t, cfg).Complete(t.Context(), model.Request{
		System: "be brief",
		Messages: []model.Message{
			{Role: model.RoleSystem, Content: "today is Monday"},
			{Role: model.RoleUser, Content: "check"},
			{Role: model.RoleAssistant, Content: "Checking.", ToolCalls: []model.ToolCall{
				{ID: "toolu_1", Name: "read_file", Arguments: `{"path": "/a"}`},
				{ID: "toolu_2", Name: "read_file", Arguments: `{"path": broken`},
			}},
			{Role: model.RoleTool, ToolCallID: "toolu_1", ToolName: "read_file", Content: "A"},
			{Role: model.RoleTool, ToolCallID: "toolu_2", ToolName: "read_file", Content: "error: arguments are not a JSON object", IsError: true},
			{Role: model.RoleUser, Content: "also look at /b"},
			{Role: model.RoleAssistant, Content: ""}, // an empty turn is dropped
			{Role: model.RoleUser, Content: "please"},
		},
		Tools: []model.Tool{
			{Name: "read_file", Description: "Read a file.", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)},
			{Name: "now"},
		},
	})
	if err != nil {
		t.Fatalf("Complete() error = %v", err)
	}
	r := srv.Requests()[0]
	for k, want := range map[string]string{
		"X-Api-Key":         anthropicfake.DefaultKey,
		"Anthropic-Version": "2023-06-01",
		"Content-Type":      "application/json",
		"Anthropic-Beta":    "token-efficient-tools-2025-02-19",
		"Authorization":     "",
	} {
		if got := r.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	want := `{"model":"claude-fake","max_tokens":300,"system":"be brief\n\ntoday is Monday","messages":[` +
		`{"role":"user","content":[{"type":"text","text":"check"}]},` +
		`{"role":"assistant","content":[{"type":"text","text":"Checking."},` +
		`{"type":"tool_use","id":"toolu_1","name":"read_file","input":{"path":"/a"}},` +
		`{"type":"tool_use","id":"toolu_2","name":"read_file","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"A"},` +
		`{"type":"tool_result","tool_use_id":"toolu_2","content":"error: arguments are not a JSON object","is_error":true},` +
		`{"type":"text","text":"also look at /b"},{"type":"text","text":"please"}]}],` +
		`"tools":[{"name":"read_file","description":"Read a file.","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}},` +
		`{"name":"now","input_schema":{"type":"object","properties":{}}}],"temperature":0.5}`
	if string(r.Body) != want {
		t.Errorf("request body =\n%s\nwant\n%s", r.Body, want)
	}
}

func TestNoKeyNoHeader(t *testing.T) {
	t.Parallel()
	srv := anthropicfake.New(t)
	srv.SetKey("") // like Ollama
	srv.Enqueue(anthropicfake.Text("ok"))
	if _, err := newClient(t, srv.Config()).Complete(t.Context(), hello()); err != nil {
		t.Fatalf("Complete() error = %v", err)
	}
	if _, ok := srv.Requests()[0].Header["X-Api-Key"]; ok {
		t.Error("x-api-key sent without model.api_key")
	}
}

func TestReplyShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want model.Reply
	}{
		{
			name: "text blocks concatenated, thinking ignored",
			body: `{"type":"message","role":"assistant","model":"claude-x","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"Hello, "},{"type":"text","text":"world"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":2}}`,
			want: model.Reply{Text: "Hello, world", Model: "claude-x", StopReason: "end_turn", Usage: model.Usage{InputTokens: 5, OutputTokens: 2}},
		},
		{
			name: "cache tokens count as input",
			body: `{"type":"message","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":2}}`,
			want: model.Reply{Text: "hi", Model: "m", StopReason: "end_turn", Usage: model.Usage{InputTokens: 1105, OutputTokens: 2, CachedInputTokens: 1000}},
		},
		{
			name: "input as a string, missing input",
			body: `{"type":"message","model":"m","content":[{"type":"tool_use","id":"t1","name":"a","input":"{\"x\":1}"},{"type":"tool_use","id":"t2","name":"b"}],"stop_reason":"tool_use"}`,
			want: model.Reply{ToolCalls: []model.ToolCall{{ID: "t1", Name: "a", Arguments: `{"x":1}`}, {ID: "t2", Name: "b", Arguments: `{}`}}, Model: "m", StopReason: "tool_use"},
		},
		{
			name: "empty content list",
			body: `{"type":"message","model":"m","content":[],"stop_reason":"end_turn"}`,
			want: model.Reply{Model: "m", StopReason: "end_turn"},
		},
		{
			name: "max_tokens with a partial tool call is passed on",
			body: `{"type":"message","model":"m","content":[{"type":"tool_use","id":"t1","name":"a","input":{}}],"stop_reason":"max_tokens"}`,
			want: model.Reply{ToolCalls: []model.ToolCall{{ID: "t1", Name: "a", Arguments: `{}`}}, Model: "m", StopReason: "max_tokens", Truncated: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := anthropicfake.New(t)
			srv.Enqueue(anthropicfake.Response{Body: tt.body})
			got, err := newClient(t, srv.Config()).Complete(t.Context(), hello())
			if err != nil {
				t.Fatalf("Complete() error = %v", err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("Complete() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestErrorClassification(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	tests := []struct {
		name       string
		resp       anthropicfake.Response
		class      model.Class
		status     int
		retryAfter time.Duration // checked to within a second
		mention    []string
	}{
		{"401", anthropicfake.Error(401, "invalid x-api-key"), model.ClassPermanent, 401, 0,
			[]string{"401 Unauthorized from http://127.0.0.1:", "check model.api_key (sent as x-api-key", "authentication_error: invalid x-api-key"}},
		{"404 model", anthropicfake.Error(404, "model: claude-nope"), model.ClassPermanent, 404, 0,
			[]string{`check model.model ("claude-fake") and model.base_url`, "not_found_error: model: claude-nope"}},
		{"402 billing", anthropicfake.Error(402, "Your credit balance is too low"), model.ClassPermanent, 402, 0, []string{"billing"}},
		{"413", anthropicfake.Error(413, "Request exceeds the maximum allowed number of bytes."), model.ClassPermanent, 413, 0, []string{"shorten the prompt"}},
		{"529 overloaded", anthropicfake.Overloaded(), model.ClassTransient, 529, 0, []string{"529 Overloaded", "overloaded_error"}},
		{"429 with ratelimit reset", anthropicfake.Response{Status: 429, Message: "slow down", Header: http.Header{
			"Anthropic-Ratelimit-Requests-Remaining":     {"3"},
			"Anthropic-Ratelimit-Requests-Reset":         {now.Add(2 * time.Second).Format(time.RFC3339)},
			"Anthropic-Ratelimit-Input-Tokens-Remaining": {"0"},
			"Anthropic-Ratelimit-Input-Tokens-Reset":     {now.Add(40 * time.Second).Format(time.RFC3339)},
		}}, model.ClassTransient, 429, 40 * time.Second, nil},
		{"429 retry-after wins", anthropicfake.Response{Status: 429, Message: "slow down", Header: http.Header{
			"Retry-After":                          {"12"},
			"Anthropic-Ratelimit-Tokens-Remaining": {"0"},
			"Anthropic-Ratelimit-Tokens-Reset":     {now.Add(40 * time.Second).Format(time.RFC3339)},
		}}, model.ClassTransient, 429, 12 * time.Second, nil},
		{"error body with a 200", anthropicfake.Response{Body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`},
			model.ClassTransient, 529, 0, []string{"Overloaded"}},
		{"unknown error type with a 200", anthropicfake.Response{Body: `{"type":"error","error":{"type":"weird","message":"?"}}`},
			model.ClassPermanent, 200, 0, nil},
		{"html 502 from a proxy", anthropicfake.Response{Status: 502, Body: "<html><title>502 Bad Gateway</title></html>"},
			model.ClassTransient, 502, 0, []string{"502 Bad Gateway"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := anthropicfake.New(t)
			srv.Enqueue(tt.resp)
			_, err := newClient(t, srv.Config()).Complete(t.Context(), hello())
			var me *model.Error
			if !errors.As(err, &me) {
				t.Fatalf("Complete() error = %v, want *model.Error", err)
			}
			if me.Class != tt.class || me.Status != tt.status {
				t.Errorf("Complete() error = {%s %d}, want {%s %d}: %v", me.Class, me.Status, tt.class, tt.status, err)
			}
			if d := me.RetryAfter - tt.retryAfter; d < -time.Second || d > time.Second {
				t.Errorf("RetryAfter = %s, want about %s", me.RetryAfter, tt.retryAfter)
			}
			for _, s := range tt.mention {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	_ = ln.Close()
	_, err = newClient(t, model.Config{BaseURL: base, Model: "m", APIKey: "sk-ant-refused-secret"}).Complete(t.Context(), hello())
	if model.Classify(err) != model.ClassTransient || !strings.Contains(err.Error(), "cannot reach "+base) {
		t.Errorf("Complete() error = %v, want transient \"cannot reach %s\"", err, base)
	}
	if strings.Contains(err.Error(), "sk-ant-refused-secret") {
		t.Errorf("error leaks the key: %v", err)
	}
}

// TestRetryIsTheCallersJob: each call is one attempt; overloaded, rate
// limited, then a success take three calls.
func TestRetryIsTheCallersJob(t *testing.T) {
	t.Parallel()
	srv := anthropicfake.New(t)
	srv.Enqueue(anthropicfake.Overloaded(), anthropicfake.RateLimited(3*time.Second), anthropicfake.Text("finally"))
	c := newClient(t, srv.Config())
	for i, want := range []time.Duration{0, 3 * time.Second} {
		_, err := c.Complete(t.Context(), hello())
		if !model.Retryable(err) || model.RetryAfter(err) != want {
			t.Fatalf("call %d: error = %v (retry after %s), want retryable after %s", i+1, err, model.RetryAfter(err), want)
		}
		if n := len(srv.Requests()); n != i+1 {
			t.Fatalf("after call %d the server saw %d requests, want %d", i+1, n, i+1)
		}
	}
	if got, err := c.Complete(t.Context(), hello()); err != nil || got.Text != "finally" {
		t.Fatalf("call 3 = %q, %v, want finally", got.Text, err)
	}
}

func TestLogsNoSecrets(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	srv := anthropicfake.New(t)
	srv.Enqueue(anthropicfake.Error(401, "bad key "+anthropicfake.DefaultKey), anthropicfake.Text("hello"))
	c := newClient(t, srv.Config(), anthropic.WithLogger(zap.New(core)))
	req := model.Request{System: "PROMPT-SECRET", Messages: []model.Message{{Role: model.RoleUser, Content: "PROMPT-SECRET"}}}
	_, _ = c.Complete(t.Context(), req)
	if _, err := c.Complete(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if logs.Len() != 2 {
		t.Fatalf("got %d log entries, want 2 (one per call)", logs.Len())
	}
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		if strings.Contains(line, anthropicfake.DefaultKey) || strings.Contains(line, "PROMPT-SECRET") {
			t.Errorf("log entry shows a secret or the prompt: %s", line)
		}
	}
}
