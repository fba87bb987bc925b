// Package openaifake is a scripted fake of the OpenAI Chat Completions API
// for tests: an httptest server that answers POST /v1/chat/completions with a
// queue of responses, records every request, and rejects requests the real
// API rejects (missing key, missing model, tool results that answer no call,
// tool calls left unanswered) with the API's own error shapes.
//
//	srv := openaifake.New(t)
//	srv.Enqueue(
//		openaifake.RateLimited(2*time.Second),
//		openaifake.ToolCalls(model.ToolCall{Name: "notify_user", Arguments: `{"text":"disk full"}`}),
//		openaifake.Text("Done."),
//	)
//	p, _ := openai.New(srv.Config())
//
// A request that finds the queue empty fails the test.
package openaifake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/internal/fakeserver"
)

// DefaultKey is the API key a new Server expects; see SetKey.
const DefaultKey = "sk-openaifake-0123456789"

// DefaultModel is the model name Config returns.
const DefaultModel = "gpt-fake"

// Response is one scripted answer. The zero Response is a 200 with an empty
// assistant message.
type Response struct {
	// Reply is the assistant turn sent with 200: Text as content (null when
	// empty), ToolCalls as tool_calls, Usage as usage, Model as model
	// (default: the requested model), StopReason as finish_reason (default
	// "tool_calls" if there are calls, else "stop").
	Reply model.Reply
	// ArgumentsAsObject sends tool call arguments as JSON objects rather than
	// strings, as some Ollama and vLLM versions do.
	ArgumentsAsObject bool
	// OmitIDs sends tool calls whose ID is empty without an id (as some
	// local servers do) instead of giving them a generated one.
	OmitIDs bool
	// Status, if 4xx or 5xx, makes this an error reply with OpenAI's error
	// body {"error":{"message","type","param","code"}}.
	Status int
	// Message, Type and Code fill the error body; Type and Code default by
	// status (e.g. 401: invalid_request_error / invalid_api_key).
	Message, Type, Code string
	// Header is added to the reply, e.g. Retry-After.
	Header http.Header
	// Body, if set, is sent verbatim (with Status, default 200) instead.
	Body string
	// Hang answers nothing until the client gives up (or the test ends).
	Hang bool
	// Disconnect closes the connection without answering.
	Disconnect bool
	// Check, if set, inspects the request; an error fails the test and is
	// answered with a 400 carrying it.
	Check func(Request) error
}

// Text is a plain text reply.
func Text(s string) Response { return Response{Reply: model.Reply{Text: s}} }

// ToolCalls is a reply that asks for calls. Calls without an ID get one.
func ToolCalls(calls ...model.ToolCall) Response {
	return Response{Reply: model.Reply{ToolCalls: calls}}
}

// Error is an error reply with OpenAI's error body.
func Error(status int, message string) Response {
	return Response{Status: status, Message: message}
}

// RateLimited is a 429 with a Retry-After header of after (whole seconds,
// rounded up).
func RateLimited(after time.Duration) Response {
	r := Error(http.StatusTooManyRequests, "Rate limit reached for requests. Please try again later.")
	r.Header = http.Header{"Retry-After": {strconv.Itoa(int(math.Ceil(after.Seconds())))}}
	return r
}

// Request is one request the server received.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
	// Top-level fields of the body.
	Model               string
	MaxTokens           int
	MaxCompletionTokens int
	Temperature         *float64
	Stream              bool
	// Conversation is the body in model form: leading system messages make
	// System, tool results get ToolName from the call they answer.
	Conversation model.Request
}

// Server is the fake. Its methods are safe for concurrent use.
type Server struct {
	// URL is the API root to use as model.base_url (ends in /v1).
	URL string

	fs *fakeserver.Server[Request, Response]
}

// New starts a fake that expects DefaultKey. It is closed when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{}
	s.fs = fakeserver.New[Request, Response](t, "openaifake", DefaultKey, http.HandlerFunc(s.serve))
	s.URL = s.fs.URL + "/v1"
	return s
}

// SetKey sets the API key the server expects as "Authorization: Bearer";
// "" accepts any request, as local servers do.
func (s *Server) SetKey(key string) { s.fs.SetKey(key) }

// Config returns a model config for this server: provider openai, base_url
// URL, model DefaultModel and the expected key.
func (s *Server) Config() model.Config {
	return model.Config{Provider: "openai", BaseURL: s.URL, Model: DefaultModel, APIKey: s.fs.Key()}
}

// Enqueue appends responses; each request takes the next one.
func (s *Server) Enqueue(rs ...Response) { s.fs.Enqueue(rs...) }

// Pending returns how many queued responses were not used yet.
func (s *Server) Pending() int { return s.fs.Pending() }

