package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/agentwork/agentwork/tools/mcp"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(serverEnv); mode != "" {
		os.Exit(runStdioServer(mode))
	}
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait for the Manager to do something.
const waitTimeout = 20 * time.Second

// testBinary is this test binary: run with serverEnv set, an MCP server.
func testBinary(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// stdioServer configures the test binary as a stdio server.
func stdioServer(t testing.TB) mcp.ServerConfig {
	return mcp.ServerConfig{Command: testBinary(t), Env: map[string]string{serverEnv: "serve"}}
}

// inProcess adds srv as an in-process server called name.
func inProcess(name string, srv *sdk.Server, cfg mcp.ServerConfig) mcp.Option {
	return mcp.WithInProcess(name, cfg, func(ctx context.Context) (sdk.Transport, error) {
		client, server := sdk.NewInMemoryTransports()
		if _, err := srv.Connect(ctx, server, nil); err != nil {
			return nil, err
		}
		return client, nil
	})
}

// testToken is what the HTTP test server wants in Authorization.
const testToken = "Bearer s3cret-token-4711"

// httpServer serves srv over streamable HTTP on 127.0.0.1 until the test
// ends. A request without testToken gets a 401 whose body quotes the
// Authorization it got, as careless servers do.
func httpServer(t testing.TB, srv *sdk.Server) string {
	t.Helper()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != testToken {
			http.Error(w, "invalid credentials: "+got, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

// start runs a Manager for cfg until the test ends, and waits until it is
// ready.
func start(t testing.TB, cfg mcp.Config, opts ...mcp.Option) *mcp.Manager {
	t.Helper()
	m, err := mcp.New(cfg, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	errc := make(chan error, 1)
	go func() { errc <- m.Run(ctx) }()
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Run = %v, want nil", err)
				}
			case <-time.After(waitTimeout):
				t.Errorf("Run did not return within %s of cancel", waitTimeout)
			}
		})
	})
	select {
	case <-m.Ready():
	case <-time.After(waitTimeout):
		t.Fatalf("not ready after %s: %+v", waitTimeout, m.Status())
	}
	return m
}

// waitUntil waits, on Changed, until cond holds.
func waitUntil(t testing.TB, m *mcp.Manager, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		ch := m.Changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s; status: %+v", waitTimeout, what, m.Status())
		}
	}
}

func status(t testing.TB, m *mcp.Manager, name string) mcp.Status {
	t.Helper()
	for _, s := range m.Status() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no status of %s in %+v", name, m.Status())
	return mcp.Status{}
}

// call calls the tool the model knows as name, as the tool loop does.
func call(t testing.TB, m *mcp.Manager, name string, args any) (string, error) {
	t.Helper()
	for _, s := range m.Specs() {
		if s.Name == name {
			raw, err := json.Marshal(args)
			if err != nil {
				t.Fatal(err)
			}
			return s.Handler(t.Context(), raw)
		}
	}
	t.Fatalf("no tool %s; have %v", name, names(m))
	return "", nil
}

func names(m *mcp.Manager) []string {
	var out []string
	for _, s := range m.Specs() {
		out = append(out, s.Name)
	}
	return out
}

func has(m *mcp.Manager, name string) bool {
	for _, s := range m.Specs() {
		if s.Name == name {
			return true
		}
	}
	return false
}

// mustCall calls name and fails the test on an error.
func mustCall(t testing.TB, m *mcp.Manager, name string, args any) string {
	t.Helper()
	out, err := call(t, m, name, args)
	if err != nil {
		t.Fatalf("%s(%v) = error %q, want a result", name, args, err)
	}
	return out
}

// callErr calls name and fails the test unless the error is of kind.
func callErr(t testing.TB, m *mcp.Manager, name string, args any, kind error) string {
	t.Helper()
	out, err := call(t, m, name, args)
	if !errors.Is(err, kind) {
		t.Fatalf("%s(%v) = %q, %v; want an error of kind %v", name, args, out, err, kind)
	}
	return err.Error()
}
