package tools_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

func TestScopeAllows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		scope tools.Scope
		name  string
		want  bool
	}{
		{tools.DefaultScope, "notify_user", true},
		{tools.DefaultScope, "fs__read_text_file", false},
		{tools.Scope{"fs__*"}, "fs__read_text_file", true},
		{tools.Scope{"fs__*"}, "fsx__read", false},
		{tools.Scope{"fs__*"}, "notify_user", false},
		{tools.Scope{"*__read_*"}, "github__read_file", true},
		{tools.Scope{"*__read_*"}, "github__write_file", false},
		{tools.Scope{"*"}, "anything__at_all", true},
		{tools.Scope{"fs__read_?ext_file"}, "fs__read_text_file", true},
		{tools.Scope{"fs__[lr]*"}, "fs__list_directory", true},
		{tools.Scope{"fs__[lr]*"}, "fs__write_file", false},
		{tools.Scope{"notify_user", "fs__list_directory"}, "fs__list_directory", true},
		{tools.Scope{"fs__[unclosed"}, "fs__[unclosed", false},
		// Built-in names and servers' names (<server>__<tool>) are two
		// namespaces: a glob without "__" matches only built-ins, one with
		// "__" only servers' tools, and "*" both.
		{tools.Scope{"memory_*"}, "memory_read", true},
		{tools.Scope{"memory_*"}, "memory__delete_entities", false},
		{tools.Scope{"schedule_*"}, "schedule__create", false},
		{tools.Scope{"http_*"}, "http__get", false},
		{tools.Scope{"http_*"}, "http_fetch", true},
		{tools.Scope{"exec*"}, "exec__run", false},
		{tools.Scope{"f*"}, "fs__read_text_file", false},
		{tools.Scope{"*_read_*"}, "github__read_file", false},
		{tools.Scope{"*__*"}, "memory_read", false},
		{tools.Scope{"*__*"}, "memory__read_graph", true},
		{tools.Scope{"*"}, "memory_read", true},
		{tools.Scope{"**"}, "fs__read_text_file", true},
		{tools.Scope{}, "notify_user", false},
		{nil, "notify_user", false},
	}
	for _, tt := range tests {
		if got := tt.scope.Allows(tt.name); got != tt.want {
			t.Errorf("Scope%q.Allows(%q) = %v, want %v", []string(tt.scope), tt.name, got, tt.want)
		}
	}
}

func TestScopeCheck(t *testing.T) {
	t.Parallel()
	if err := (tools.Scope{"notify_user", "fs__*", "*__read_?", "[a-c]*", "*"}).Check("runner.tools"); err != nil {
		t.Errorf("Check(good globs) = %v, want nil", err)
	}
	tests := []struct {
		glob, want string
	}{
		{"", "runner.tools[0]: empty"},
		{"fs/read", `runner.tools[0]: "fs/read": want a tool name or a glob`},
		{"fs__[read", `runner.tools[0]: "fs__[read" is not a well-formed glob`},
		{"fs.read", `runner.tools[0]: "fs.read": want a tool name or a glob`},
	}
	for _, tt := range tests {
		err := tools.Scope{tt.glob}.Check("runner.tools")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Check(%q) = %v, want an error containing %q", tt.glob, err, tt.want)
		}
	}
}

// counted is a registry of notify_user and three tools that count their
// calls: "echo" returns its text ("boom" fails, "slow" times out), "rm"
// is the tool a scope leaves out.
type counted struct {
	echo, rm atomic.Int32
	all      *tools.Registry
}

