package heartbeat_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentwork/agentwork/triggers/heartbeat"
)

func TestParseChecklist(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		in        string
		wantEmpty bool
		wantText  string // "" means: do not check
	}{
		{"nothing", "", true, ""},
		{"blank lines", "\n\n  \n\t\n", true, ""},
		{"headings only", "# Heartbeat\n\n## Daily\n###### deep\n#", true, ""},
		{"comment only", "<!-- add your checks here -->", true, ""},
		{"multi-line comment", "# HB\n<!--\n- check disk\n- check mail\n-->\n", true, ""},
		{"unclosed comment hides the rest", "# HB\n<!-- todo\n- check disk", true, ""},
		{"empty task items", "# HB\n- [ ]\n- [x]\n* [ ]\n+\n1.\n2)\n-", true, ""},
		{"rules and setext", "Title\n=====\n---\n***\n___", true, ""},
		{"setext heading only", "Heartbeat\n=========\n", true, ""},
		{"an item over a rule is an item", "- [ ] Check that the backup ran\n---\n", false, ""},
		{"a numbered item over a rule is an item", "1. check disk\n---", false, ""},
		{"setext h2 only", "# HB\n\nDaily\n-----\n", true, ""},
		{"byte-order mark", "\uFEFF# Heartbeat\n\n", true, ""},
		{"byte-order mark before an item", "\uFEFF- check disk", false, "- check disk"},
		{"empty code fence", "# HB\n```\n```\n", true, ""},
		{"empty fence with info string", "~~~yaml\n~~~", true, ""},
		{"code in a fence is text", "```\ndf -h\n```", false, ""},
		{"lone quote marker", ">\n> \n>>", true, ""},
		{"quoted empty item", "> - [ ]", true, ""},
		{"quoted item", "> check disk", false, ""},
		{"zero-width spaces", "\u200b\u200b\n\u2060\n\u200d", true, ""},
		{"nul bytes", "\x00\x00\n# HB\x00\n", true, ""},
		{"front matter is text", "---\ntitle: hb\n---\n# HB\n", false, ""},
		{"a real item", "# HB\n- [ ] Check that the backup ran tonight", false, ""},
		{"plain sentence", "Look at the error rate of the API.", false, ""},
		{"hashtag is not a heading", "#urgent things", false, ""},
		{"seven hashes is text", "####### not a heading", false, ""},
		{"item after a comment on the same line", "<!-- c --> - check disk", false, "- check disk"},
		{"comments are removed from the text", "# HB\n<!-- private note -->\n- check disk  \n", false, "# HB\n\n- check disk"},
		{"crlf", "# HB\r\n- [ ] \r\n- check mail\r\n", false, "# HB\n- [ ]\n- check mail"},
		{"numbered item with text", "1. check disk", false, ""},
		{"task box with text", "- [ ] mail", false, ""},
		{"invalid utf-8 counts as text", "\xff\xfe", false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := heartbeat.ParseChecklist([]byte(c.in))
			if got.Empty() != c.wantEmpty {
				t.Errorf("ParseChecklist(%q).Empty() = %v (items %d), want %v", c.in, got.Empty(), got.Items, c.wantEmpty)
			}
			if c.wantText != "" && got.Text != c.wantText {
				t.Errorf("ParseChecklist(%q).Text = %q, want %q", c.in, got.Text, c.wantText)
			}
		})
	}
}

// FuzzParseChecklist: any input parses; the text is valid UTF-8 without
// comment openers; parsing the text again gives the same result.
func FuzzParseChecklist(f *testing.F) {
	for _, s := range []string{
		"", "# HB\n- [ ] check disk\n", "<!-- x -->", "<!--", "---\na: b\n---\n- x", "1) \n2. y", "\xff<!--\x00-->#",
		"- [x]\n* [ ]\n+ [X] done", "#\n##\n###### x", "<!-<!-- -->->",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := heartbeat.ParseChecklist(data)
		if !utf8.ValidString(c.Text) {
			t.Fatalf("Text is not valid UTF-8: %q", c.Text)
		}
		if strings.Contains(c.Text, "<!--") {
			t.Fatalf("Text still has a comment opener: %q", c.Text)
		}
		if c.Items < 0 || (c.Text == "" && !c.Empty()) {
			t.Fatalf("ParseChecklist(%q) = %+v", data, c)
		}
		again := heartbeat.ParseChecklist([]byte(c.Text))
		if again.Text != c.Text || again.Empty() != c.Empty() {
			t.Fatalf("not stable: %q -> %+v -> %+v", data, c, again)
		}
	})
}
