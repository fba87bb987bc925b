package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/mcp"
)

// transports are the three ways to reach a server; every case of
// TestTransports runs on each, against the same test server.
var transports = []struct {
	name   string
	config func(t *testing.T, limits mcp.ServerConfig) (mcp.Config, []mcp.Option)
}{
	{"inprocess", func(t *testing.T, limits mcp.ServerConfig) (mcp.Config, []mcp.Option) {
		return mcp.Config{}, []mcp.Option{inProcess("srv", testServer(), limits)}
	}},
	{"stdio", func(t *testing.T, limits mcp.ServerConfig) (mcp.Config, []mcp.Option) {
		c := stdioServer(t)
		c.Timeout, c.MaxOutput = limits.Timeout, limits.MaxOutput
		return mcp.Config{Servers: map[string]mcp.ServerConfig{"srv": c}}, nil
	}},
	{"http", func(t *testing.T, limits mcp.ServerConfig) (mcp.Config, []mcp.Option) {
		c := mcp.ServerConfig{URL: httpServer(t, testServer()), Headers: map[string]string{"Authorization": testToken}}
		c.Timeout, c.MaxOutput = limits.Timeout, limits.MaxOutput
		return mcp.Config{Servers: map[string]mcp.ServerConfig{"srv": c}}, nil
	}},
}

func TestTransports(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			cfg, opts := tr.config(t, mcp.ServerConfig{Timeout: 2 * time.Second, MaxOutput: 1024})
			m := start(t, cfg, opts...)

			t.Run("discovery", func(t *testing.T) {
				st := status(t, m, "srv")
				if st.State != mcp.StateUp || st.Transport != tr.name || st.LastError != "" {
					t.Errorf("Status = %+v, want up over %s without error", st, tr.name)
				}
				want := []string{"srv__add_tool", "srv__big", "srv__echo", "srv__fail", "srv__fail_env", "srv__fail_with", "srv__get_time", "srv__mixed", "srv__pid", "srv__remove_tool", "srv__sleep", "srv__structured", "srv__whoami"}
				if got := names(m); !slices.Equal(got, want) {
					t.Errorf("Specs() names = %v, want %v", got, want)
				}
				if !slices.Equal(st.Tools, want) {
					t.Errorf("Status().Tools = %v, want %v", st.Tools, want)
				}
				for _, s := range m.Specs() {
					if err := s.Validate(); err != nil {
						t.Errorf("spec %s: %v", s.Name, err)
					}
					if s.Name == "srv__echo" {
						var schema struct {
							Type       string                     `json:"type"`
							Properties map[string]json.RawMessage `json:"properties"`
						}
						if err := json.Unmarshal(s.Schema, &schema); err != nil || schema.Type != "object" || schema.Properties["text"] == nil {
							t.Errorf("echo schema = %s (%v), want an object schema with a text property", s.Schema, err)
						}
						if s.Description != "Echo the text." {
							t.Errorf("echo description = %q", s.Description)
						}
					}
				}
				if _, err := tools.NewRegistry(append([]tools.Spec{tools.Notify()}, m.Specs()...)...); err != nil {
					t.Errorf("a registry of notify_user and the MCP tools: %v", err)
				}
			})

			t.Run("call", func(t *testing.T) {
				if got := mustCall(t, m, "srv__echo", map[string]string{"text": "hello"}); got != "hello" {
					t.Errorf("echo = %q, want hello", got)
				}
				if got := mustCall(t, m, "srv__get_time", map[string]string{}); got != "noon" {
					t.Errorf("get.time as srv__get_time = %q, want noon", got)
				}
			})

			t.Run("concurrent calls", func(t *testing.T) {
				var wg sync.WaitGroup
				for i := range 8 {
					wg.Go(func() {
						want := fmt.Sprint("call ", i)
						if got, err := call(t, m, "srv__echo", map[string]string{"text": want}); got != want || err != nil {
							t.Errorf("echo(%q) = %q, %v", want, got, err)
						}
					})
				}
				wg.Wait()
			})

			t.Run("isError", func(t *testing.T) {
				msg := callErr(t, m, "srv__fail", map[string]string{}, mcp.ErrToolError)
				if msg != "it broke: the disk is full" {
					t.Errorf("fail error = %q, want the tool's own text", msg)
				}
			})

			t.Run("timeout", func(t *testing.T) {
				began := time.Now()
				msg := callErr(t, m, "srv__sleep", map[string]string{}, mcp.ErrTimeout)
				if took := time.Since(began); took > 10*time.Second {
					t.Errorf("the call took %s, want about the 2s timeout", took)
				}
				if !strings.Contains(msg, "within 2s") || !strings.Contains(msg, "mcp.servers.srv.timeout") {
					t.Errorf("timeout error = %q, want it to name the timeout and its setting", msg)
				}
				// The session survives a timed-out call.
				if got := mustCall(t, m, "srv__echo", map[string]string{"text": "still here"}); got != "still here" {
					t.Errorf("echo after a timeout = %q", got)
				}
			})

			t.Run("structured content", func(t *testing.T) {
				// The SDK server sends the JSON as text too: the model sees it once.
				if got := mustCall(t, m, "srv__structured", map[string]string{}); got != `{"n":42}` {
					t.Errorf("structured = %q, want the JSON once", got)
				}
			})

			t.Run("other content summarised", func(t *testing.T) {
				got := mustCall(t, m, "srv__mixed", map[string]string{})
				want := "see the chart\n[image image/png, 14 bytes, not shown]\n[resource link file:///srv/report.pdf (report) (application/pdf)]"
				if got != want {
					t.Errorf("mixed = %q, want %q", got, want)
				}
			})

			t.Run("output cap", func(t *testing.T) {
				got := mustCall(t, m, "srv__big", map[string]int{"n": 5000})
				if len(got) > 1024 {
					t.Errorf("output is %d bytes, want at most max_output 1024", len(got))
				}
				if !strings.Contains(got, "[output cut: the first ") || !strings.Contains(got, "of 5000 bytes shown (mcp.servers.srv.max_output)]") {
					t.Errorf("output ends %q, want a note that it was cut", got[max(0, len(got)-120):])
				}
				if !strings.HasPrefix(got, "éé") || !strings.Contains(got, "é\n[output cut") {
					t.Errorf("output was not cut at a character boundary: %q", got[max(0, len(got)-120):])
				}
			})

			t.Run("list_changed", func(t *testing.T) {
				mustCall(t, m, "srv__add_tool", map[string]string{"name": "late"})
				waitUntil(t, m, "srv__late to be offered", func() bool { return has(m, "srv__late") })
				if got := mustCall(t, m, "srv__late", map[string]string{}); got != "I am late" {
					t.Errorf("late = %q", got)
				}
				var old tools.Spec
				for _, s := range m.Specs() {
					if s.Name == "srv__late" {
						old = s
					}
				}
				mustCall(t, m, "srv__remove_tool", map[string]string{"name": "late"})
				waitUntil(t, m, "srv__late to be gone", func() bool { return !has(m, "srv__late") })
				if _, err := old.Handler(t.Context(), json.RawMessage(`{}`)); !errors.Is(err, mcp.ErrGone) {
					t.Errorf("a call of a removed tool = %v, want ErrGone", err)
				}
			})
		})
	}
}

