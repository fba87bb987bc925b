// Package model defines the interface between the agentwork runner and a
// language model: a provider takes a conversation and the tools in scope and
// returns one reply, which may ask for tool calls. The tool loop that runs
// those calls and feeds results back lives in package tools.
//
// Providers are small hand-written HTTP clients (see the openai and anthropic
// sub-packages) or the deterministic script provider used offline and in tests.
package model

import (
	"context"
	"encoding/json"
)

// Role is who said a message.
type Role string

// The roles a conversation uses.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one turn of a conversation.
type Message struct {
	Role Role `json:"role"`
	// Content is the text of the turn. For RoleTool it is the tool's result.
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls an assistant turn asked for.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID ties a RoleTool result to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// ToolName is the name of the tool whose result a RoleTool message holds.
	ToolName string `json:"tool_name,omitempty"`
	// IsError marks a RoleTool result that reports a failure.
	IsError bool `json:"is_error,omitempty"`
}

// ToolCall is one call a model asked for.
type ToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Arguments is the raw argument text the model produced. It is normally a
	// JSON object but is kept verbatim: a model may return broken JSON, and the
	// tool loop turns that into a tool error the model sees.
	Arguments string `json:"arguments"`
}

// Tool describes a tool offered to the model.
type Tool struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Parameters is the JSON Schema of the tool's argument object.
	Parameters json.RawMessage `json:"parameters"`
}

// Request is one call to a model.
type Request struct {
	// System is the system prompt; empty means none.
	System   string    `json:"system,omitempty"`
	Messages []Message `json:"messages"`
	Tools    []Tool    `json:"tools,omitempty"`
	// Meta carries routing facts (source, name) that a provider may use to pick
	// a behaviour, as the script provider does. HTTP providers never send it.
	Meta map[string]string `json:"meta,omitempty"`
}

// Usage counts tokens.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	// CachedInputTokens is the part of InputTokens the provider read from
	// its prompt cache (OpenAI's prompt_tokens_details.cached_tokens,
	// Anthropic's cache_read_input_tokens), where it reports it.
	CachedInputTokens int `json:"cached_input_tokens,omitempty"`
}

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{InputTokens: u.InputTokens + o.InputTokens, OutputTokens: u.OutputTokens + o.OutputTokens,
		CachedInputTokens: u.CachedInputTokens + o.CachedInputTokens}
}

// Reply is one answer of a model.
type Reply struct {
	Text      string     `json:"text"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	Usage     Usage      `json:"usage"`
	// Model is the model that answered, as the server named it.
	Model string `json:"model,omitempty"`
	// StopReason is the provider's own finish/stop reason, for diagnostics only:
	// callers run tool calls whenever ToolCalls is non-empty, whatever it says.
	StopReason string `json:"stop_reason,omitempty"`
	// Truncated reports that the reply was cut short by the token limit
	// (OpenAI's finish_reason "length", Anthropic's stop_reason
	// "max_tokens"): its text is incomplete.
	Truncated bool `json:"truncated,omitempty"`
}

// Provider calls a model.
//
// Complete blocks until the model answered, ctx is done, or the call failed.
// It makes exactly one attempt: retries are the runner's job (it retries
// transient errors through JetStream redelivery, not by sleeping in a call).
// Errors should be *Error so the runner can classify them; other errors are
// treated as transient, and a ctx deadline as ClassTimeout. When ctx is
// cancelled the returned error wraps ctx.Err().
// Every returned ToolCall has a non-empty ID, unique within the reply.
// Implementations must be safe for concurrent use.
type Provider interface {
	Complete(ctx context.Context, req Request) (Reply, error)
}

// Namer is an optional capability: a provider that can name itself and its
// configured model for events and metrics.
type Namer interface {
	Name() string
}
