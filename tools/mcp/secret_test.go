package mcp_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/tools/mcp"
)

// A server's env and header values are cut out of what its tools return
// and of the errors they report, in every form internal/secret knows, and
// before the result is cut to max_output, so a cut cannot leave a part of
// one: the model never reads them, so it cannot pass them on.
func TestSecretsCutFromResults(t *testing.T) {
	t.Parallel()
	const envToken = "s3cr3t-value-123456"
	header := strings.TrimPrefix(testToken, "Bearer ")
	stdio := stdioServer(t)
	stdio.Env["API_TOKEN"] = envToken
	stdio.MaxOutput = 1024
	m := start(t, mcp.Config{Servers: map[string]mcp.ServerConfig{
		"std": stdio,
		"web": {URL: httpServer(t, testServer()), Headers: map[string]string{"Authorization": testToken}, MaxOutput: 1024},
	}})
	for _, tc := range []struct{ server, token string }{{"std", envToken}, {"web", header}} {
		t.Run(tc.server, func(t *testing.T) {
			t.Parallel()
			leaks := func(what, got string) {
				t.Helper()
				// Half of the token is enough to say a cut left a part of it.
				if part := tc.token[:len(tc.token)/2]; strings.Contains(got, part) {
					t.Errorf("%s = %q: holds %q of the secret", what, tail(got), part)
				}
				if b64 := base64.StdEncoding.EncodeToString([]byte(tc.token)); strings.Contains(got, b64[:len(b64)/2]) {
					t.Errorf("%s = %q: holds the secret in base64", what, tail(got))
				}
			}
			echo := tc.server + "__echo"
			for _, in := range []string{
				"token=" + tc.token,
				`{"token":"` + tc.token + `"}`,
				"basic " + base64.StdEncoding.EncodeToString([]byte(tc.token)),
			} {
				got := mustCall(t, m, echo, map[string]string{"text": in})
				leaks(fmt.Sprintf("echo(%q)", in), got)
				if !strings.Contains(got, "[redacted]") {
					t.Errorf("echo(%q) = %q, want the secret as [redacted]", in, got)
				}
			}
			// The result is cut to max_output at every offset of the
			// token: redacted first, no part of it is left at the cut.
			for pad := range len(tc.token) {
				in := strings.Repeat("x", pad) + strings.Repeat(tc.token, 200)
				got := mustCall(t, m, echo, map[string]string{"text": in})
				leaks(fmt.Sprintf("echo(%d x and the secret 200 times)", pad), got)
				if !strings.Contains(got, "[output cut: ") {
					t.Errorf("echo(%d x and the secret 200 times) = %q, want it cut", pad, tail(got))
				}
			}
			msg := callErr(t, m, tc.server+"__fail_with", map[string]string{"text": "refused: " + tc.token}, mcp.ErrToolError)
			leaks("fail_with's error", msg)
			if msg != "refused: [redacted]" {
				t.Errorf("fail_with's error = %q, want %q", msg, "refused: [redacted]")
			}
		})
	}
	// A stdio server that quotes its own environment in a tool's
	// description, which the model reads with every request.
	if !has(m, "std__whoami") {
		t.Errorf("std__whoami is not offered; have %v", names(m))
	}
	for _, s := range m.Specs() {
		if s.Name == "std__whoami" && s.Description != "Acts with the token [redacted], as a careless server says." {
			t.Errorf("std__whoami's description = %q, want the token as [redacted]", s.Description)
		}
	}
	// A stdio server that quotes its own environment in an isError result.
	msg := callErr(t, m, "std__fail_env", map[string]string{"name": "API_TOKEN"}, mcp.ErrToolError)
	if want := "auth failed: token [redacted] rejected"; msg != want {
		t.Errorf("fail_env(API_TOKEN) = %q, want %q", msg, want)
	}
}

// tail is the end of s, for messages.
func tail(s string) string {
	if len(s) > 200 {
		return "..." + s[len(s)-200:]
	}
	return s
}

// The config's secrets, which the tool loop hands its tools in the
// context, are cut before the result is cut to max_output too: at every
// offset of one across the cap, no part of it of secret.Min bytes is left.
func TestConfigSecretsCutBeforeTheCap(t *testing.T) {
	t.Parallel()
	const key = "cfg-key-fedcba9876543210"
	stdio := stdioServer(t)
	stdio.MaxOutput = 1024
	m := start(t, mcp.Config{Servers: map[string]mcp.ServerConfig{"std": stdio}})
	var echo func(context.Context, json.RawMessage) (string, error)
	for _, s := range m.Specs() {
		if s.Name == "std__echo" {
			echo = s.Handler
		}
	}
	if echo == nil {
		t.Fatalf("no std__echo; have %v", names(m))
	}
	ctx := secret.NewContext(t.Context(), key)
	for pad := 900; pad <= 1024; pad++ {
		raw, _ := json.Marshal(map[string]string{"text": strings.Repeat("x", pad) + key + strings.Repeat("y", 200)})
		got, err := echo(ctx, raw)
		if err != nil || !strings.Contains(got, "[output cut: ") {
			t.Fatalf("echo(%d x, the secret) = %q, %v; want it cut", pad, tail(got), err)
		}
		for i := 0; i+secret.Min <= len(key); i++ {
			if w := key[i : i+secret.Min]; strings.Contains(got, w) {
				t.Errorf("echo(%d x, the secret) = %q: holds %q of it", pad, tail(got), w)
				break
			}
		}
	}
}
