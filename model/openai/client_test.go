package openai_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/openai"
	"github.com/agentwork/agentwork/model/openai/openaifake"
)

func newClient(t *testing.T, cfg model.Config, opts ...openai.Option) *openai.Client {
	t.Helper()
	c, err := openai.New(cfg, opts...)
	if err != nil {
		t.Fatalf("openai.New() error = %v", err)
	}
	return c
}

func TestNew(t *testing.T) {
	t.Parallel()
	temp := 0.2
	tests := []struct {
		name    string
		cfg     model.Config
		opts    []openai.Option
		wantErr string // substring; "" means success
	}{
		{"minimal", model.Config{Model: "gpt-4o-mini"}, nil, ""},
		{"provider openai", model.Config{Provider: "openai", Model: "m", BaseURL: "http://127.0.0.1:11434/v1", Temperature: &temp}, nil, ""},
		{"wrong provider", model.Config{Provider: "anthropic", Model: "m"}, nil, `model.provider is "anthropic"`},
		{"no model", model.Config{Provider: "openai"}, nil, "model.model: required"},
		{"bad base_url", model.Config{Model: "m", BaseURL: "localhost:11434"}, nil, "model.base_url"},
		{"key with trailing newline", model.Config{Model: "m", APIKey: "sk-abc\n"}, nil, ""},
		{"key with inner newline", model.Config{Model: "m", APIKey: "sk-a\nbc"}, nil, "model.api_key: contains a control character"},
		{"bad header name", model.Config{Model: "m", Headers: map[string]string{"X Bad": "v"}}, nil, `model.headers: "X Bad"`},
		{"bad header value", model.Config{Model: "m", Headers: map[string]string{"X-Token": "secret\r\nX-Evil: 1"}}, nil, `the value of "X-Token"`},
		{"nil http client", model.Config{Model: "m"}, []openai.Option{openai.WithHTTPClient(nil)}, "WithHTTPClient(nil)"},
		{"bad max tokens field", model.Config{Model: "m"}, []openai.Option{openai.WithMaxTokensField("max_output_tokens")}, `"max_output_tokens"`},
		{"max tokens field", model.Config{Model: "m"}, []openai.Option{openai.WithMaxTokensField(openai.MaxTokens)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := openai.New(tt.cfg, tt.opts...)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("New() error = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("New() error = %v, want one containing %q", err, tt.wantErr)
			case tt.wantErr != "" && strings.Contains(err.Error(), "secret"):
				t.Errorf("New() error = %v quotes a header value", err)
			case err == nil && c.Name() != "openai/"+tt.cfg.Model:
				t.Errorf("Name() = %q, want %q", c.Name(), "openai/"+tt.cfg.Model)
			}
		})
	}
}

