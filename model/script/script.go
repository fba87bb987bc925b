// Package script is a deterministic model provider for offline runs and
// tests. Rules from the config decide each reply: the first rule whose match
// fits the request's source, name and prompt answers with its text and/or
// tool calls (notify_user has a shorthand), after an optional delay, or with
// an injected error for its first N calls.
//
// After a reply with tool calls, the next call of the same conversation (the
// last message is a tool result) gets the rule's text and no calls, so the
// tool loop ends as with a real model.
package script

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/agentwork/agentwork/model"
)

// Config is the `model.script` section.
type Config struct {
	// Rules are tried in order; the first that matches answers.
	Rules []Rule `yaml:"rules" json:"rules,omitempty"`
	// Default answers when no rule matches. Default: the text "ok".
	Default *Reply `yaml:"default" json:"default,omitempty"`
}

// Rule maps requests to a reply.
type Rule struct {
	Match Match `yaml:"match" json:"match,omitempty"`
	Reply `yaml:",inline" json:",inline"`
}

// Match selects requests. Empty fields match anything.
type Match struct {
	Source string `yaml:"source" json:"source,omitempty"`
	Name   string `yaml:"name" json:"name,omitempty"`
	// Prompt is a regular expression searched in the last user message.
	Prompt string `yaml:"prompt" json:"prompt,omitempty"`
}

// Reply is what a rule answers.
type Reply struct {
	// Text is the reply text. "{{prompt}}" is replaced by the user prompt.
	Text string `yaml:"text" json:"text,omitempty"`
	// Notify, if set, makes the reply call notify_user with this text.
	Notify string `yaml:"notify" json:"notify,omitempty"`
	// ToolCalls are further calls, arguments given as YAML/JSON values.
	ToolCalls []Call `yaml:"tool_calls" json:"tool_calls,omitempty"`
	// Delay before answering (honours ctx).
	Delay time.Duration `yaml:"delay" json:"delay,omitempty"`
	// Error, if set, fails calls with this error.
	Error *Fault `yaml:"error" json:"error,omitempty"`
}

// Call is a scripted tool call.
type Call struct {
	Name string `yaml:"name" json:"name"`
	// Arguments are marshalled to JSON; RawArguments, if set, is sent verbatim
	// (to script broken JSON).
	Arguments    map[string]any `yaml:"arguments" json:"arguments,omitempty"`
	RawArguments string         `yaml:"raw_arguments" json:"raw_arguments,omitempty"`
}

// Fault is an injected error.
type Fault struct {
	// Class is transient, timeout or permanent.
	Class   string `yaml:"class" json:"class" jsonschema:"enum=transient,enum=timeout,enum=permanent"`
	Message string `yaml:"message" json:"message,omitempty"`
	// Times is how many calls of the rule fail before it answers normally;
	// 0 means every call fails.
	Times int `yaml:"times" json:"times,omitempty"`
	// Status and RetryAfter are reported like an HTTP provider's.
	Status     int           `yaml:"status" json:"status,omitempty"`
	RetryAfter time.Duration `yaml:"retry_after" json:"retry_after,omitempty"`
}

