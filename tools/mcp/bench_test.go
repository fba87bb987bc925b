package mcp_test

import (
	"encoding/json"
	"testing"

	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/mcp"
)

// BenchmarkCall measures one call of the echo tool as the tool loop makes
// it (a tools.Spec handler given the model's JSON arguments) over each
// transport, beside calling the Go function behind it directly: the cost
// MCP adds to a tool call. go test -run '^$' -bench BenchmarkCall ./tools/mcp/
func BenchmarkCall(b *testing.B) {
	args := json.RawMessage(`{"text":"the disk is 42% full"}`)
	direct := tools.Func("echo", "Echo the text.", echo)
	cases := []struct {
		name string
		spec func(b *testing.B) tools.Spec
	}{
		{"direct", func(*testing.B) tools.Spec { return direct }},
		{"inprocess", func(b *testing.B) tools.Spec {
			return specOf(b, start(b, mcp.Config{}, inProcess("srv", testServer(), mcp.ServerConfig{})))
		}},
		{"stdio", func(b *testing.B) tools.Spec {
			return specOf(b, start(b, mcp.Config{Servers: map[string]mcp.ServerConfig{"srv": stdioServer(b)}}))
		}},
		{"http", func(b *testing.B) tools.Spec {
			c := mcp.ServerConfig{URL: httpServer(b, testServer()), Headers: map[string]string{"Authorization": testToken}}
			return specOf(b, start(b, mcp.Config{Servers: map[string]mcp.ServerConfig{"srv": c}}))
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			spec := c.spec(b)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				out, err := spec.Handler(ctx, args)
				if err != nil || out != "the disk is 42% full" {
					b.Fatalf("echo = %q, %v", out, err)
				}
			}
		})
	}
}

func specOf(b *testing.B, m *mcp.Manager) tools.Spec {
	b.Helper()
	for _, s := range m.Specs() {
		if s.Name == "srv__echo" {
			return s
		}
	}
	b.Fatalf("no srv__echo in %v", names(m))
	return tools.Spec{}
}
