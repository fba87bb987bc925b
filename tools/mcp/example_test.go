package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/mcp"
)

// A Manager offers an MCP server's tools as tools.Specs: here a server
// built with the SDK in this process; from agentwork.yaml, a stdio or HTTP
// server (Config).
func Example() {
	srv := sdk.NewServer(&sdk.Implementation{Name: "disk", Version: "1"}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "df", Description: "Disk usage of a mount point."},
		func(_ context.Context, _ *sdk.CallToolRequest, a struct {
			Path string `json:"path"`
		}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: a.Path + ": 42% used"}}}, nil, nil
		})
	m, err := mcp.New(mcp.Config{}, mcp.WithInProcess("disk", mcp.ServerConfig{}, func(ctx context.Context) (sdk.Transport, error) {
		client, server := sdk.NewInMemoryTransports()
		if _, err := srv.Connect(ctx, server, nil); err != nil {
			return nil, err
		}
		return client, nil
	}))
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	<-m.Ready()

	reg, err := tools.NewRegistry(append([]tools.Spec{tools.Notify()}, m.Specs()...)...)
	if err != nil {
		panic(err)
	}
	fmt.Println(reg.Names())
	df, _ := reg.Lookup("disk__df")
	out, err := df.Handler(ctx, json.RawMessage(`{"path":"/srv"}`))
	fmt.Println(out, err)
	for _, s := range m.Status() {
		fmt.Println(s.Name, s.Transport, s.State, s.Tools)
	}

	cancel()
	<-done
	// Output:
	// [disk__df notify_user]
	// /srv: 42% used <nil>
	// disk inprocess up [disk__df]
}
