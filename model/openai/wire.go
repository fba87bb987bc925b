package openai

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentwork/agentwork/model"
)

// The request body, as documented for POST /chat/completions.
type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	Tools               []chatTool    `json:"tools,omitempty"`
	MaxTokens           int           `json:"max_tokens,omitempty"`
	MaxCompletionTokens int           `json:"max_completion_tokens,omitempty"`
	Temperature         *float64      `json:"temperature,omitempty"`
	Stream              bool          `json:"stream"`
}

type chatMessage struct {
	Role string `json:"role"`
	// Content is null only for an assistant turn that has tool calls and no text.
	Content    *string        `json:"content"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatToolCall struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"`
	Function chatFunctionCall `json:"function"`
}

type chatFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatTool struct {
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// emptySchema is sent for a tool without a parameter schema.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

func encodeRequest(cfg model.Config, maxField string, req model.Request) ([]byte, error) {
	body := chatRequest{Model: cfg.Model, Temperature: cfg.Temperature}
	if maxField == MaxCompletionTokens {
		body.MaxCompletionTokens = cfg.MaxTokens
	} else {
		body.MaxTokens = cfg.MaxTokens
	}
	if req.System != "" {
		body.Messages = append(body.Messages, chatMessage{Role: "system", Content: ptr(req.System)})
	}
	for i, m := range req.Messages {
		switch m.Role {
		case model.RoleSystem, model.RoleUser:
			body.Messages = append(body.Messages, chatMessage{Role: string(m.Role), Content: ptr(m.Content)})
		case model.RoleAssistant:
			cm := chatMessage{Role: "assistant", Content: ptr(m.Content)}
			if m.Content == "" && len(m.ToolCalls) > 0 {
				cm.Content = nil
			}
			for _, tc := range m.ToolCalls {
				cm.ToolCalls = append(cm.ToolCalls, chatToolCall{ID: tc.ID, Type: "function",
					Function: chatFunctionCall{Name: tc.Name, Arguments: sendableArguments(tc.Arguments)}})
			}
			body.Messages = append(body.Messages, cm)
		case model.RoleTool:
			content := m.Content
			// The wire format has no error flag: say it in the text.
			if m.IsError && !strings.HasPrefix(strings.ToLower(content), "error") {
				content = "error: " + content
			}
			body.Messages = append(body.Messages, chatMessage{Role: "tool", Content: ptr(content), ToolCallID: m.ToolCallID})
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	for _, t := range req.Tools {
		params := t.Parameters
		if len(bytes.TrimSpace(params)) == 0 {
			params = emptySchema
		} else if !json.Valid(params) {
			return nil, fmt.Errorf("tool %s: parameters are not valid JSON", t.Name)
		}
		body.Tools = append(body.Tools, chatTool{Type: "function",
			Function: chatFunction{Name: t.Name, Description: t.Description, Parameters: params}})
	}
	return json.Marshal(body)
}

// sendableArguments returns the arguments of an earlier tool call as they are
// sent back in the conversation. Valid JSON goes verbatim. Broken JSON (which
// the tool loop already answered with a tool error) is replaced by "{}":
// several compatible servers (Ollama, vLLM) parse the arguments of past calls
// and reject the whole request with a 400 otherwise.
func sendableArguments(args string) string {
	if strings.TrimSpace(args) == "" || !json.Valid([]byte(args)) {
		return "{}"
	}
	return args
}

func ptr(s string) *string { return &s }

// The reply body. Fields are read leniently: see decodeReply.
type chatResponse struct {
	Model   string          `json:"model"`
	Choices []chatChoice    `json:"choices"`
	Usage   *chatUsage      `json:"usage"`
	Error   json.RawMessage `json:"error"`
}

type chatChoice struct {
	Message      *replyMessage `json:"message"`
	FinishReason string        `json:"finish_reason"`
}

type replyMessage struct {
	Content      json.RawMessage `json:"content"`
	Refusal      *string         `json:"refusal"`
	ToolCalls    []replyToolCall `json:"tool_calls"`
	FunctionCall *replyFunction  `json:"function_call"` // the deprecated single-call form
}

type replyToolCall struct {
	ID       string        `json:"id"`
	Function replyFunction `json:"function"`
}

type replyFunction struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// errMalformed marks a reply body that is not a usable chat completion.
var errMalformed = errors.New("malformed reply")

// errNoChoices marks a chat completion whose choices array is empty: the
// API is right, but the server produced nothing (a content filter, an
// overloaded or failing backend behind a gateway).
var errNoChoices = errors.New("chat completion with no choices")

// serverError is an error object in a 200 body (some gateways do that).
type serverError struct{ status int }

func (e *serverError) Error() string {
	return fmt.Sprintf("server reported an error (code %d)", e.status)
}

// decodeReply reads a chat completion body. It never panics: it returns a
// Reply, an error wrapping errMalformed, errNoChoices, or a *serverError.
func decodeReply(body []byte) (model.Reply, error) {
	var r chatResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return model.Reply{}, fmt.Errorf("%w: %w", errMalformed, err)
	}
	if len(r.Choices) == 0 {
		if e := bytes.TrimSpace(r.Error); len(e) > 0 && string(e) != "null" {
			var code struct {
				Code json.RawMessage `json:"code"`
			}
			_ = json.Unmarshal(e, &code)
			var status int
			_ = json.Unmarshal(code.Code, &status)
			return model.Reply{}, &serverError{status: status}
		}
		if r.Choices != nil {
			return model.Reply{}, errNoChoices
		}
		return model.Reply{}, fmt.Errorf("%w: no choices", errMalformed)
	}
	ch := r.Choices[0]
	if ch.Message == nil {
		return model.Reply{}, fmt.Errorf("%w: choices[0] has no message", errMalformed)
	}
	text, err := contentText(ch.Message.Content)
	if err != nil {
		return model.Reply{}, fmt.Errorf("%w: choices[0].message.content: %w", errMalformed, err)
	}
	if text == "" && ch.Message.Refusal != nil {
		text = *ch.Message.Refusal
	}
	reply := model.Reply{Text: text, Model: r.Model, StopReason: ch.FinishReason, Truncated: ch.FinishReason == "length"}
	for i, tc := range ch.Message.ToolCalls {
		args, err := argumentsText(tc.Function.Arguments)
		if err != nil {
			return model.Reply{}, fmt.Errorf("%w: tool_calls[%d].function.arguments: %w", errMalformed, i, err)
		}
		id := tc.ID
		if id == "" {
			id = newCallID()
		}
		reply.ToolCalls = append(reply.ToolCalls, model.ToolCall{ID: id, Name: tc.Function.Name, Arguments: args})
	}
	if len(reply.ToolCalls) == 0 && ch.Message.FunctionCall != nil && ch.Message.FunctionCall.Name != "" {
		args, err := argumentsText(ch.Message.FunctionCall.Arguments)
		if err != nil {
			return model.Reply{}, fmt.Errorf("%w: function_call.arguments: %w", errMalformed, err)
		}
		reply.ToolCalls = []model.ToolCall{{ID: newCallID(), Name: ch.Message.FunctionCall.Name, Arguments: args}}
	}
	if r.Usage != nil {
		reply.Usage = model.Usage{InputTokens: r.Usage.PromptTokens, OutputTokens: r.Usage.CompletionTokens}
		if d := r.Usage.PromptTokensDetails; d != nil {
			reply.Usage.CachedInputTokens = d.CachedTokens
		}
	}
	return reply, nil
}

// contentText reads message content: null, a string, or a list of parts of
// which the text parts are joined.
func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", err
		}
		var b strings.Builder
		for _, p := range parts {
			if p.Type == "text" || p.Type == "" {
				b.WriteString(p.Text)
			}
		}
		return b.String(), nil
	}
	return "", errors.New("want a string, null or a list of parts")
}

// argumentsText returns tool call arguments as text: a JSON string verbatim,
// any other JSON value (some Ollama and vLLM versions send an object)
// re-encoded compactly.
func argumentsText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return "", err
	}
	return b.String(), nil
}

func newCallID() string { return "call_" + rand.Text() }
