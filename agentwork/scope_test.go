package agentwork_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/builtin"
)

// toolModel calls, in its first reply, the tools its prompt names ("echo
// rm"), each with {}, and answers "done" once their results are back. It
// records the tools each request name was offered.
type toolModel struct {
	mu      sync.Mutex
	offered map[string][]string
}

func (m *toolModel) Complete(_ context.Context, req model.Request) (model.Reply, error) {
	var names []string
	for _, tl := range req.Tools {
		names = append(names, tl.Name)
	}
	m.mu.Lock()
	m.offered[req.Meta["name"]] = names
	m.mu.Unlock()
	last := req.Messages[len(req.Messages)-1]
	if last.Role != model.RoleUser {
		return model.Reply{Text: "done"}, nil
	}
	var calls []model.ToolCall
	for i, n := range strings.Fields(last.Content) {
		calls = append(calls, model.ToolCall{ID: fmt.Sprint(i), Name: n, Arguments: `{}`})
	}
	return model.Reply{ToolCalls: calls}, nil
}

func (m *toolModel) offeredTo(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.offered[name], ",")
}

// liveTools is a tools.Source whose tools change, as an MCP server's do.
type liveTools struct{ specs atomic.Pointer[[]tools.Spec] }

func (l *liveTools) Specs() []tools.Spec { return *l.specs.Load() }

func (l *liveTools) set(specs ...tools.Spec) { l.specs.Store(&specs) }

const fsSecret = "fs-token-0123456789"

// The scope of a run is its name's tools, else its source's, else
// runner.tools; the model is offered only those (and notify_user when the
// run delivers through it), a call to any other tool runs nothing, and
// runner.max_tool_calls bounds the calls. Every call is on the run's
// event, redacted of the secrets.
func TestRunToolScope(t *testing.T) {
	t.Parallel()
	var echoRuns, rmRuns, fsRuns atomic.Int32
	var echoedFor atomic.Value // the tools.RunInfo of the last echo call
	echo := tools.Func("echo", "echo", func(ctx context.Context, _ struct{}) (string, error) {
		echoRuns.Add(1)
		if ri, ok := tools.RunOf(ctx); ok {
			echoedFor.Store(ri)
		}
		return "echoed", nil
	})
	rm := tools.Func("rm", "remove everything", func(context.Context, struct{}) (string, error) { rmRuns.Add(1); return "removed", nil })
	fsRead := tools.Func("fs__read", "read a file", func(context.Context, struct{}) (string, error) {
		fsRuns.Add(1)
		return "token: " + fsSecret, nil
	})
	live := &liveTools{}
	live.set(fsRead)

	b := bustest.New(t)
	events := watchEvents(t, b)
	m := &toolModel{offered: map[string][]string{}}
	cfg := testConfig()
	cfg.MaxToolCalls = 2
	r := agentwork.NewRunner(b, m, must(tools.NewRegistry(tools.Notify(), echo, rm)), cfg,
		agentwork.WithToolSource(live), agentwork.WithSecrets(fsSecret))
	r.Handle("task", agentwork.Policy{SettingsFor: func(_ context.Context, source, name string) (agentwork.Settings, error) {
		switch name {
		case "special", "special-reply":
			return agentwork.Settings{Tools: []string{"fs__*"}}, nil
		case "broken":
			return agentwork.Settings{}, errors.New("the job store does not answer")
		}
		return agentwork.Settings{}, nil
	}})
	r.Handle("cron", agentwork.Policy{Tools: []string{"echo", "rm"}})
	stop := runInBackground(t, "runner", r.Run)

	for _, req := range []agentwork.Request{
		// runner.tools (notify_user): the model may call nothing else.
		{Source: "task", Name: "plain", Prompt: "echo rm", Deliver: agentwork.DeliverReply},
		// The name's scope; notify_user is added: the run delivers it.
		{Source: "task", Name: "special", Prompt: "fs__read rm"},
		// The name's scope, a run that sends its reply: no notify_user.
		{Source: "task", Name: "special-reply", Prompt: "fs__read", Deliver: agentwork.DeliverReply},
		// The source's scope, and max_tool_calls (2).
		{Source: "cron", Name: "job", Prompt: "echo echo echo notify_user"},
		// The scope cannot be known: retried, then an error event.
		{Source: "task", Name: "broken", Prompt: "echo"},
	} {
		publish(t, b, req)
	}
	evs := events.runEvents(5)
	stop()

	// A tool learns whose run calls it from the runner, not the model.
	if ri, _ := echoedFor.Load().(tools.RunInfo); ri.Source != "cron" || ri.Name != "job" || ri.ID == "" {
		t.Errorf("echo ran for %+v, want the run of cron job", ri)
	}

	byName := map[string]agentwork.Result{}
	for _, e := range evs {
		byName[e.Run.Name] = e.Run
	}
	for _, tt := range []struct {
		name, offered string
		outcomes      []string // name:outcome of each call on the event
	}{
		{"plain", "notify_user", []string{"echo:refused", "rm:refused"}},
		{"special", "fs__read,notify_user", []string{"fs__read:ok", "rm:refused"}},
		{"special-reply", "fs__read", []string{"fs__read:ok"}},
		{"job", "echo,notify_user,rm", []string{"echo:ok", "echo:ok", "echo:refused", "notify_user:error"}},
	} {
		if got := m.offeredTo(tt.name); got != tt.offered {
			t.Errorf("%s: offered %s, want %s", tt.name, got, tt.offered)
		}
		res := byName[tt.name]
		var got []string
		for _, c := range res.ToolCalls {
			got = append(got, c.Name+":"+c.Outcome)
		}
		if !slices.Equal(got, tt.outcomes) {
			t.Errorf("%s: %s event lists calls %v, want %v", tt.name, res.Outcome, got, tt.outcomes)
		}
	}
	if n := rmRuns.Load(); n != 0 {
		t.Errorf("rm ran %d times, want 0: no run had it in scope", n)
	}
	if n := echoRuns.Load(); n != 2 {
		t.Errorf("echo ran %d times, want 2 (runner.max_tool_calls)", n)
	}
	if c := byName["job"].ToolCalls[2]; !strings.Contains(c.Error, "runner.max_tool_calls") {
		t.Errorf("the third echo = %+v, want refused by runner.max_tool_calls", c)
	}
	if c := byName["plain"].ToolCalls[0]; !strings.Contains(c.Error, `"echo" is not a tool of this run`) {
		t.Errorf("plain's echo = %+v, want refused as not a tool of the run", c)
	}
	read := byName["special"].ToolCalls[0]
	if read.Result != "token: [redacted]" || read.ResultBytes != len("token: "+fsSecret) || read.DurationMS < 0 {
		t.Errorf("fs__read on record = %+v, want its result redacted and its whole size", read)
	}
	if res := byName["broken"]; res.Outcome != bus.OutcomeError || !strings.Contains(res.Error, "the job store does not answer") {
		t.Errorf("broken = %s %q, want an error event that says why its tools are unknown", res.Outcome, res.Error)
	}

	// Toolset answers for a source and name as their runs see them, with
	// the tools a source offers now.
	live.set(fsRead, tools.Func("fs__list", "list files", func(context.Context, struct{}) (string, error) { return "a.txt", nil }))
	ts, err := r.Toolset(t.Context(), "task", "special")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range ts.Specs() {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ","); got != "fs__list,fs__read,notify_user" || ts.From != agentwork.ScopeName || !ts.Notify {
		t.Errorf("Toolset(task, special) = %v from %s (notify %v), want fs__list,fs__read,notify_user from name, notify added", names, ts.From, ts.Notify)
	}
	if ts, err := r.Toolset(t.Context(), "task", "other"); err != nil || ts.From != agentwork.ScopeRunner || !slices.Equal(ts.Scope, tools.DefaultScope) {
		t.Errorf("Toolset(task, other) = %+v, %v; want runner.tools", ts, err)
	}
	if _, err := r.Toolset(t.Context(), "nope", "x"); !errors.Is(err, agentwork.ErrUnknownSource) {
		t.Errorf("Toolset(unknown source) = %v, want ErrUnknownSource", err)
	}
}

