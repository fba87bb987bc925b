package mcp_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/tools/mcp"
)

// modelName is what OpenAI and Anthropic accept as a tool name.
var modelName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func TestToolName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100)
	for _, tc := range []struct {
		server, tool, want string
	}{
		{"fs", "read_text_file", "fs__read_text_file"},
		{"fs", "Read-File2", "fs__Read-File2"},
		{"gh", "repos.list", "gh__repos_list"},
		{"gh", "list repos/äöü", "gh__list_repos____"},
		{"srv", long, "srv__" + strings.Repeat("x", 50) + "_09ecb6eb"},
		{"srv", long + "y", "srv__" + strings.Repeat("x", 50) + "_a8724c85"},
	} {
		got, err := mcp.ToolName(tc.server, tc.tool)
		if err != nil || got != tc.want {
			t.Errorf("ToolName(%q, %q) = %q, %v; want %q", tc.server, tc.tool, got, err, tc.want)
		}
	}
	if _, err := mcp.ToolName("fs", ""); err == nil {
		t.Error(`ToolName("fs", "") = nil error, want one`)
	}
}

// Every name fits the model APIs, starts with the server and __, and the
// same tool always gets the same name.
func FuzzToolName(f *testing.F) {
	for _, s := range []string{"read_file", "a.b", "ünïcödé", strings.Repeat("long", 40), "a\x00b"} {
		f.Add("fs", s)
	}
	f.Fuzz(func(t *testing.T, server, tool string) {
		if mcp.CheckServerName(server) != nil {
			server = "fs"
		}
		got, err := mcp.ToolName(server, tool)
		if tool == "" {
			if err == nil {
				t.Fatal("no error for an empty tool name")
			}
			return
		}
		if err != nil || !modelName.MatchString(got) || !strings.HasPrefix(got, server+"__") {
			t.Fatalf("ToolName(%q, %q) = %q, %v", server, tool, got, err)
		}
		if again, _ := mcp.ToolName(server, tool); again != got {
			t.Fatalf("ToolName(%q, %q) = %q, then %q", server, tool, got, again)
		}
		if first, _, _ := strings.Cut(got, mcp.Separator); first != server {
			t.Fatalf("ToolName(%q, %q) = %q: the text before the first __ is %q, not the server", server, tool, got, first)
		}
	})
}