// Validate checks the rules.
func (c Config) Validate() error {
	var errs []error
	for i, r := range c.Rules {
		if r.Match.Prompt != "" {
			if _, err := regexp.Compile(r.Match.Prompt); err != nil {
				errs = append(errs, fmt.Errorf("model.script.rules[%d].match.prompt: %w", i, err))
			}
		}
		if err := r.Reply.validate(); err != nil {
			errs = append(errs, fmt.Errorf("model.script.rules[%d]: %w", i, err))
		}
	}
	if c.Default != nil {
		if err := c.Default.validate(); err != nil {
			errs = append(errs, fmt.Errorf("model.script.default: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (r Reply) validate() error {
	if r.Error != nil {
		switch model.Class(r.Error.Class) {
		case model.ClassTransient, model.ClassTimeout, model.ClassPermanent:
		default:
			return fmt.Errorf("error.class: %q: want transient, timeout or permanent", r.Error.Class)
		}
	}
	for _, c := range r.ToolCalls {
		if c.Name == "" {
			return errors.New("tool_calls: name is required")
		}
	}
	if r.Delay < 0 {
		return errors.New("delay: negative")
	}
	return nil
}

// Provider is the script provider.
type Provider struct {
	rules []rule
	def   Reply
	mu    sync.Mutex
	calls map[int]int // rule index -> calls so far (for Fault.Times)
}

var (
	_ model.Provider = (*Provider)(nil)
	_ model.Namer    = (*Provider)(nil)
)

type rule struct {
	Rule
	re *regexp.Regexp
}

// New returns a provider for cfg.
func New(cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Provider{def: Reply{Text: "ok"}, calls: map[int]int{}}
	if cfg.Default != nil {
		p.def = *cfg.Default
	}
	for _, r := range cfg.Rules {
		rr := rule{Rule: r}
		if r.Match.Prompt != "" {
			rr.re = regexp.MustCompile(r.Match.Prompt)
		}
		p.rules = append(p.rules, rr)
	}
	return p, nil
}

// Name implements model.Namer.
func (p *Provider) Name() string { return "script" }

// Complete implements model.Provider.
func (p *Provider) Complete(ctx context.Context, req model.Request) (model.Reply, error) {
	prompt := lastUser(req.Messages)
	idx, reply := p.pick(req.Meta, prompt)
	if reply.Delay > 0 {
		t := time.NewTimer(reply.Delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return model.Reply{}, ctx.Err()
		case <-t.C:
		}
	} else if err := ctx.Err(); err != nil {
		return model.Reply{}, err
	}
	if f := reply.Error; f != nil {
		p.mu.Lock()
		p.calls[idx]++
		n := p.calls[idx]
		p.mu.Unlock()
		if f.Times == 0 || n <= f.Times {
			msg := f.Message
			if msg == "" {
				msg = "scripted " + f.Class + " error"
			}
			return model.Reply{}, &model.Error{Class: model.Class(f.Class), Status: f.Status, RetryAfter: f.RetryAfter, Message: msg}
		}
	}
	out := model.Reply{Model: "script", Text: strings.ReplaceAll(reply.Text, "{{prompt}}", prompt), StopReason: "stop",
		Usage: model.Usage{InputTokens: len(strings.Fields(prompt)), OutputTokens: len(strings.Fields(reply.Text))}}
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == model.RoleTool {
		return out, nil // the tool round trip is over: answer with text only
	}
	if reply.Notify != "" {
		args, _ := json.Marshal(map[string]string{"text": reply.Notify})
		out.ToolCalls = append(out.ToolCalls, model.ToolCall{ID: "call_notify", Name: "notify_user", Arguments: string(args)})
	}
	for i, c := range reply.ToolCalls {
		args := c.RawArguments
		if args == "" {
			b, err := json.Marshal(orEmpty(c.Arguments))
			if err != nil {
				return model.Reply{}, &model.Error{Class: model.ClassPermanent, Message: "script: tool arguments: " + err.Error()}
			}
			args = string(b)
		}
		out.ToolCalls = append(out.ToolCalls, model.ToolCall{ID: fmt.Sprintf("call_%d", i), Name: c.Name, Arguments: args})
	}
	if len(out.ToolCalls) > 0 {
		out.StopReason = "tool_calls"
	}
	return out, nil
}

func (p *Provider) pick(meta map[string]string, prompt string) (int, Reply) {
	for i, r := range p.rules {
		if r.Match.Source != "" && r.Match.Source != meta["source"] {
			continue
		}
		if r.Match.Name != "" && r.Match.Name != meta["name"] {
			continue
		}
		if r.re != nil && !r.re.MatchString(prompt) {
			continue
		}
		return i, r.Reply
	}
	return -1, p.def
}

func lastUser(msgs []model.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == model.RoleUser {
			return msgs[i].Content
		}
	}
	return ""
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}