// Requests returns the requests received so far, in arrival order.
func (s *Server) Requests() []Request { return s.fs.Requests() }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	req := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: fakeserver.Body(w, r)}
	var wire chatRequest
	jsonErr := json.Unmarshal(req.Body, &wire)
	if jsonErr == nil {
		req.Model, req.MaxTokens, req.MaxCompletionTokens = wire.Model, wire.MaxTokens, wire.MaxCompletionTokens
		req.Temperature, req.Stream = wire.Temperature, wire.Stream
		req.Conversation = wire.conversation()
	}

	n, key := s.fs.Record(req)

	w.Header().Set("x-request-id", fmt.Sprintf("req_fake%d", n))
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		writeError(w, http.StatusNotFound, fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path), "invalid_request_error", "")
		return
	}
	if key != "" {
		switch auth := r.Header.Get("Authorization"); {
		case auth == "":
			writeError(w, http.StatusUnauthorized, "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", "invalid_request_error", "")
			return
		case auth != "Bearer "+key:
			writeError(w, http.StatusUnauthorized, "Incorrect API key provided: "+mask(strings.TrimPrefix(auth, "Bearer "))+". You can find your API key at https://platform.openai.com/account/api-keys.", "invalid_request_error", "invalid_api_key")
			return
		}
	}
	if jsonErr != nil {
		writeError(w, http.StatusBadRequest, "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)", "invalid_request_error", "")
		return
	}
	if msg := wire.validate(); msg != "" {
		writeError(w, http.StatusBadRequest, msg, "invalid_request_error", "")
		return
	}

	resp, ok := s.fs.Next(n)
	if !ok {
		writeError(w, http.StatusInternalServerError, "openaifake: no response queued", "server_error", "")
		return
	}

	if resp.Check != nil {
		if err := resp.Check(req); err != nil {
			s.fs.Fail(n, err)
			writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "")
			return
		}
	}
	s.respond(w, r, n, wire.Model, resp)
}

func (s *Server) respond(w http.ResponseWriter, r *http.Request, n int, reqModel string, resp Response) {
	raw := fakeserver.Raw{Hang: resp.Hang, Disconnect: resp.Disconnect, Header: resp.Header, Body: resp.Body, Status: resp.Status}
	if s.fs.Respond(w, r, raw) {
		return
	}
	switch {
	case resp.Status >= 400:
		typ, code := resp.Type, resp.Code
		if typ == "" {
			typ, code = defaultType(resp.Status, code)
		}
		writeError(w, resp.Status, resp.Message, typ, code)
	default:
		fakeserver.WriteJSON(w, http.StatusOK, completion(n, reqModel, resp))
	}
}