// A stdio server that dies is restarted after the backoff; meanwhile calls
// say it is down and restarting.
func TestStdioServerRestarts(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))
	m := start(t, mcp.Config{Servers: map[string]mcp.ServerConfig{"srv": stdioServer(t)}}, mcp.WithClock(clk))

	pid := mustCall(t, m, "srv__pid", map[string]string{})
	proc, err := os.FindProcess(atoi(t, pid))
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, m, "the server to be down", func() bool { return status(t, m, "srv").State == mcp.StateDown && status(t, m, "srv").LastError != "" })
	st := status(t, m, "srv")
	if !strings.Contains(st.LastError, "signal: killed") {
		t.Errorf("LastError = %q, want it to say the server was killed", st.LastError)
	}
	if want := clk.Now().Add(mcp.BackoffMin); !st.RetryAt.Equal(want) {
		t.Errorf("RetryAt = %s, want %s (now + %s)", st.RetryAt, want, mcp.BackoffMin)
	}
	if !slices.Contains(st.Tools, "srv__echo") || !has(m, "srv__echo") {
		t.Errorf("the tools of a down server are gone: %v", st.Tools)
	}
	msg := callErr(t, m, "srv__echo", map[string]string{"text": "hi"}, mcp.ErrDown)
	if !strings.Contains(msg, "MCP server srv is down") || !strings.Contains(msg, "restarted automatically") {
		t.Errorf("call while down = %q, want it to say the server is down and restarting", msg)
	}

	// The backoff passes; the server comes back.
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if err := clk.BlockUntil(ctx, 1); err != nil {
		t.Fatal("no restart timer waiting:", err)
	}
	clk.Advance(mcp.BackoffMin)
	waitUntil(t, m, "the server to be up again", func() bool { return status(t, m, "srv").State == mcp.StateUp })
	if got := mustCall(t, m, "srv__echo", map[string]string{"text": "back"}); got != "back" {
		t.Errorf("echo after restart = %q", got)
	}
	if again := mustCall(t, m, "srv__pid", map[string]string{}); again == pid {
		t.Errorf("pid after restart = %s, the same process", again)
	}
	if st := status(t, m, "srv"); st.Restarts != 1 || st.LastError != "" {
		t.Errorf("Status after restart = %+v, want 1 restart and no error", st)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("%q is not a number", s)
	}
	return n
}

