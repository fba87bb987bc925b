package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentwork/agentwork/model"
)

// ErrMaxSteps is returned by Loop when the model still asks for tool calls
// after the step budget is spent.
var ErrMaxSteps = errors.New("tools: model still calling tools after max_steps")

// Result is what Loop produced.
type Result struct {
	// Text is the model's final answer.
	Text string
	// Calls are all tool calls the model made, in order, with their outcome.
	Calls []Call
	// Usage sums all model calls of the loop.
	Usage model.Usage
	// Model is the model name the provider reported last.
	Model string
	// StopReason and Truncated are those of the last reply, whose text is
	// Text (see model.Reply).
	StopReason string
	Truncated  bool
	// Steps counts model calls.
	Steps int
	// Messages is the whole conversation, for debugging and run records.
	Messages []model.Message
}

// Call is one executed tool call.
type Call struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Result    string `json:"result,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Loop calls p with req, runs every tool call in each reply through reg and
// feeds the results back, until a reply has no tool calls or maxSteps model
// calls were made (ErrMaxSteps; the result so far is returned with it).
// A tool error (unknown tool, arguments that are not a JSON object, a handler
// error) goes back to the model as a tool result marked as an error; only
// provider errors and ctx end the loop early. maxSteps <= 0 means 8.
func Loop(ctx context.Context, p model.Provider, reg *Registry, req model.Request, maxSteps int) (Result, error) {
	if maxSteps <= 0 {
		maxSteps = 8
	}
	var res Result
	msgs := append([]model.Message(nil), req.Messages...)
	for res.Steps < maxSteps {
		req.Messages = msgs
		reply, err := p.Complete(ctx, req)
		res.Steps++
		if err != nil {
			res.Messages = msgs
			return res, err
		}
		res.Usage = res.Usage.Add(reply.Usage)
		if reply.Model != "" {
			res.Model = reply.Model
		}
		res.Text, res.StopReason, res.Truncated = reply.Text, reply.StopReason, reply.Truncated
		// Give every call an id before it enters the history: the tool result
		// must answer the same id the assistant turn carries.
		for i := range reply.ToolCalls {
			if reply.ToolCalls[i].ID == "" {
				reply.ToolCalls[i].ID = fmt.Sprintf("call_%d_%d", res.Steps, i)
			}
		}
		msgs = append(msgs, model.Message{Role: model.RoleAssistant, Content: reply.Text, ToolCalls: reply.ToolCalls})
		if len(reply.ToolCalls) == 0 {
			res.Messages = msgs
			return res, nil
		}
		for _, tc := range reply.ToolCalls {
			call := runCall(ctx, reg, tc)
			res.Calls = append(res.Calls, call)
			content, isErr := call.Result, call.Error != ""
			if isErr {
				content = "error: " + call.Error
			}
			msgs = append(msgs, model.Message{Role: model.RoleTool, ToolCallID: tc.ID, ToolName: tc.Name, Content: content, IsError: isErr})
		}
		if err := ctx.Err(); err != nil {
			res.Messages = msgs
			return res, err
		}
	}
	res.Messages = msgs
	return res, ErrMaxSteps
}

func runCall(ctx context.Context, reg *Registry, tc model.ToolCall) (c Call) {
	c = Call{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments}
	spec, ok := reg.Lookup(tc.Name)
	if !ok {
		c.Error = fmt.Sprintf("unknown tool %q; available: %s", tc.Name, strings.Join(reg.Names(), ", "))
		return c
	}
	args := strings.TrimSpace(tc.Arguments)
	if args == "" {
		args = "{}"
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &obj); err != nil || obj == nil {
		c.Error = fmt.Sprintf("arguments are not a JSON object (%v); send a JSON object matching the tool's schema", errOr(err, "null"))
		return c
	}
	defer func() {
		if r := recover(); r != nil {
			c.Error = fmt.Sprintf("tool %s failed: %v", tc.Name, r)
		}
	}()
	out, err := spec.Handler(ctx, json.RawMessage(args))
	if err != nil {
		c.Error = err.Error()
		return c
	}
	c.Result = out
	return c
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}