// An operator may call any tool by hand, outside every scope; the result
// is redacted, notify_user is refused, and an unknown name is an error.
func TestCallTool(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	fsRead := tools.Func("fs__read", "read a file", func(_ context.Context, a struct {
		Path string `json:"path"`
	}) (string, error) {
		runs.Add(1)
		return a.Path + ": " + fsSecret, nil
	})
	live := &liveTools{}
	live.set(fsRead)
	r := agentwork.NewRunner(bustest.New(t), model.ProviderFunc(nil), must(tools.NewRegistry(tools.Notify())), testConfig(),
		agentwork.WithToolSource(live), agentwork.WithSecrets(fsSecret))
	c, err := r.CallTool(t.Context(), "fs__read", `{"path":"/srv/a.txt"}`)
	if err != nil || c.Outcome != tools.OutcomeOK || c.Result != "/srv/a.txt: [redacted]" || runs.Load() != 1 {
		t.Errorf("CallTool(fs__read) = %+v, %v; want ok, redacted, run once", c, err)
	}
	if c, err := r.CallTool(t.Context(), tools.NotifyName, `{"text":"hi"}`); err != nil || c.Outcome != tools.OutcomeRefused {
		t.Errorf("CallTool(notify_user) = %+v, %v; want refused", c, err)
	}
	if _, err := r.CallTool(t.Context(), "fs__write", `{}`); !errors.Is(err, agentwork.ErrUnknownTool) || !strings.Contains(err.Error(), "fs__read, notify_user") {
		t.Errorf("CallTool(unknown) = %v, want ErrUnknownTool listing the tools", err)
	}
}

