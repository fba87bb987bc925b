package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/agentwork/agentwork/tools"
)

// Separator separates the server's name from the tool's in the names the
// model sees: fs__read_text_file.
const Separator = tools.ServerSeparator

// maxName is the longest tool name OpenAI and Anthropic accept
// (^[a-zA-Z0-9_-]{1,64}$).
const maxName = 64

// ToolName returns the name the model sees for the tool the server calls
// tool: server + "__" + tool, with every character outside a-z, A-Z, 0-9,
// _ and - replaced by _ (MCP allows dots, for one), and, when that is
// longer than 64 characters, cut to 55 and ended with _ and 8 hex digits
// of the tool's SHA-256, so it stays unique. It fails only for an empty
// tool name. Two tools of one server may map to one name (a.b and a_b):
// the Manager offers neither and says so in the server's status. Tools of
// different servers never do, since a server's name has no "__" and does
// not end in "_" (CheckServerName).
func ToolName(server, tool string) (string, error) {
	if tool == "" {
		return "", errors.New("the server lists a tool without a name")
	}
	var b strings.Builder
	b.Grow(len(server) + len(Separator) + len(tool))
	b.WriteString(server)
	b.WriteString(Separator)
	for _, r := range tool {
		if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) <= maxName {
		return name, nil
	}
	sum := sha256.Sum256([]byte(tool))
	return name[:maxName-9] + "_" + hex.EncodeToString(sum[:4]), nil
}
