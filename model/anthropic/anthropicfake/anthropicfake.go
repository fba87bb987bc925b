// Package anthropicfake is a scripted fake of the Anthropic Messages API for
// tests: an httptest server that answers POST /v1/messages with a queue of
// responses, records every request, and rejects requests the real API
// rejects (missing x-api-key, anthropic-version or max_tokens, a system
// role in messages, empty text blocks, tool_result blocks that answer no
// tool_use of the previous turn, tool_use left unanswered) with the API's own
// error shape {"type":"error","error":{"type","message"}}.
//
//	srv := anthropicfake.New(t)
//	srv.Enqueue(
//		anthropicfake.Overloaded(),
//		anthropicfake.ToolCalls(model.ToolCall{Name: "notify_user", Arguments: `{"text":"disk full"}`}),
//		anthropicfake.Text("Done."),
//	)
//	p, _ := anthropic.New(srv.Config())
//
// A request that finds the queue empty fails the test.
package anthropicfake

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
const DefaultKey = "sk-ant-fake-0123456789"

// DefaultModel is the model name Config returns.
const DefaultModel = "claude-fake"

// Response is one scripted answer. The zero Response is a 200 with an empty
// content list.
type Response struct {
	// Reply is the message sent with 200: Text as a text block, ToolCalls as
	// tool_use blocks (arguments must be JSON objects, or empty), Usage as
	// usage, Model as model (default: the requested model), StopReason as
	// stop_reason (default "tool_use" if there are calls, else "end_turn").
	Reply model.Reply
	// OmitIDs sends tool calls whose ID is empty without an id instead of
	// giving them a generated one.
	OmitIDs bool
	// Status, if 4xx or 5xx, makes this an error reply.
	Status int
	// Message and Type fill the error body; Type defaults by status (e.g.
	// 429: rate_limit_error, 529: overloaded_error).
	Message, Type string
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

// ToolCalls is a reply with tool_use blocks. Calls without an ID get one.
func ToolCalls(calls ...model.ToolCall) Response {
	return Response{Reply: model.Reply{ToolCalls: calls}}
}

// Error is an error reply with Anthropic's error body.
func Error(status int, message string) Response {
	return Response{Status: status, Message: message}
}

// RateLimited is a 429 rate_limit_error with a Retry-After header of after
// (whole seconds, rounded up).
func RateLimited(after time.Duration) Response {
	r := Error(http.StatusTooManyRequests, "Number of request tokens has exceeded your per-minute rate limit.")
	r.Header = http.Header{"Retry-After": {strconv.Itoa(int(math.Ceil(after.Seconds())))}}
	return r
}

// Overloaded is a 529 overloaded_error.
func Overloaded() Response { return Error(529, "Overloaded") }

// Request is one request the server received.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
	// Top-level fields of the body.
	Model       string
	MaxTokens   int
	Temperature *float64
	Stream      bool
	// Conversation is the body in model form: system makes System; a user
	// turn becomes one RoleTool message per tool_result block (in order)
	// followed by one RoleUser message with its text, if any; tool results
	// get ToolName from the tool_use they answer.
	Conversation model.Request
}

// Server is the fake. Its methods are safe for concurrent use.
type Server struct {
	// URL is the API root to use as model.base_url (no /v1).
	URL string

	fs *fakeserver.Server[Request, Response]
}

// New starts a fake that expects DefaultKey. It is closed when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{}
	s.fs = fakeserver.New[Request, Response](t, "anthropicfake", DefaultKey, http.HandlerFunc(s.serve))
	s.URL = s.fs.URL
	return s
}

// SetKey sets the API key the server expects as x-api-key; "" accepts any
// request, as local servers do.
func (s *Server) SetKey(key string) { s.fs.SetKey(key) }

// Config returns a model config for this server: provider anthropic,
// base_url URL, model DefaultModel and the expected key.
func (s *Server) Config() model.Config {
	return model.Config{Provider: "anthropic", BaseURL: s.URL, Model: DefaultModel, APIKey: s.fs.Key()}
}

// Enqueue appends responses; each request takes the next one. It fails the
// test if a tool call's arguments are not a JSON object, which the real API
// cannot send.
func (s *Server) Enqueue(rs ...Response) {
	s.fs.T().Helper()
	for _, r := range rs {
		for _, tc := range r.Reply.ToolCalls {
			var obj map[string]json.RawMessage
			if strings.TrimSpace(tc.Arguments) != "" && (json.Unmarshal([]byte(tc.Arguments), &obj) != nil || obj == nil) {
				s.fs.T().Fatalf("anthropicfake: tool call %s: arguments %q are not a JSON object", tc.Name, tc.Arguments)
			}
		}
	}
	s.fs.Enqueue(rs...)
}

