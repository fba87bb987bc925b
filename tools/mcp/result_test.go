package mcp_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentwork/agentwork/tools/mcp"
)

func TestRender(t *testing.T) {
	t.Parallel()
	size := int64(3)
	for _, tc := range []struct {
		name string
		res  *sdk.CallToolResult
		want string
	}{
		{"empty", &sdk.CallToolResult{}, ""},
		{"texts", &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "a"}, &sdk.TextContent{Text: "b"}}}, "a\nb"},
		{"structured only", &sdk.CallToolResult{StructuredContent: map[string]any{"free": "42%"}}, `structured content: {"free":"42%"}`},
		{"structured beside other text", &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "disk ok"}}, StructuredContent: []int{1, 2}}, "disk ok\nstructured content: [1,2]"},
		{"structured also as text", &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "{ \"n\": 1 }"}}, StructuredContent: map[string]int{"n": 1}}, `{ "n": 1 }`},
		{"audio", &sdk.CallToolResult{Content: []sdk.Content{&sdk.AudioContent{Data: []byte("abc")}}}, "[audio of unknown type, 3 bytes, not shown]"},
		{"embedded text", &sdk.CallToolResult{Content: []sdk.Content{&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///a.txt", MIMEType: "text/plain", Text: "hello"}}}}, "[resource file:///a.txt (text/plain), 5 bytes, not shown]"},
		{"embedded blob", &sdk.CallToolResult{Content: []sdk.Content{&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///a.bin", Blob: []byte{1, 2}}}}}, "[resource file:///a.bin, 2 bytes, not shown]"},
		{"link", &sdk.CallToolResult{Content: []sdk.Content{&sdk.ResourceLink{URI: "https://x/y", Size: &size}}}, "[resource link https://x/y]"},
	} {
		if got := mcp.Render(tc.res); got != tc.want {
			t.Errorf("%s: render = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestCapOutput(t *testing.T) {
	t.Parallel()
	if got := mcp.CapOutput("short", 1024); got != "short" {
		t.Errorf("CapOutput(short) = %q", got)
	}
	long := strings.Repeat("€", 1000) // 3000 bytes
	got := mcp.CapOutput(long, 1024)
	if len(got) > 1024 {
		t.Errorf("CapOutput = %d bytes, want at most 1024", len(got))
	}
	body, note, ok := strings.Cut(got, "\n[output cut: ")
	if !ok || !strings.HasPrefix(long, body) || len(body)%3 != 0 {
		t.Fatalf("CapOutput = %q, want whole characters of the text, then the note", got)
	}
	if want := "the first " + strconv.Itoa(len(body)) + " of 3000 bytes shown (max_output)]"; note != want {
		t.Errorf("note = %q, want %q", note, want)
	}
}

func TestEnviron(t *testing.T) {
	t.Parallel()
	base := []string{"PATH=/usr/bin", "HOME=/home/a", "OPENAI_API_KEY=sk-secret", "AWS_SECRET_ACCESS_KEY=x", "LANG=C.UTF-8", "TERM"}
	got := mcp.Environ(base, map[string]string{"TOKEN": "t", "PATH": "/opt/bin"})
	want := []string{"HOME=/home/a", "LANG=C.UTF-8", "PATH=/opt/bin", "TOKEN=t"}
	if !slices.Equal(got, want) {
		t.Errorf("Environ = %v, want %v (only the inherited few, env winning)", got, want)
	}
}

func TestInputSchema(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   any
		want string // "" for an error
	}{
		{"nil", nil, `{"properties":{},"type":"object"}`},
		{"no type", map[string]any{"properties": map[string]any{"a": map[string]any{"type": "string"}}}, `{"properties":{"a":{"type":"string"}},"type":"object"}`},
		{"no properties", map[string]any{"type": "object"}, `{"properties":{},"type":"object"}`},
		{"kept as is", map[string]any{"type": "object", "required": []string{"a"}, "properties": map[string]any{}}, `{"properties":{},"required":["a"],"type":"object"}`},
		{"array", map[string]any{"type": "array"}, ""},
		{"not an object", []int{1}, ""},
	} {
		got, err := mcp.InputSchema(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("%s: InputSchema = %s, want an error", tc.name, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: InputSchema = %s, %v; want %s", tc.name, got, err, tc.want)
		}
	}
}

// Tools whose names clash after mapping are not offered, nor is one whose
// schema is no object schema; the status says why. idempotent_tools is
// honoured by the server's tool names.
func TestToolsNotOffered(t *testing.T) {
	t.Parallel()
	srv := sdk.NewServer(&sdk.Implementation{Name: "clash", Version: "1"}, nil)
	ok := func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return text("ok"), nil }
	object := map[string]any{"type": "object"}
	srv.AddTool(&sdk.Tool{Name: "get.file", InputSchema: object}, ok)
	srv.AddTool(&sdk.Tool{Name: "get_file", InputSchema: object}, ok)
	srv.AddTool(&sdk.Tool{Name: "read", InputSchema: object}, ok)
	srv.AddTool(&sdk.Tool{Name: "write", InputSchema: object}, ok)
	m := start(t, mcp.Config{}, inProcess("fs", srv, mcp.ServerConfig{IdempotentTools: []string{"read", "gone"}}))

	if got, want := names(m), []string{"fs__read", "fs__write"}; !slices.Equal(got, want) {
		t.Errorf("Specs() names = %v, want %v", got, want)
	}
	st := status(t, m, "fs")
	for _, want := range []string{`tools "get.file" and "get_file" both map to fs__get_file, so neither is offered`, `idempotent_tools names "gone", which the server does not list`} {
		if st.State != mcp.StateUp || !strings.Contains(st.LastError, want) {
			t.Errorf("Status = %+v, want up with %q", st, want)
		}
	}
	for name, want := range map[string]bool{"fs__read": true, "fs__write": false, "fs__get_file": false, "other__read": false} {
		if got := m.Idempotent(name); got != want {
			t.Errorf("Idempotent(%s) = %v, want %v", name, got, want)
		}
	}
	// The tool loop reads it from the spec: a call of fs__read cut short
	// by a crash is made again, one of fs__write is not.
	for _, s := range m.Specs() {
		if want := s.Name == "fs__read"; s.Idempotent != want {
			t.Errorf("Specs(): %s.Idempotent = %v, want %v", s.Name, s.Idempotent, want)
		}
	}
}
