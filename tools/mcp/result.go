package mcp

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/agentwork/agentwork/internal/secret"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// render turns a tool result into the text the model reads: text content
// as it is, structured content as JSON (unless a text block already holds
// the same JSON, as the spec asks servers to send), and one line for each
// other block (an image, audio, a resource), which a text model cannot use.
func render(res *sdk.CallToolResult) string {
	var parts []string
	var texts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
			texts = append(texts, c.Text)
		case *sdk.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes, not shown]", orUnknown(c.MIMEType), len(c.Data)))
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes, not shown]", orUnknown(c.MIMEType), len(c.Data)))
		case *sdk.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource link %s%s%s]", c.URI, paren(c.Name), paren(c.MIMEType)))
		case *sdk.EmbeddedResource:
			parts = append(parts, embedded(c.Resource))
		default:
			parts = append(parts, fmt.Sprintf("[%T content, not shown]", c))
		}
	}
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil && !sameJSON(b, texts) {
			parts = append(parts, "structured content: "+string(b))
		}
	}
	return strings.Join(parts, "\n")
}

func embedded(r *sdk.ResourceContents) string {
	if r == nil {
		return "[resource, empty]"
	}
	size := len(r.Blob)
	if r.Text != "" {
		size = len(r.Text)
	}
	return fmt.Sprintf("[resource %s%s, %d bytes, not shown]", r.URI, paren(r.MIMEType), size)
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func orUnknown(s string) string {
	if s == "" {
		return "of unknown type"
	}
	return s
}

// sameJSON reports whether one of texts is the JSON value b.
func sameJSON(b []byte, texts []string) bool {
	var want any
	if json.Unmarshal(b, &want) != nil {
		return false
	}
	for _, t := range texts {
		var got any
		if json.Unmarshal([]byte(t), &got) == nil && reflect.DeepEqual(got, want) {
			return true
		}
	}
	return false
}

// capOutput returns s with secrets cut out, then cut to max bytes, note
// included, at a character boundary, with a note that says it was cut and
// by which setting. The cut leaves no part of a secret (secret.Cut).
func capOutput(s string, max int, setting string, secrets []string) string {
	kept, whole := secret.Cut(s, max, false, secrets)
	if len(kept) == whole {
		return kept
	}
	note := fmt.Sprintf("\n[output cut: the first %%d of %d bytes shown (%s)]", whole, setting)
	keep := max - len(fmt.Sprintf(note, max))
	if keep < 0 {
		keep = 0
	}
	kept, _ = secret.Cut(kept, keep, false, secrets)
	return kept + fmt.Sprintf(note, len(kept))
}