// A server that cannot start is reported down by name, the others work,
// and nothing it could quote of its env reaches the status.
func TestServerThatCannotStart(t *testing.T) {
	t.Parallel()
	const token = "hunter2-very-secret"
	failing := stdioServer(t)
	failing.Env = map[string]string{"AGENTWORK_MCP_TEST_SERVER": "fail", "TOKEN": token}
	m := start(t, mcp.Config{Servers: map[string]mcp.ServerConfig{
		"missing": {Command: "/nonexistent/agentwork-mcp-server", Args: []string{"--flag"}},
		"failing": failing,
		"badauth": {URL: httpServer(t, testServer()), Headers: map[string]string{"Authorization": "Bearer wrong-token-0815"}},
	}}, inProcess("good", testServer(), mcp.ServerConfig{}))

	if got := mustCall(t, m, "good__echo", map[string]string{"text": "fine"}); got != "fine" {
		t.Errorf("good echo = %q", got)
	}
	for _, tc := range []struct {
		name, want string
	}{
		{"missing", "start /nonexistent/agentwork-mcp-server: fork/exec /nonexistent/agentwork-mcp-server: no such file or directory"},
		{"failing", "the server exited (exit status 1); stderr: starting auth failed: token [redacted] rejected"},
		{"badauth", `connect: calling "initialize": sending "initialize": Unauthorized (the server answered 401: check mcp.servers.badauth.headers)`},
	} {
		st := status(t, m, tc.name)
		if st.State != mcp.StateDown || !strings.Contains(st.LastError, tc.want) || len(st.Tools) != 0 {
			t.Errorf("Status(%s) = %+v, want down with an error containing %q and no tools", tc.name, st, tc.want)
		}
		for _, secret := range []string{token, "wrong-token-0815"} {
			if strings.Contains(fmt.Sprintf("%+v", st), secret) {
				t.Errorf("Status(%s) = %+v, quotes a secret", tc.name, st)
			}
		}
	}
	if st := status(t, m, "good"); st.State != mcp.StateUp {
		t.Errorf("Status(good) = %+v, want up", st)
	}
}

// After Run returns, calls say the servers are stopped.
func TestCallAfterStop(t *testing.T) {
	t.Parallel()
	m, err := mcp.New(mcp.Config{}, inProcess("srv", testServer(), mcp.ServerConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	<-m.Ready()
	echo := m.Specs()[slices.IndexFunc(m.Specs(), func(s tools.Spec) bool { return s.Name == "srv__echo" })]
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if err := m.Run(t.Context()); !errors.Is(err, mcp.ErrRunning) {
		t.Errorf("a second Run = %v, want ErrRunning", err)
	}
	_, err = echo.Handler(t.Context(), json.RawMessage(`{"text":"x"}`))
	if !errors.Is(err, mcp.ErrDown) || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("a call after Run returned = %v, want ErrDown saying stopped", err)
	}
}

// A Manager without servers is ready at once and Run blocks until ctx ends.
func TestNoServers(t *testing.T) {
	t.Parallel()
	m := start(t, mcp.Config{})
	if len(m.Specs()) != 0 || len(m.Status()) != 0 {
		t.Errorf("Specs = %v, Status = %v, want none", m.Specs(), m.Status())
	}
}

// New validates the config and the in-process servers, and does no I/O:
// a command that does not exist is no error until Run.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	if _, err := mcp.New(mcp.Config{Servers: map[string]mcp.ServerConfig{"fs": {Command: "/nonexistent/server"}}}); err != nil {
		t.Errorf("New with a missing command = %v, want nil (found out at Run)", err)
	}
	if _, err := mcp.New(mcp.Config{Servers: map[string]mcp.ServerConfig{"fs": {}}}); err == nil {
		t.Error("New with an empty server = nil, want an error")
	}
	cfg := mcp.Config{Servers: map[string]mcp.ServerConfig{"srv": {Command: "x"}}}
	if _, err := mcp.New(cfg, inProcess("srv", testServer(), mcp.ServerConfig{})); err == nil || !strings.Contains(err.Error(), "mcp.servers.srv: defined twice") {
		t.Errorf("New with an in-process server named as a configured one = %v, want defined twice", err)
	}
	if _, err := mcp.New(mcp.Config{}, inProcess("srv", testServer(), mcp.ServerConfig{MaxOutput: 10})); err == nil || !strings.Contains(err.Error(), "mcp.servers.srv.max_output") {
		t.Errorf("New with an in-process server with bad limits = %v, want a max_output error", err)
	}
	if _, err := mcp.New(mcp.Config{}, inProcess("srv", testServer(), mcp.ServerConfig{Command: "x"})); err == nil {
		t.Error("New with an in-process server with a command = nil, want an error")
	}
}