func TestRequestWireFormat(t *testing.T) {
	t.Parallel()
	srv := openaifake.New(t)
	srv.Enqueue(openaifake.Text("ok"))
	cfg := srv.Config()
	temp := 0.3
	cfg.MaxTokens, cfg.Temperature = 256, &temp
	cfg.Headers = map[string]string{"OpenAI-Organization": "org-1"}
	c := newClient(t, cfg)

	_, err := c.Complete(t.Context(), model.Request{
		System: "be brief",
		Messages: []model.Message{
			{Role: model.RoleUser, Content: "check"},
			{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{
				{ID: "call_1", Name: "notify_user", Arguments: `{"text":"hi"}`},
				{ID: "call_2", Name: "notify_user", Arguments: `{"text": broken`},
			}},
			{Role: model.RoleTool, ToolCallID: "call_1", ToolName: "notify_user", Content: "acknowledged"},
			{Role: model.RoleTool, ToolCallID: "call_2", ToolName: "notify_user", Content: "arguments are not a JSON object", IsError: true},
		},
		Tools: []model.Tool{
			{Name: "notify_user", Description: "Send a message.", Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
			{Name: "now", Description: "Current time."},
		},
		Meta: map[string]string{"source": "heartbeat"},
	})
	if err != nil {
		t.Fatalf("Complete() error = %v", err)
	}
	r := srv.Requests()[0]
	for k, want := range map[string]string{
		"Authorization":       "Bearer " + openaifake.DefaultKey,
		"Content-Type":        "application/json",
		"Openai-Organization": "org-1",
	} {
		if got := r.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	want := `{"model":"gpt-fake","messages":[` +
		`{"role":"system","content":"be brief"},` +
		`{"role":"user","content":"check"},` +
		`{"role":"assistant","content":null,"tool_calls":[` +
		`{"id":"call_1","type":"function","function":{"name":"notify_user","arguments":"{\"text\":\"hi\"}"}},` +
		`{"id":"call_2","type":"function","function":{"name":"notify_user","arguments":"{}"}}]},` +
		`{"role":"tool","content":"acknowledged","tool_call_id":"call_1"},` +
		`{"role":"tool","content":"error: arguments are not a JSON object","tool_call_id":"call_2"}],` +
		`"tools":[{"type":"function","function":{"name":"notify_user","description":"Send a message.","parameters":{"type":"object","properties":{"text":{"type":"string"}}}}},` +
		`{"type":"function","function":{"name":"now","description":"Current time.","parameters":{"type":"object","properties":{}}}}],` +
		`"max_tokens":256,"temperature":0.3,"stream":false}`
	if string(r.Body) != want {
		t.Errorf("request body =\n%s\nwant\n%s", r.Body, want)
	}
}

func TestNoKeyNoAuthorization(t *testing.T) {
	t.Parallel()
	srv := openaifake.New(t)
	srv.SetKey("") // like Ollama
	srv.Enqueue(openaifake.Text("ok"))
	cfg := srv.Config()
	if _, err := newClient(t, cfg).Complete(t.Context(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}); err != nil {
		t.Fatalf("Complete() error = %v", err)
	}
	if got := srv.Requests()[0].Header.Get("Authorization"); got != "" {
		t.Errorf("Authorization = %q, want none without model.api_key", got)
	}
}

func TestMaxTokensFieldOption(t *testing.T) {
	t.Parallel()
	srv := openaifake.New(t)
	srv.Enqueue(openaifake.Text("ok"))
	c := newClient(t, srv.Config(), openai.WithMaxTokensField(openai.MaxCompletionTokens))
	if _, err := c.Complete(t.Context(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}); err != nil {
		t.Fatalf("Complete() error = %v", err)
	}
	r := srv.Requests()[0]
	if r.MaxCompletionTokens != model.DefaultMaxTokens || r.MaxTokens != 0 {
		t.Errorf("max_completion_tokens, max_tokens = %d, %d, want %d, 0", r.MaxCompletionTokens, r.MaxTokens, model.DefaultMaxTokens)
	}
}

// TestReplyQuirks covers reply shapes compatible servers really send.
func TestReplyQuirks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		resp openaifake.Response
		want model.Reply
	}{
		{
			name: "arguments as object (Ollama, vLLM)",
			resp: openaifake.Response{ArgumentsAsObject: true, Reply: model.Reply{ToolCalls: []model.ToolCall{{ID: "c1", Name: "notify_user", Arguments: `{"text": "hi", "n": [1, 2]}`}}}},
			want: model.Reply{ToolCalls: []model.ToolCall{{ID: "c1", Name: "notify_user", Arguments: `{"text":"hi","n":[1,2]}`}}, StopReason: "tool_calls"},
		},
		{
			name: "broken arguments kept verbatim",
			resp: openaifake.ToolCalls(model.ToolCall{ID: "c1", Name: "notify_user", Arguments: `{"text": "unterminated`}),
			want: model.Reply{ToolCalls: []model.ToolCall{{ID: "c1", Name: "notify_user", Arguments: `{"text": "unterminated`}}, StopReason: "tool_calls"},
		},
		{
			name: "content as parts",
			resp: openaifake.Response{Body: `{"model":"m","choices":[{"message":{"role":"assistant","content":[{"type":"text","text":"Hello, "},{"type":"image_url"},{"type":"text","text":"world"}]},"finish_reason":"stop"}]}`},
			want: model.Reply{Text: "Hello, world", Model: "m", StopReason: "stop"},
		},
		{
			name: "legacy function_call",
			resp: openaifake.Response{Body: `{"model":"m","choices":[{"message":{"role":"assistant","content":null,"function_call":{"name":"notify_user","arguments":"{\"text\":\"x\"}"}},"finish_reason":"function_call"}]}`},
			want: model.Reply{ToolCalls: []model.ToolCall{{Name: "notify_user", Arguments: `{"text":"x"}`}}, Model: "m", StopReason: "function_call"},
		},
		{
			name: "refusal",
			resp: openaifake.Response{Body: `{"model":"m","choices":[{"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}`},
			want: model.Reply{Text: "I can't help with that.", Model: "m", StopReason: "stop"},
		},
		{
			name: "cached prompt tokens",
			resp: openaifake.Response{Body: `{"model":"m","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1200,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":1024}}}`},
			want: model.Reply{Text: "hi", Model: "m", StopReason: "stop", Usage: model.Usage{InputTokens: 1200, OutputTokens: 3, CachedInputTokens: 1024}},
		},
		{
			name: "no usage, no model, null finish_reason",
			resp: openaifake.Response{Body: `{"choices":[{"message":{"content":"hi"},"finish_reason":null}]}`},
			want: model.Reply{Text: "hi", Model: openaifake.DefaultModel},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := openaifake.New(t)
			srv.Enqueue(tt.resp)
			got, err := newClient(t, srv.Config()).Complete(t.Context(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
			if err != nil {
				t.Fatalf("Complete() error = %v", err)
			}
			if tt.want.Model == "" {
				tt.want.Model = openaifake.DefaultModel
			}
			if len(got.ToolCalls) == 1 && len(tt.want.ToolCalls) == 1 && tt.want.ToolCalls[0].ID == "" {
				if !strings.HasPrefix(got.ToolCalls[0].ID, "call_") {
					t.Errorf("generated id = %q, want call_...", got.ToolCalls[0].ID)
				}
				tt.want.ToolCalls[0].ID = got.ToolCalls[0].ID
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("Complete() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRetryAfterHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"seconds", http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{"fractional seconds", http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond},
		{"ms wins", http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"3"}}, 250 * time.Millisecond},
		{"http date", http.Header{"Retry-After": {time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)}}, 90 * time.Second},
		{"past date", http.Header{"Retry-After": {"Mon, 01 Jan 2001 00:00:00 GMT"}}, 0},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0},
		{"negative", http.Header{"Retry-After": {"-5"}}, 0},
		{"huge", http.Header{"Retry-After": {"1e300"}}, 24 * time.Hour},
		{"ratelimit tokens exhausted", http.Header{
			"X-Ratelimit-Remaining-Requests": {"10"}, "X-Ratelimit-Reset-Requests": {"1s"},
			"X-Ratelimit-Remaining-Tokens": {"0"}, "X-Ratelimit-Reset-Tokens": {"6m0s"},
		}, 6 * time.Minute},
		{"ratelimit nothing exhausted", http.Header{"X-Ratelimit-Remaining-Requests": {"1"}, "X-Ratelimit-Reset-Requests": {"20ms"}}, 0},
		{"none", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := openaifake.New(t)
			srv.Enqueue(openaifake.Response{Status: 429, Message: "slow down", Header: tt.header})
			_, err := newClient(t, srv.Config()).Complete(t.Context(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
			got := model.RetryAfter(err)
			// An HTTP date has one-second resolution and the clock moves on.
			if d := got - tt.want; d < -time.Second || d > 0 && tt.name == "http date" || d != 0 && tt.name != "http date" {
				t.Errorf("RetryAfter(%v) = %s, want %s", tt.header, got, tt.want)
			}
			if model.Classify(err) != model.ClassTransient {
				t.Errorf("Classify() = %s, want transient", model.Classify(err))
			}
		})
	}
}

func TestErrorClassification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		resp    openaifake.Response
		class   model.Class
		status  int
		mention []string
	}{
		{"ollama model not found", openaifake.Response{Status: 404, Body: `{"error":{"message":"model \"llama9\" not found, try pulling it first","type":"api_error","param":null,"code":null}}`},
			model.ClassPermanent, 404, []string{`404 Not Found from http://127.0.0.1:`, `check model.model ("gpt-fake") and model.base_url`, `model \"llama9\" not found`}},
		{"plain text 404", openaifake.Response{Status: 404, Body: "404 page not found\n"},
			model.ClassPermanent, 404, []string{"404 page not found"}},
		{"vllm error shape", openaifake.Response{Status: 400, Body: `{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","param":null,"code":400}`},
			model.ClassPermanent, 400, []string{"maximum context length"}},
		{"fastapi detail", openaifake.Response{Status: 422, Body: `{"detail":"Field required: messages"}`},
			model.ClassPermanent, 422, []string{"Field required"}},
		{"openai 401 code", openaifake.Error(401, "Incorrect API key provided: sk-ab***cd."),
			model.ClassPermanent, 401, []string{"check model.api_key", "invalid_api_key: Incorrect API key provided"}},
		{"408", openaifake.Error(408, "timeout"), model.ClassTransient, 408, nil},
		{"429 insufficient_quota is permanent", openaifake.Response{Status: 429, Code: "insufficient_quota", Message: "You exceeded your current quota, please check your plan and billing details."},
			model.ClassPermanent, 429, []string{"no credit or quota left", "insufficient_quota: You exceeded your current quota"}},
		{"402 from a gateway", openaifake.Error(402, "Insufficient credits"), model.ClassPermanent, 402, []string{"check its plan and billing"}},
		{"x-should-retry false on 500", openaifake.Response{Status: 500, Message: "bad", Header: http.Header{"X-Should-Retry": {"false"}}}, model.ClassPermanent, 500, nil},
		{"x-should-retry true on 400", openaifake.Response{Status: 400, Message: "retry me", Header: http.Header{"X-Should-Retry": {"true"}}}, model.ClassTransient, 400, nil},
		{"error object in a 200", openaifake.Response{Body: `{"error":{"message":"Provider returned error","code":502}}`},
			model.ClassTransient, 502, []string{"Provider returned error"}},
		{"error object in a 200 without code", openaifake.Response{Body: `{"error":{"message":"upstream broke"}}`},
			model.ClassPermanent, 200, []string{"upstream broke"}},
		{"redirect to a page", openaifake.Response{Status: 300, Body: "moved"}, model.ClassPermanent, 300, nil},
		{"empty choices is the server producing nothing", openaifake.Response{Body: `{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":0}}`},
			model.ClassTransient, 200, []string{"no choices", "produced nothing"}},
		{"no choices field at all is another API", openaifake.Response{Body: `{"result":"hi"}`},
			model.ClassPermanent, 200, []string{"not a chat completion", "model.base_url"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := openaifake.New(t)
			srv.Enqueue(tt.resp)
			_, err := newClient(t, srv.Config()).Complete(t.Context(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
			var me *model.Error
			if !errors.As(err, &me) {
				t.Fatalf("Complete() error = %v, want *model.Error", err)
			}
			if me.Class != tt.class || me.Status != tt.status {
				t.Errorf("Complete() error = {%s %d}, want {%s %d}: %v", me.Class, me.Status, tt.class, tt.status, err)
			}
			for _, s := range tt.mention {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestTransportErrors(t *testing.T) {
	t.Parallel()
	// A port nobody listens on: connection refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/v1"
	_ = ln.Close()

	// A server that resets connections mid-reply.
	reset := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(200)
		_, _ = w.Write([]byte(`{"choices":[`))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(reset.Close)

	tests := []struct {
		name    string
		baseURL string
		class   model.Class
		mention string
	}{
		{"connection refused", refused, model.ClassTransient, "cannot reach " + refused + " (is the server running? check model.base_url)"},
		{"body cut short", reset.URL + "/v1", model.ClassTransient, "was cut short"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, model.Config{BaseURL: tt.baseURL, Model: "m", APIKey: "sk-transport-secret"})
			_, err := c.Complete(t.Context(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
			if model.Classify(err) != tt.class {
				t.Errorf("Complete() error = %v (class %s), want class %s", err, model.Classify(err), tt.class)
			}
			if err == nil || !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("Complete() error = %v, want one mentioning %q", err, tt.mention)
			}
			if err != nil && strings.Contains(err.Error(), "sk-transport-secret") {
				t.Errorf("error leaks the key: %v", err)
			}
		})
	}
}

// TestSecretsInURLAndHeaders: credentials in base_url and extra header
// values are not shown either.
func TestSecretsInURLAndHeaders(t *testing.T) {
	t.Parallel()
	srv := openaifake.New(t)
	srv.SetKey("")
	srv.Enqueue(openaifake.Error(403, "token tok-hdr-SECRET-42 may not use this model"))
	cfg := srv.Config()
	cfg.BaseURL = strings.Replace(srv.URL, "http://", "http://user:pa55word@", 1) + "?token=q-SECRET"
	cfg.Headers = map[string]string{"X-Proxy-Token": "Bearer tok-hdr-SECRET-42"}
	_, err := newClient(t, cfg).Complete(t.Context(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
	if err == nil {
		t.Fatal("Complete() error = nil, want 403")
	}
	for _, secret := range []string{"pa55word", "q-SECRET", "tok-hdr-SECRET-42"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q shows %q", err, secret)
		}
	}
}

// TestRetryIsTheCallersJob: each call is one attempt; a 429, a 429, then a
// success take three calls.
func TestRetryIsTheCallersJob(t *testing.T) {
	t.Parallel()
	srv := openaifake.New(t)
	srv.Enqueue(openaifake.RateLimited(2*time.Second), openaifake.RateLimited(time.Second), openaifake.Text("finally"))
	c := newClient(t, srv.Config())
	req := model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}
	for i, want := range []time.Duration{2 * time.Second, time.Second} {
		_, err := c.Complete(t.Context(), req)
		if !model.Retryable(err) || model.RetryAfter(err) != want {
			t.Fatalf("call %d: error = %v (retry after %s), want retryable after %s", i+1, err, model.RetryAfter(err), want)
		}
		if n := len(srv.Requests()); n != i+1 {
			t.Fatalf("after call %d the server saw %d requests, want %d", i+1, n, i+1)
		}
	}
	got, err := c.Complete(t.Context(), req)
	if err != nil || got.Text != "finally" {
		t.Fatalf("call 3 = %q, %v, want finally", got.Text, err)
	}
}

func TestLogsNoSecrets(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	srv := openaifake.New(t)
	srv.Enqueue(openaifake.Error(401, "bad key "+openaifake.DefaultKey), openaifake.Text("hello"))
	c := newClient(t, srv.Config(), openai.WithLogger(zap.New(core)))
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
		if strings.Contains(line, openaifake.DefaultKey) || strings.Contains(line, "PROMPT-SECRET") {
			t.Errorf("log entry shows a secret or the prompt: %s", line)
		}
		if e.Level != zapcore.DebugLevel {
			t.Errorf("log level = %s, want debug", e.Level)
		}
	}
}
