package mcp_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// serverEnv, set in a test binary's environment, makes it an MCP server on
// stdio (see TestMain) instead of running tests: "serve" serves
// testServer's tools; "fail" writes $TOKEN to stderr and exits 1 before
// the handshake.
const serverEnv = "AGENTWORK_MCP_TEST_SERVER"

// runStdioServer is the test binary as a stdio MCP server.
func runStdioServer(mode string) int {
	switch mode {
	case "serve":
		if err := testServer().Run(context.Background(), &sdk.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "test server:", err)
			return 1
		}
		return 0
	case "fail":
		fmt.Fprintf(os.Stderr, "starting\nauth failed: token %s rejected\n", os.Getenv("TOKEN"))
		return 1
	}
	fmt.Fprintln(os.Stderr, "unknown mode", mode)
	return 2
}

type textArgs struct {
	Text string `json:"text"`
}

type sizeArgs struct {
	N int `json:"n"`
}

type nameArgs struct {
	Name string `json:"name"`
}

func text(s string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
}

// testServer is the MCP server every transport's tests talk to, built with
// the same SDK: in process, as a stdio child and over streamable HTTP.
func testServer() *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "agentwork-test", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "Echo the text."},
		func(ctx context.Context, _ *sdk.CallToolRequest, a textArgs) (*sdk.CallToolResult, any, error) {
			out, err := echo(ctx, a)
			return text(out), nil, err
		})
	sdk.AddTool(s, &sdk.Tool{Name: "fail", Description: "Always fails."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "it broke: the disk is full"}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "fail_with", Description: "Fails with the text."},
		func(_ context.Context, _ *sdk.CallToolRequest, a textArgs) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: a.Text}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "fail_env", Description: "Fails quoting the environment variable called name, as a careless server does."},
		func(_ context.Context, _ *sdk.CallToolRequest, a nameArgs) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "auth failed: token " + os.Getenv(a.Name) + " rejected"}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "whoami", Description: "Acts with the token " + os.Getenv("API_TOKEN") + ", as a careless server says."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return text("me"), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "sleep", Description: "Waits until cancelled (at most 30s)."},
		func(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
			select {
			case <-ctx.Done():
			case <-time.After(30 * time.Second):
			}
			return text("slept"), nil, nil
		})
	type count struct {
		N int `json:"n"`
	}
	sdk.AddTool(s, &sdk.Tool{Name: "structured", Description: "Structured output."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, count, error) {
			return nil, count{N: 42}, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "mixed", Description: "Text, an image and a resource link."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{
				&sdk.TextContent{Text: "see the chart"},
				&sdk.ImageContent{MIMEType: "image/png", Data: []byte("\x89PNG0123456789")},
				&sdk.ResourceLink{URI: "file:///srv/report.pdf", Name: "report", MIMEType: "application/pdf"},
			}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "big", Description: "n bytes of output."},
		func(_ context.Context, _ *sdk.CallToolRequest, a sizeArgs) (*sdk.CallToolResult, any, error) {
			return text(strings.Repeat("é", a.N/2)), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "pid", Description: "The server's process id."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return text(fmt.Sprint(os.Getpid())), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "get.time", Description: "A dotted name."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return text("noon"), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "add_tool", Description: "Adds an echo tool called name."},
		func(_ context.Context, _ *sdk.CallToolRequest, a nameArgs) (*sdk.CallToolResult, any, error) {
			sdk.AddTool(s, &sdk.Tool{Name: a.Name, Description: "Added later."},
				func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
					return text("I am " + a.Name), nil, nil
				})
			return text("added"), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "remove_tool", Description: "Removes the tool called name."},
		func(_ context.Context, _ *sdk.CallToolRequest, a nameArgs) (*sdk.CallToolResult, any, error) {
			s.RemoveTools(a.Name)
			return text("removed"), nil, nil
		})
	return s
}

// echo is the Go function behind the echo tool, for BenchmarkCall's
// direct case.
func echo(_ context.Context, a textArgs) (string, error) { return a.Text, nil }
