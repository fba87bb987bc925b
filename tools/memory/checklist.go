package memory

// The heartbeat's checklist as the heartbeat reads it: which text holds
// items and which is empty. The heartbeat (triggers/heartbeat) and
// checklist_update share this one rule, so the agent cannot write a
// checklist the heartbeat would skip as empty.

import (
	"strings"
	"unicode"
)

// ParsedChecklist is a parsed HEARTBEAT.md.
type ParsedChecklist struct {
	// Text is the checklist as the model sees it: HTML comments removed,
	// trailing blanks trimmed.
	Text string
	// Items counts the lines that say something: not blank, not a heading,
	// not a rule, not an empty list item.
	Items int
}

// Empty reports whether the checklist is effectively empty: only headings,
// blank lines, HTML comments, horizontal rules and list items without text
// ("- [ ]"). An empty checklist skips the run without calling the model.
func (c ParsedChecklist) Empty() bool { return c.Items == 0 }

// ParseChecklist parses the text of a checklist. It accepts any bytes;
// invalid UTF-8 is replaced.
//
// Invisible characters (a byte-order mark, zero-width spaces, NUL and
// other control bytes) are dropped first, so a file that holds only them
// is empty. A setext heading ("Title" over "====="), a code fence without
// code and a block quote marker without text carry nothing either.
func ParseChecklist(data []byte) ParsedChecklist {
	text := strings.Map(visible, strings.ToValidUTF8(string(data), "\uFFFD"))
	text = stripComments(strings.ReplaceAll(text, "\r\n", "\n"))
	lines := strings.Split(text, "\n")
	items := 0
	fenced := false // inside a code fence
	for i, l := range lines {
		lines[i] = strings.TrimRightFunc(l, unicode.IsSpace)
		t := unquote(strings.TrimSpace(l))
		switch {
		case isFence(t):
			fenced = !fenced
		case fenced:
			if t != "" {
				items++
			}
		case blankLine(t), setextTitle(lines, i):
		default:
			items++
		}
	}
	return ParsedChecklist{Text: strings.TrimSpace(strings.Join(lines, "\n")), Items: items}
}

// visible drops characters that show nothing: control characters other
// than tab and newline, and format characters (byte-order mark, zero-width
// space and joiners, word joiner).
func visible(r rune) rune {
	if r == '\t' || r == '\n' || r == '\r' {
		return r
	}
	if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
		return -1
	}
	return r
}

// unquote strips block quote markers ("> ") from the start of t.
func unquote(t string) string {
	for strings.HasPrefix(t, ">") {
		t = strings.TrimSpace(t[1:])
	}
	return t
}

// isFence reports whether t opens or closes a code fence: three or more
// backticks or tildes, then an optional info string.
func isFence(t string) bool {
	for _, f := range []string{"```", "~~~"} {
		if strings.HasPrefix(t, f) {
			return true
		}
	}
	return false
}

// setextTitle reports whether line i is the text of a setext heading: a
// line after a blank line (or the file's start) and followed by a line of
// only '=' or only '-'. A line after a rule stays text, so YAML front
// matter ("---", "title: x", "---") is not mistaken for a heading.
func setextTitle(lines []string, i int) bool {
	if i+1 >= len(lines) || (i > 0 && strings.TrimSpace(lines[i-1]) != "") {
		return false
	}
	// A list item, a quote, a heading or a fence is never a setext title
	// (CommonMark): "- [ ] check the backup" over "---" is an item and a rule.
	t := strings.TrimSpace(lines[i])
	if _, item := cutListMarker(t); item || strings.HasPrefix(t, ">") || strings.HasPrefix(t, "#") || isFence(t) {
		return false
	}
	u := strings.TrimSpace(lines[i+1])
	return u != "" && (strings.Trim(u, "=") == "" || strings.Trim(u, "-") == "")
}

// stripComments removes <!-- ... --> comments; an unclosed comment runs to
// the end, as in HTML. It repeats until no opener is left, so removing one
// comment cannot leave a new one behind ("<!-<!-- -->-").
func stripComments(s string) string {
	for strings.Contains(s, "<!--") {
		s = stripOnce(s)
	}
	return s
}

func stripOnce(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "<!--")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		j := strings.Index(s[i+4:], "-->")
		if j < 0 {
			return b.String()
		}
		s = s[i+4+j+3:]
	}
}

// blankLine reports whether a trimmed line carries no content.
func blankLine(t string) bool {
	if t == "" {
		return true
	}
	// ATX heading: 1-6 '#' then a space or nothing.
	if h := strings.TrimLeft(t, "#"); len(t)-len(h) >= 1 && len(t)-len(h) <= 6 && (h == "" || h[0] == ' ' || h[0] == '\t') {
		return true
	}
	// Horizontal rule or setext underline: only -, *, _, = (and spaces).
	if strings.Trim(t, "-*_= \t") == "" {
		return true
	}
	// Empty list item: a marker, an optional task box, nothing else.
	rest, ok := cutListMarker(t)
	if !ok {
		return false
	}
	rest = strings.TrimSpace(rest)
	for _, box := range []string{"[ ]", "[x]", "[X]", "[]"} {
		rest = strings.TrimSpace(strings.TrimPrefix(rest, box))
	}
	return rest == ""
}

// cutListMarker strips "-", "*", "+" or "1." / "1)" at the start of t.
func cutListMarker(t string) (string, bool) {
	if t[0] == '-' || t[0] == '*' || t[0] == '+' {
		if len(t) == 1 || t[1] == ' ' || t[1] == '\t' {
			return t[1:], true
		}
		return "", false
	}
	n := 0
	for n < len(t) && n < 9 && t[n] >= '0' && t[n] <= '9' {
		n++
	}
	if n > 0 && n < len(t) && (t[n] == '.' || t[n] == ')') && (n+1 == len(t) || t[n+1] == ' ' || t[n+1] == '\t') {
		return t[n+1:], true
	}
	return "", false
}