// `agentwork tools list|call` reach a running runner through the tools
// service on NATS.
func TestToolService(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	echo := tools.Func("fs__echo", "Echo the text.", func(_ context.Context, a struct {
		Text string `json:"text"`
	}) (string, error) {
		return "echo: " + a.Text, nil
	})
	r := agentwork.NewRunner(b, model.ProviderFunc(nil), must(tools.NewRegistry(tools.Notify(), echo)), testConfig())
	r.Handle("heartbeat", agentwork.Policy{Tools: []string{"fs__*"}, Output: []agentwork.OutputGate{agentwork.NotifyGate{}}})
	stop, err := b.StartService(agentwork.NewToolAdmin(r, nil).Service())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	c := agentwork.NewToolClient(bustest.Client(t, b))

	l, err := c.List(t.Context(), "heartbeat", "default")
	if err != nil || len(l.Tools) != 2 || l.Tools[0].Name != "fs__echo" || !l.Notify || l.Servers == nil {
		t.Fatalf("List(heartbeat) = %+v, %v; want fs__echo and notify_user (added), no servers", l, err)
	}
	if _, err := c.List(t.Context(), "", "default"); !errors.Is(err, agentwork.ErrToolRequest) {
		t.Errorf("List(a name without a source) = %v, want ErrToolRequest", err)
	}
	call, err := c.Call(t.Context(), "fs__echo", []byte(`{"text":"hi"}`))
	if err != nil || call.Result != "echo: hi" || call.Outcome != tools.OutcomeOK {
		t.Errorf("Call(fs__echo) = %+v, %v; want ok", call, err)
	}
	if _, err := c.Call(t.Context(), "fs__nope", nil); !errors.Is(err, agentwork.ErrNoTool) {
		t.Errorf("Call(unknown) = %v, want ErrNoTool", err)
	}
	if _, err := c.Call(t.Context(), "fs__echo", []byte(`"text"`)); !errors.Is(err, agentwork.ErrToolRequest) {
		t.Errorf("Call(arguments not an object) = %v, want ErrToolRequest", err)
	}
}

// fetchModel calls http_fetch on url in its first reply, whatever it is
// offered, and answers "done" once the result is back; it records the
// tools each request name was offered.
type fetchModel struct {
	url     string
	mu      sync.Mutex
	offered map[string][]string
}

func (m *fetchModel) Complete(_ context.Context, req model.Request) (model.Reply, error) {
	var names []string
	for _, tl := range req.Tools {
		names = append(names, tl.Name)
	}
	m.mu.Lock()
	m.offered[req.Meta["name"]] = names
	m.mu.Unlock()
	if req.Messages[len(req.Messages)-1].Role != model.RoleUser {
		return model.Reply{Text: "done"}, nil
	}
	return model.Reply{ToolCalls: []model.ToolCall{{ID: "f", Name: builtin.FetchName, Arguments: fmt.Sprintf(`{"url":%q}`, m.url)}}}, nil
}

// A built-in tool enters the scope like any other: a run whose scope
// names http_fetch is offered it and fetches; a run whose scope does not
// is not offered it, and its call is refused without a request.
func TestRunBuiltinToolScope(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "backup ok")
	}))
	t.Cleanup(srv.Close)
	fetch := must(builtin.Fetch(builtin.FetchConfig{Allow: []builtin.FetchRule{{Prefix: srv.URL + "/", AllowLoopback: true}}}))

	b := bustest.New(t)
	events := watchEvents(t, b)
	m := &fetchModel{url: srv.URL + "/status", offered: map[string][]string{}}
	r := agentwork.NewRunner(b, m, must(tools.NewRegistry(tools.Notify(), fetch)), testConfig())
	r.Handle("task", agentwork.Policy{SettingsFor: func(_ context.Context, _, name string) (agentwork.Settings, error) {
		if name == "fetcher" {
			return agentwork.Settings{Tools: []string{"http_*"}}, nil
		}
		return agentwork.Settings{}, nil // runner.tools: notify_user
	}})
	stop := runInBackground(t, "runner", r.Run)
	publish(t, b, agentwork.Request{Source: "task", Name: "fetcher", Prompt: "is the backup ok?", Deliver: agentwork.DeliverReply})
	publish(t, b, agentwork.Request{Source: "task", Name: "plain", Prompt: "is the backup ok?", Deliver: agentwork.DeliverReply})
	evs := events.runEvents(2)
	stop()

	byName := map[string]agentwork.Result{}
	for _, e := range evs {
		byName[e.Run.Name] = e.Run
	}
	if got := strings.Join(m.offered["fetcher"], ","); got != "http_fetch" {
		t.Errorf("fetcher was offered %s, want http_fetch", got)
	}
	if got := strings.Join(m.offered["plain"], ","); got != "notify_user" {
		t.Errorf("plain was offered %s, want notify_user alone", got)
	}
	if c := byName["fetcher"].ToolCalls; len(c) != 1 || c[0].Outcome != tools.OutcomeOK || !strings.HasSuffix(c[0].Result, "backup ok") {
		t.Errorf("fetcher's calls = %+v, want http_fetch ok with the body", c)
	}
	if c := byName["plain"].ToolCalls; len(c) != 1 || c[0].Outcome != tools.OutcomeRefused || !strings.Contains(c[0].Error, `"http_fetch" is not a tool of this run`) {
		t.Errorf("plain's calls = %+v, want http_fetch refused as not a tool of the run", c)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the server got %d requests, want 1 (the fetcher's)", n)
	}
}