// Pending returns how many queued responses were not used yet.
func (s *Server) Pending() int { return s.fs.Pending() }

// Requests returns the requests received so far, in arrival order.
func (s *Server) Requests() []Request { return s.fs.Requests() }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	req := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: fakeserver.Body(w, r)}
	var wire messagesRequest
	jsonErr := json.Unmarshal(req.Body, &wire)
	if jsonErr == nil {
		req.Model, req.MaxTokens, req.Temperature, req.Stream = wire.Model, derefInt(wire.MaxTokens), wire.Temperature, wire.Stream
		req.Conversation = wire.conversation()
	}

	n, key := s.fs.Record(req)

	w.Header().Set("request-id", fmt.Sprintf("req_fake%d", n))
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		writeError(w, http.StatusNotFound, "not_found_error", "Not Found")
		return
	}
	if key != "" {
		switch got := r.Header.Get("x-api-key"); {
		case got == "":
			writeError(w, http.StatusUnauthorized, "authentication_error", "x-api-key header is required")
			return
		case got != key:
			writeError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
			return
		}
	}
	if r.Header.Get("anthropic-version") == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return
	}
	if jsonErr != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "There was an issue with your request body: invalid JSON")
		return
	}
	if msg := wire.validate(); msg != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", msg)
		return
	}

	resp, ok := s.fs.Next(n)
	if !ok {
		writeError(w, http.StatusInternalServerError, "api_error", "anthropicfake: no response queued")
		return
	}

	if resp.Check != nil {
		if err := resp.Check(req); err != nil {
			s.fs.Fail(n, err)
			writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
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
		typ := resp.Type
		if typ == "" {
			typ = defaultType(resp.Status)
		}
		writeError(w, resp.Status, typ, resp.Message)
	default:
		fakeserver.WriteJSON(w, http.StatusOK, messageBody(n, reqModel, resp))
	}
}

func messageBody(n int, reqModel string, resp Response) map[string]any {
	rep := resp.Reply
	content := []any{}
	if rep.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": rep.Text})
	}
	for i, tc := range rep.ToolCalls {
		input := json.RawMessage(`{}`)
		if strings.TrimSpace(tc.Arguments) != "" {
			input = json.RawMessage(tc.Arguments)
		}
		block := map[string]any{"type": "tool_use", "name": tc.Name, "input": input}
		switch {
		case tc.ID != "":
			block["id"] = tc.ID
		case !resp.OmitIDs:
			block["id"] = fmt.Sprintf("toolu_fake%d_%d", n, i)
		}
		content = append(content, block)
	}
	stop := rep.StopReason
	if stop == "" {
		stop = "end_turn"
		if len(rep.ToolCalls) > 0 {
			stop = "tool_use"
		}
	}
	m := rep.Model
	if m == "" {
		m = reqModel
	}
	return map[string]any{
		"id":            fmt.Sprintf("msg_fake%d", n),
		"type":          "message",
		"role":          "assistant",
		"model":         m,
		"content":       content,
		"stop_reason":   stop,
		"stop_sequence": nil,
		"usage": map[string]any{
			"input_tokens":                rep.Usage.InputTokens,
			"output_tokens":               rep.Usage.OutputTokens,
			"cache_creation_input_tokens": 0,
			"cache_read_input_tokens":     0,
		},
	}
}

func defaultType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func writeError(w http.ResponseWriter, status int, typ, message string) {
	fakeserver.WriteJSON(w, status, map[string]any{
		"type":       "error",
		"error":      map[string]any{"type": typ, "message": message},
		"request_id": w.Header().Get("request-id"),
	})
}

