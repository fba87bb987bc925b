package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/mcpserver"
)

const mcpUsage = `usage: agentwork mcp [--api URL] [--data-dir DIR] [--config FILE] [--log-level L]

Serves agentwork's MCP tools (docs/mcp-server.md) over stdio, for MCP
clients that start a command, such as Claude Desktop. The tools call the
running server's HTTP API (--api, default $AGENTWORK_API, else
http://127.0.0.1:8080) with the admin token ($AGENTWORK_ADMIN_TOKEN, else
the admin-token file in the data dir). Stdout carries only the protocol;
logs go to stderr.`

// cmdMCP implements `agentwork mcp`: the MCP server over stdio, a client
// of the running server's HTTP API.
func cmdMCP(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("mcp", e)
	fs.Usage = func() { fmt.Fprintln(e.stderr, mcpUsage) }
	var cf connFlags
	cf.register(fs)
	base := fs.String("api", "", "the HTTP API's address (default $AGENTWORK_API, else http://127.0.0.1:8080)")
	level := fs.String("log-level", "info", "log level of stderr: debug, info, warn, error")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return quietHelp(err)
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("mcp: unexpected argument %q (see agentwork mcp -h)", pos[0])}
	}
	c, err := newAPIClient(&cf, *base)
	if err != nil {
		return err
	}
	// Only the protocol goes to stdout: the log goes to stderr.
	log, err := newLogger(e.stderr, *level, "json")
	if err != nil {
		return usageError{"mcp: --log-level: " + err.Error()}
	}
	defer func() { _ = log.Sync() }()
	srv := mcpserver.NewRemote(c.base, c.token, &http.Client{}, mcpserver.WithLogger(log.Named("mcp")))
	log.Info("mcp server on stdio", zap.String("api", c.base))
	err = srv.MCP().Run(ctx, &mcp.IOTransport{Reader: os.Stdin, Writer: nopWriteCloser{e.stdout}})
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return fmt.Errorf("mcp: %w", err)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
