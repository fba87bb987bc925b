package anthropic

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentwork/agentwork/model"
)

// The request body, as documented for POST /v1/messages.
type messagesRequest struct {
	Model       string    `json:"model"`
	MaxTokens   int       `json:"max_tokens"`
	System      string    `json:"system,omitempty"`
	Messages    []message `json:"messages"`
	Tools       []tool    `json:"tools,omitempty"`
	Temperature *float64  `json:"temperature,omitempty"`
}

type message struct {
	Role    string  `json:"role"`
	Content []block `json:"content"`
}

// block is a text, tool_use or tool_result content block.
type block struct {
	Type string `json:"type"`
	// text
	Text string `json:"text,omitempty"`
	// tool_use
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// tool_result
	ToolUseID string `json:"tool_use_id,omitempty"`
	Content   string `json:"content,omitempty"`
	IsError   bool   `json:"is_error,omitempty"`
}

type tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// emptySchema is sent for a tool without a parameter schema.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

func encodeRequest(cfg model.Config, req model.Request) ([]byte, error) {
	body := messagesRequest{Model: cfg.Model, MaxTokens: cfg.MaxTokens, Temperature: cfg.Temperature}
	var system []string
	if req.System != "" {
		system = append(system, req.System)
	}
	for i, m := range req.Messages {
		var role string
		var blocks []block
		switch m.Role {
		case model.RoleSystem:
			if m.Content != "" {
				system = append(system, m.Content)
			}
			continue
		case model.RoleUser:
			role = "user"
			if m.Content != "" { // the API rejects empty text blocks
				blocks = append(blocks, block{Type: "text", Text: m.Content})
			}
		case model.RoleAssistant:
			role = "assistant"
			if m.Content != "" {
				blocks = append(blocks, block{Type: "text", Text: m.Content})
			}
			for _, tc := range m.ToolCalls {
				blocks = append(blocks, block{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: sendableInput(tc.Arguments)})
			}
		case model.RoleTool:
			role = "user"
			blocks = append(blocks, block{Type: "tool_result", ToolUseID: m.ToolCallID, Content: m.Content, IsError: m.IsError})
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
		if len(blocks) == 0 {
			continue
		}
		// Roles alternate: consecutive turns of one role (tool results after
		// a parallel call, or a user note after them) become one message.
		if n := len(body.Messages); n > 0 && body.Messages[n-1].Role == role {
			body.Messages[n-1].Content = append(body.Messages[n-1].Content, blocks...)
			continue
		}
		body.Messages = append(body.Messages, message{Role: role, Content: blocks})
	}
	// tool_result blocks must open their user turn.
	for _, m := range body.Messages {
		if m.Role == "user" {
			slices.SortStableFunc(m.Content, func(a, b block) int {
				return cmp.Compare(rank(a), rank(b))
			})
		}
	}
	body.System = strings.Join(system, "\n\n")
	for _, t := range req.Tools {
		schema := t.Parameters
		if len(bytes.TrimSpace(schema)) == 0 {
			schema = emptySchema
		} else if !json.Valid(schema) {
			return nil, fmt.Errorf("tool %s: parameters are not valid JSON", t.Name)
		}
		body.Tools = append(body.Tools, tool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	return json.Marshal(body)
}

func rank(b block) int {
	if b.Type == "tool_result" {
		return 0
	}
	return 1
}

// sendableInput returns the arguments of an earlier tool call as a tool_use
// input, which must be a JSON object. Anything else (broken JSON the tool
// loop already answered with a tool error) is sent as {}.
func sendableInput(args string) json.RawMessage {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &obj); err != nil || obj == nil {
		return json.RawMessage(`{}`)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(args)); err != nil {
		return json.RawMessage(`{}`)
	}
	return b.Bytes()
}

// The reply body. Fields are read leniently: see decodeReply.
type messagesResponse struct {
	Type       string          `json:"type"`
	Model      string          `json:"model"`
	Content    json.RawMessage `json:"content"`
	StopReason string          `json:"stop_reason"`
	Usage      *usage          `json:"usage"`
	Error      *struct {
		Type string `json:"type"`
	} `json:"error"`
}

type replyBlock struct {
	Type  string          `json:"type"`
	Text  string          `json:"text"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

type usage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// errMalformed marks a reply body that is not a usable message.
var errMalformed = errors.New("malformed reply")

// serverError is an error body ({"type":"error",...}) sent with a 2xx.
type serverError struct{ typ string }

func (e *serverError) Error() string { return "server reported an error: " + e.typ }

// decodeReply reads a Messages API reply. It never panics: it returns a
// Reply, an error wrapping errMalformed, or a *serverError.
func decodeReply(body []byte) (model.Reply, error) {
	var r messagesResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return model.Reply{}, fmt.Errorf("%w: %w", errMalformed, err)
	}
	if r.Type == "error" {
		typ := ""
		if r.Error != nil {
			typ = r.Error.Type
		}
		return model.Reply{}, &serverError{typ: typ}
	}
	if c := bytes.TrimSpace(r.Content); len(c) == 0 || string(c) == "null" {
		return model.Reply{}, fmt.Errorf("%w: no content", errMalformed)
	}
	var blocks []replyBlock
	if err := json.Unmarshal(r.Content, &blocks); err != nil {
		return model.Reply{}, fmt.Errorf("%w: content: %w", errMalformed, err)
	}
	reply := model.Reply{Model: r.Model, StopReason: r.StopReason, Truncated: r.StopReason == "max_tokens" || r.StopReason == "model_context_window_exceeded"}
	var text strings.Builder
	for i, b := range blocks {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			args, err := inputText(b.Input)
			if err != nil {
				return model.Reply{}, fmt.Errorf("%w: content[%d].input: %w", errMalformed, i, err)
			}
			id := b.ID
			if id == "" {
				id = "toolu_" + rand.Text()
			}
			reply.ToolCalls = append(reply.ToolCalls, model.ToolCall{ID: id, Name: b.Name, Arguments: args})
		}
		// thinking, redacted_thinking and server tool blocks are not ours.
	}
	reply.Text = text.String()
	if r.Usage != nil {
		// input_tokens counts only what the cache did not cover.
		reply.Usage = model.Usage{
			InputTokens:  r.Usage.InputTokens + r.Usage.CacheCreationInputTokens + r.Usage.CacheReadInputTokens,
			OutputTokens: r.Usage.OutputTokens,
			// Cache writes cost more than plain input, reads far less:
			// only the reads are "cached".
			CachedInputTokens: r.Usage.CacheReadInputTokens,
		}
	}
	return reply, nil
}

// inputText returns a tool_use input as argument text: an object re-encoded
// compactly, a JSON string (sent by some compatible servers) verbatim.
func inputText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "{}", nil
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