func completion(n int, reqModel string, resp Response) map[string]any {
	rep := resp.Reply
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	if rep.Text != "" {
		msg["content"] = rep.Text
	}
	if len(rep.ToolCalls) > 0 {
		calls := make([]map[string]any, 0, len(rep.ToolCalls))
		for i, tc := range rep.ToolCalls {
			var args any = tc.Arguments
			if resp.ArgumentsAsObject && json.Valid([]byte(tc.Arguments)) {
				args = json.RawMessage(tc.Arguments)
			}
			call := map[string]any{"type": "function", "function": map[string]any{"name": tc.Name, "arguments": args}}
			switch {
			case tc.ID != "":
				call["id"] = tc.ID
			case !resp.OmitIDs:
				call["id"] = fmt.Sprintf("call_fake%d_%d", n, i)
			}
			calls = append(calls, call)
		}
		msg["tool_calls"] = calls
	}
	finish := rep.StopReason
	if finish == "" {
		finish = "stop"
		if len(rep.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	m := rep.Model
	if m == "" {
		m = reqModel
	}
	return map[string]any{
		"id":                 fmt.Sprintf("chatcmpl-fake%d", n),
		"object":             "chat.completion",
		"created":            time.Now().Unix(),
		"model":              m,
		"system_fingerprint": "fp_fake",
		"choices": []any{map[string]any{
			"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish,
		}},
		"usage": map[string]any{
			"prompt_tokens":     rep.Usage.InputTokens,
			"completion_tokens": rep.Usage.OutputTokens,
			"total_tokens":      rep.Usage.InputTokens + rep.Usage.OutputTokens,
		},
	}
}

func defaultType(status int, code string) (string, string) {
	switch {
	case status == http.StatusUnauthorized && code == "":
		return "invalid_request_error", "invalid_api_key"
	case status == http.StatusNotFound && code == "":
		return "invalid_request_error", "model_not_found"
	case status == http.StatusTooManyRequests:
		if code == "" {
			code = "rate_limit_exceeded"
		}
		return "requests", code
	case status >= 500:
		return "server_error", code
	}
	return "invalid_request_error", code
}

func writeError(w http.ResponseWriter, status int, message, typ, code string) {
	var c any
	if code != "" {
		c = code
	}
	fakeserver.WriteJSON(w, status, map[string]any{"error": map[string]any{"message": message, "type": typ, "param": nil, "code": c}})
}

// mask shows a key the way OpenAI does in its 401 message.
func mask(k string) string {
	if len(k) <= 8 {
		return "***"
	}
	return k[:3] + strings.Repeat("*", 8) + k[len(k)-4:]
}

// The request as the fake reads it.
type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	Tools               []chatTool    `json:"tools"`
	MaxTokens           int           `json:"max_tokens"`
	MaxCompletionTokens int           `json:"max_completion_tokens"`
	Temperature         *float64      `json:"temperature"`
	Stream              bool          `json:"stream"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []chatToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// validate returns the message of the 400 the real API would send, or "".
func (r chatRequest) validate() string {
	if r.Model == "" {
		return "you must provide a model parameter"
	}
	if len(r.Messages) == 0 {
		return "[] is too short - 'messages'"
	}
	if r.Stream {
		return "openaifake: stream=true is not supported"
	}
	for i, t := range r.Tools {
		if t.Type != "function" {
			return fmt.Sprintf("Invalid value: '%s'. Supported values are: 'function'. (tools[%d].type)", t.Type, i)
		}
		if !toolNameRE.MatchString(t.Function.Name) {
			return fmt.Sprintf("Invalid 'tools[%d].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", i)
		}
		if p := bytes.TrimSpace(t.Function.Parameters); len(p) > 0 && p[0] != '{' {
			return fmt.Sprintf("Invalid schema for function '%s': schema must be a JSON Schema of 'type: \"object\"'.", t.Function.Name)
		}
	}
	var open []string // tool calls of the last assistant turn not yet answered
	for i, m := range r.Messages {
		if m.Role != "tool" && len(open) > 0 {
			return "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: " + strings.Join(open, ", ")
		}
		content := bytes.TrimSpace(m.Content)
		isNull := len(content) == 0 || string(content) == "null"
		switch m.Role {
		case "system", "developer", "user":
			if isNull {
				return fmt.Sprintf("Invalid value for 'messages[%d].content': expected a string, got null.", i)
			}
		case "assistant":
			if isNull && len(m.ToolCalls) == 0 {
				return fmt.Sprintf("Invalid value for 'messages[%d].content': expected a string, got null.", i)
			}
			for j, tc := range m.ToolCalls {
				if tc.ID == "" {
					return fmt.Sprintf("Missing required parameter: 'messages[%d].tool_calls[%d].id'.", i, j)
				}
				if tc.Type != "function" {
					return fmt.Sprintf("Missing required parameter: 'messages[%d].tool_calls[%d].type'.", i, j)
				}
				if a := bytes.TrimSpace(tc.Function.Arguments); len(a) == 0 || a[0] != '"' {
					return fmt.Sprintf("Invalid type for 'messages[%d].tool_calls[%d].function.arguments': expected a string.", i, j)
				}
				open = append(open, tc.ID)
			}
		case "tool":
			k := indexOf(open, m.ToolCallID)
			if k < 0 {
				return "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
			}
			open = append(open[:k], open[k+1:]...)
		default:
			return fmt.Sprintf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'. (messages[%d].role)", m.Role, i)
		}
	}
	if len(open) > 0 {
		return "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: " + strings.Join(open, ", ")
	}
	return ""
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// conversation decodes the request into model form.
func (r chatRequest) conversation() model.Request {
	var out model.Request
	names := map[string]string{} // tool call id -> tool name
	leading := true
	var system []string
	for _, m := range r.Messages {
		text := contentText(m.Content)
		if leading && (m.Role == "system" || m.Role == "developer") {
			system = append(system, text)
			continue
		}
		leading = false
		msg := model.Message{Role: model.Role(m.Role), Content: text}
		switch m.Role {
		case "assistant":
			for _, tc := range m.ToolCalls {
				var args string
				if err := json.Unmarshal(tc.Function.Arguments, &args); err != nil {
					args = string(tc.Function.Arguments)
				}
				msg.ToolCalls = append(msg.ToolCalls, model.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
				names[tc.ID] = tc.Function.Name
			}
		case "tool":
			msg.ToolCallID = m.ToolCallID
			msg.ToolName = names[m.ToolCallID]
		}
		out.Messages = append(out.Messages, msg)
	}
	out.System = strings.Join(system, "\n\n")
	for _, t := range r.Tools {
		out.Tools = append(out.Tools, model.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return out
}

func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return ""
}