func newCounted(t *testing.T) *counted {
	t.Helper()
	c := &counted{}
	echo := tools.Func("echo", "echo the text", func(_ context.Context, a struct {
		Text string `json:"text"`
	}) (string, error) {
		c.echo.Add(1)
		switch a.Text {
		case "boom":
			return "", errors.New("echo refuses boom")
		case "slow":
			return "", fmt.Errorf("no answer within 1s: %w", tools.ErrTimeout)
		case "secret":
			return "", fmt.Errorf("echo does not say secret: %w", tools.ErrRefused)
		}
		return a.Text, nil
	})
	rm := tools.Func("rm", "remove everything", func(context.Context, struct{}) (string, error) {
		c.rm.Add(1)
		return "removed", nil
	})
	reg, err := tools.NewRegistry(tools.Notify(), echo, rm)
	if err != nil {
		t.Fatal(err)
	}
	c.all = reg
	return c
}

// scoped returns the registry of the tools of c in scope.
func (c *counted) scoped(t *testing.T, s tools.Scope) *tools.Registry {
	t.Helper()
	reg, err := tools.NewRegistry(s.Select(c.all.Specs())...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func calls(cs ...model.ToolCall) model.Reply { return model.Reply{ToolCalls: cs} }

func echoCall(id, text string) model.ToolCall {
	return model.ToolCall{ID: id, Name: "echo", Arguments: fmt.Sprintf(`{"text":%q}`, text)}
}

// A call to a tool outside the run's scope, or to one that does not
// exist, runs nothing and comes back to the model as an error it can read.
func TestLoopRefusesCallsOutsideTheScope(t *testing.T) {
	t.Parallel()
	c := newCounted(t)
	reg := c.scoped(t, tools.Scope{"notify_user", "ech?"})
	p := &scripted{replies: []model.Reply{calls(
		model.ToolCall{ID: "a", Name: "rm", Arguments: `{}`},
		model.ToolCall{ID: "b", Name: "invented_tool", Arguments: `{}`},
		echoCall("c", "hi"),
	)}}
	res, err := tools.Loop(t.Context(), p, reg, model.Request{}, tools.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if n := c.rm.Load(); n != 0 {
		t.Errorf("rm ran %d times, want 0: it is outside the scope", n)
	}
	if len(res.Calls) != 3 {
		t.Fatalf("calls = %+v, want 3", res.Calls)
	}
	for i, name := range []string{"rm", "invented_tool"} {
		got := res.Calls[i]
		if got.Outcome != tools.OutcomeRefused || !strings.Contains(got.Error, fmt.Sprintf("%q is not a tool of this run", name)) || got.DurationMS != 0 {
			t.Errorf("call of %s = %+v, want refused, saying it is not a tool of this run", name, got)
		}
		if !strings.Contains(got.Error, "echo, notify_user") {
			t.Errorf("refusal %q does not list the run's tools", got.Error)
		}
	}
	if got := res.Calls[2]; got.Outcome != tools.OutcomeOK || got.Result != "hi" {
		t.Errorf("echo call = %+v, want ok", got)
	}
	msgs := p.seen[1].Messages
	for _, m := range msgs[len(msgs)-3 : len(msgs)-1] {
		if m.Role != model.RoleTool || !m.IsError || !strings.Contains(m.Content, "is not a tool of this run") {
			t.Errorf("the model got %+v, want a tool error that says the name is not a tool of this run", m)
		}
	}
}

// After MaxCalls calls, further calls are refused without running, except
// notify_user, which has its own bound and stays usable to report.
func TestLoopMaxCalls(t *testing.T) {
	t.Parallel()
	c := newCounted(t)
	p := &scripted{replies: []model.Reply{
		calls(echoCall("a", "1"), echoCall("b", "2")),
		calls(echoCall("c", "3"), model.ToolCall{ID: "d", Name: "notify_user", Arguments: `{"text":"done"}`}),
	}}
	res, err := tools.Loop(t.Context(), p, c.all, model.Request{}, tools.Limits{MaxCalls: 2})
	if err != nil {
		t.Fatal(err)
	}
	if n := c.echo.Load(); n != 2 {
		t.Errorf("echo ran %d times, want 2 (max_tool_calls)", n)
	}
	var outcomes []string
	for _, call := range res.Calls {
		outcomes = append(outcomes, call.Outcome)
	}
	if got, want := strings.Join(outcomes, ","), "ok,ok,refused,ok"; got != want {
		t.Fatalf("outcomes = %s, want %s", got, want)
	}
	if e := res.Calls[2].Error; !strings.Contains(e, "made its 2 tool calls (runner.max_tool_calls)") || !strings.Contains(e, "notify_user still works") {
		t.Errorf("refusal = %q, want it to name the limit and that notify_user still works", e)
	}
}

// Each call says how it went, how long it took and how big it was.
func TestLoopRecordsEveryCall(t *testing.T) {
	t.Parallel()
	c := newCounted(t)
	p := &scripted{replies: []model.Reply{calls(
		echoCall("a", "hello"),
		echoCall("b", "boom"),
		echoCall("c", "slow"),
		echoCall("d", "secret"),
		model.ToolCall{ID: "e", Name: "echo", Arguments: `[1]`},
	)}}
	res, err := tools.Loop(t.Context(), p, c.all, model.Request{}, tools.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		outcome     string
		resultBytes int
	}{
		{tools.OutcomeOK, len("hello")},
		{tools.OutcomeError, len("echo refuses boom")},
		{tools.OutcomeTimeout, len("no answer within 1s: tools: call timed out")},
		{tools.OutcomeRefused, len("echo does not say secret: tools: call refused")},
		{tools.OutcomeRefused, len(res.Calls[4].Error)},
	}
	for i, w := range want {
		got := res.Calls[i]
		if got.Outcome != w.outcome || got.ResultBytes != w.resultBytes || got.ArgumentsBytes != len(got.Arguments) || got.DurationMS < 0 {
			t.Errorf("call %d = %+v, want outcome %s, result_bytes %d, arguments_bytes %d", i, got, w.outcome, w.resultBytes, len(got.Arguments))
		}
	}
	if n := c.echo.Load(); n != 4 {
		t.Errorf("echo ran %d times, want 4 (arguments that are not an object run nothing)", n)
	}
}

func TestCallRecord(t *testing.T) {
	t.Parallel()
	const key = "sk-live-0123456789abcdef"
	c := tools.Call{
		Name: "fs__read_text_file", Arguments: `{"path":"/srv/a.txt"}`,
		Result:         "token=" + key + "\n" + strings.Repeat("é", 600),
		ArgumentsBytes: 22, ResultBytes: 1230,
	}
	got := c.Record(64, []string{key})
	if strings.Contains(got.Result, key) || !strings.HasPrefix(got.Result, "token=[redacted]") {
		t.Errorf("Record: result %q still holds the secret", got.Result)
	}
	if !strings.HasSuffix(got.Result, "…[cut: 1217 bytes]") || len(got.Result) > 64+len("…[cut: 1217 bytes]") {
		t.Errorf("Record: result %q (%d bytes), want at most 64 bytes and a note of the length", got.Result, len(got.Result))
	}
	if !strings.HasPrefix(got.Result, "token=") || !utf8Valid(got.Result) {
		t.Errorf("Record: result %q cut inside a character", got.Result)
	}
	if got.Arguments != c.Arguments || got.ArgumentsBytes != 22 || got.ResultBytes != 1230 {
		t.Errorf("Record = %+v, want short arguments whole and the sizes of the whole call", got)
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// A record's cut leaves no part of a secret at any offset: it cuts the
// whole redacted text (secret.Cut).
func TestCallRecordCutLeavesNoPartOfASecret(t *testing.T) {
	t.Parallel()
	const key = "sk-live-0123456789abcdef"
	for off := 64 - len(key); off <= 64; off++ {
		c := tools.Call{Name: "x", Result: strings.Repeat("x", off) + key + strings.Repeat("y", 100)}
		got := c.Record(64, []string{key}).Result
		for i := 0; i+secret.Min <= len(key); i++ {
			if w := key[i : i+secret.Min]; strings.Contains(got, w) {
				t.Errorf("Record(the secret at %d) = %q: holds %q of it", off, got, w)
				break
			}
		}
	}
}
