package mcp

import (
	"net/http"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Environ, Render, CapOutput and InputSchema expose the pieces of a call
// for unit tests.
func Environ(base []string, extra map[string]string) []string { return environ(base, extra) }

func Render(res *sdk.CallToolResult) string { return render(res) }

func CapOutput(s string, max int) string { return capOutput(s, max, "max_output", nil) }

func InputSchema(v any) (string, error) {
	b, err := inputSchema(v)
	return string(b), err
}

// HeaderTransport is the transport of an HTTP server at url with headers,
// over base.
func HeaderTransport(url string, headers map[string]string, base http.RoundTripper) http.RoundTripper {
	return newHeaderTransport(url, headers, base)
}
