package mcp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/tools/mcp"
)

const envSecret, headerSecret = "env-secret-123", "hdr-secret-456"

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	stdio := mcp.ServerConfig{Command: "npx", Args: []string{"-y", "server"}, Env: map[string]string{"TOKEN": envSecret}, Cwd: "/srv"}
	web := mcp.ServerConfig{URL: "https://mcp.example.com/mcp?key=" + envSecret, Headers: map[string]string{"Authorization": "Bearer " + headerSecret}}
	with := func(c mcp.ServerConfig, f func(*mcp.ServerConfig)) mcp.ServerConfig { f(&c); return c }
	for _, tc := range []struct {
		name    string
		servers map[string]mcp.ServerConfig
		want    string // "" for valid; else a part of the error
	}{
		{"none", nil, ""},
		{"stdio", map[string]mcp.ServerConfig{"fs": stdio}, ""},
		{"http", map[string]mcp.ServerConfig{"web-1": web}, ""},
		{"limits", map[string]mcp.ServerConfig{"fs": with(stdio, func(c *mcp.ServerConfig) {
			c.Timeout, c.MaxOutput, c.IdempotentTools = 5*time.Second, 2048, []string{"read_file"}
		})}, ""},
		{"upper-case name", map[string]mcp.ServerConfig{"FS": stdio}, "mcp.servers.FS: the name must be 1-32 characters"},
		{"long name", map[string]mcp.ServerConfig{strings.Repeat("a", 33): stdio}, "the name must be 1-32 characters"},
		{"name with __", map[string]mcp.ServerConfig{"my__fs": stdio}, `mcp.servers.my__fs: the name may not contain "__" or end in _`},
		{"name ending in _", map[string]mcp.ServerConfig{"fs_": stdio}, `may not contain "__" or end in _`},
		{"neither", map[string]mcp.ServerConfig{"fs": {}}, "mcp.servers.fs.command: required: set command"},
		{"both", map[string]mcp.ServerConfig{"fs": {Command: "x", URL: "https://a/mcp"}}, "mcp.servers.fs.command: set command (a stdio server) or url"},
		{"command with spaces", map[string]mcp.ServerConfig{"fs": {Command: "npx -y server"}}, ""},
		{"command padded", map[string]mcp.ServerConfig{"fs": {Command: " npx"}}, "mcp.servers.fs.command:"},
		{"bad env name", map[string]mcp.ServerConfig{"fs": with(stdio, func(c *mcp.ServerConfig) { c.Env = map[string]string{"1X": envSecret} })}, `mcp.servers.fs.env: "1X" is not an environment variable name`},
		{"NUL in env", map[string]mcp.ServerConfig{"fs": with(stdio, func(c *mcp.ServerConfig) { c.Env = map[string]string{"X": envSecret + "\x00"} })}, "mcp.servers.fs.env.X: the value contains a NUL byte"},
		{"headers on stdio", map[string]mcp.ServerConfig{"fs": with(stdio, func(c *mcp.ServerConfig) { c.Headers = web.Headers })}, "mcp.servers.fs.headers: only for an HTTP server"},
		{"env on http", map[string]mcp.ServerConfig{"web": with(web, func(c *mcp.ServerConfig) { c.Env = stdio.Env })}, "mcp.servers.web.env: only for a stdio server"},
		{"ftp url", map[string]mcp.ServerConfig{"web": {URL: "ftp://mcp.example.com"}}, `mcp.servers.web.url: "ftp://mcp.example.com": want an http(s) URL`},
		{"url with password", map[string]mcp.ServerConfig{"web": {URL: "https://me:" + envSecret + "@mcp.example.com/mcp"}}, "put credentials in headers"},
		{"bad header name", map[string]mcp.ServerConfig{"web": with(web, func(c *mcp.ServerConfig) { c.Headers = map[string]string{"X Key": headerSecret} })}, `mcp.servers.web.headers: "X Key" is not a header name`},
		{"reserved header", map[string]mcp.ServerConfig{"web": with(web, func(c *mcp.ServerConfig) { c.Headers = map[string]string{"mcp-session-id": headerSecret} })}, "is set by the MCP client itself"},
		{"newline in header", map[string]mcp.ServerConfig{"web": with(web, func(c *mcp.ServerConfig) { c.Headers = map[string]string{"X-Key": headerSecret + "\n"} })}, "mcp.servers.web.headers.X-Key: the value contains a control character"},
		{"negative timeout", map[string]mcp.ServerConfig{"fs": with(stdio, func(c *mcp.ServerConfig) { c.Timeout = -time.Second })}, "mcp.servers.fs.timeout: -1s is negative"},
		{"long timeout", map[string]mcp.ServerConfig{"fs": with(stdio, func(c *mcp.ServerConfig) { c.Timeout = 2 * time.Hour })}, "mcp.servers.fs.timeout: 2h0m0s is longer than 1h0m0s"},
		{"small max_output", map[string]mcp.ServerConfig{"fs": with(stdio, func(c *mcp.ServerConfig) { c.MaxOutput = 100 })}, "mcp.servers.fs.max_output: 100: want 1024 to 1048576 bytes"},
		{"empty idempotent tool", map[string]mcp.ServerConfig{"fs": with(stdio, func(c *mcp.ServerConfig) { c.IdempotentTools = []string{""} })}, "mcp.servers.fs.idempotent_tools[0]: empty"},
		{"repeated idempotent tool", map[string]mcp.ServerConfig{"fs": with(stdio, func(c *mcp.ServerConfig) { c.IdempotentTools = []string{"a", "a"} })}, `idempotent_tools[1]: "a" is listed twice`},
	} {
		err := mcp.Config{Servers: tc.servers}.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: Validate() = %v, want nil", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error with %q", tc.name, err, tc.want)
			continue
		}
		for _, s := range []string{envSecret, headerSecret} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("%s: Validate() = %v, which quotes a secret", tc.name, err)
			}
		}
	}
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	got := mcp.ServerConfig{}.WithDefaults()
	if got.Timeout != 60*time.Second || got.MaxOutput != 64<<10 {
		t.Errorf("WithDefaults() = timeout %s, max_output %d; want 60s, 65536", got.Timeout, got.MaxOutput)
	}
}