func derefInt(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// The request as the fake reads it.
type messagesRequest struct {
	Model       string          `json:"model"`
	MaxTokens   *int            `json:"max_tokens"`
	System      json.RawMessage `json:"system"`
	Messages    []wireMessage   `json:"messages"`
	Tools       []tool          `json:"tools"`
	Temperature *float64        `json:"temperature"`
	Stream      bool            `json:"stream"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type block struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

type tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

var (
	toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	toolIDRE   = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
)

// blocks reads message content: a string is one text block.
func (m wireMessage) blocks() ([]block, error) {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []block{{Type: "text", Text: &s}}, nil
	}
	var bs []block
	err := json.Unmarshal(m.Content, &bs)
	return bs, err
}

// validate returns the message of the 400 the real API would send, or "".
func (r messagesRequest) validate() string {
	switch {
	case r.Model == "":
		return "model: Field required"
	case r.MaxTokens == nil:
		return "max_tokens: Field required"
	case *r.MaxTokens < 1:
		return "max_tokens: Input should be greater than or equal to 1"
	case len(r.Messages) == 0:
		return "messages: at least one message is required"
	case r.Stream:
		return "anthropicfake: stream=true is not supported"
	case r.Temperature != nil && (*r.Temperature < 0 || *r.Temperature > 1):
		return "temperature: Input should be less than or equal to 1"
	}
	for i, t := range r.Tools {
		if !toolNameRE.MatchString(t.Name) {
			return fmt.Sprintf("tools.%d.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'", i)
		}
		if s := bytes.TrimSpace(t.InputSchema); len(s) == 0 || s[0] != '{' {
			return fmt.Sprintf("tools.%d.custom.input_schema: Field required", i)
		}
	}
	var open []string // tool_use ids of the previous assistant turn
	for i, m := range r.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return fmt.Sprintf("messages: Unexpected role %q. The Messages API accepts a top-level `system` parameter, not \"system\" as an input message role.", m.Role)
		}
		if i > 0 && r.Messages[i-1].Role == m.Role {
			return fmt.Sprintf("messages.%d: roles must alternate between \"user\" and \"assistant\"", i)
		}
		if i == 0 && m.Role != "user" {
			return "messages: first message must use the \"user\" role"
		}
		blocks, err := m.blocks()
		if err != nil {
			return fmt.Sprintf("messages.%d.content: Input should be a valid list", i)
		}
		if len(blocks) == 0 && !(m.Role == "assistant" && i == len(r.Messages)-1) {
			return fmt.Sprintf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
		}
		var answered []string
		seenOther := false
		for j, b := range blocks {
			switch b.Type {
			case "text":
				if b.Text == nil || *b.Text == "" {
					return fmt.Sprintf("messages.%d.content.%d.text: text content blocks must be non-empty", i, j)
				}
				seenOther = true
			case "tool_use":
				if m.Role != "assistant" {
					return fmt.Sprintf("messages.%d.content.%d: tool_use blocks are only allowed in assistant messages", i, j)
				}
				if !toolIDRE.MatchString(b.ID) {
					return fmt.Sprintf("messages.%d.content.%d.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'", i, j)
				}
				if in := bytes.TrimSpace(b.Input); len(in) == 0 || in[0] != '{' {
					return fmt.Sprintf("messages.%d.content.%d.tool_use.input: Input should be a valid dictionary", i, j)
				}
			case "tool_result":
				if m.Role != "user" {
					return fmt.Sprintf("messages.%d.content.%d: tool_result blocks are only allowed in user messages", i, j)
				}
				if seenOther {
					return fmt.Sprintf("messages.%d: `tool_result` blocks must come first in the user message, before any other content", i)
				}
				if indexOf(open, b.ToolUseID) < 0 {
					return fmt.Sprintf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID)
				}
				answered = append(answered, b.ToolUseID)
			default:
				seenOther = true
			}
		}
		if m.Role == "user" && len(open) > 0 {
			var missing []string
			for _, id := range open {
				if indexOf(answered, id) < 0 {
					missing = append(missing, id)
				}
			}
			if len(missing) > 0 {
				return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, strings.Join(missing, ", "))
			}
		}
		open = nil
		if m.Role == "assistant" {
			for _, b := range blocks {
				if b.Type == "tool_use" {
					open = append(open, b.ID)
				}
			}
		}
	}
	if len(open) > 0 {
		return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", len(r.Messages)-1, strings.Join(open, ", "))
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
func (r messagesRequest) conversation() model.Request {
	var out model.Request
	out.System = textOf(r.System)
	names := map[string]string{}
	for _, m := range r.Messages {
		blocks, _ := m.blocks()
		var text strings.Builder
		msg := model.Message{Role: model.Role(m.Role)}
		for _, b := range blocks {
			switch b.Type {
			case "text":
				if b.Text != nil {
					text.WriteString(*b.Text)
				}
			case "tool_use":
				var args bytes.Buffer
				if json.Compact(&args, b.Input) != nil {
					args.Reset()
					args.Write(b.Input)
				}
				msg.ToolCalls = append(msg.ToolCalls, model.ToolCall{ID: b.ID, Name: b.Name, Arguments: args.String()})
				names[b.ID] = b.Name
			case "tool_result":
				out.Messages = append(out.Messages, model.Message{Role: model.RoleTool, ToolCallID: b.ToolUseID,
					ToolName: names[b.ToolUseID], Content: textOf(b.Content), IsError: b.IsError})
			}
		}
		msg.Content = text.String()
		if msg.Content != "" || len(msg.ToolCalls) > 0 {
			out.Messages = append(out.Messages, msg)
		}
	}
	for _, t := range r.Tools {
		out.Tools = append(out.Tools, model.Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	return out
}

// textOf reads a string or a list of text blocks.
func textOf(raw json.RawMessage) string {
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
