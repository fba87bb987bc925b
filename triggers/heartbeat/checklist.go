package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/tools/memory"
)

// MaxChecklistBytes is the largest checklist read; a larger file skips the
// run (no-checklist) instead of sending a huge prompt.
const MaxChecklistBytes = 256 << 10

// Checklist is a parsed HEARTBEAT.md.
type Checklist struct {
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
func (c Checklist) Empty() bool { return c.Items == 0 }

// ParseChecklist parses the text of a checklist. It accepts any bytes;
// invalid UTF-8 is replaced.
//
// Invisible characters (a byte-order mark, zero-width spaces, NUL and
// other control bytes) are dropped first, so a file that holds only them
// is empty. A setext heading ("Title" over "====="), a code fence without
// code and a block quote marker without text carry nothing either.
func ParseChecklist(data []byte) Checklist {
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
	return Checklist{Text: strings.TrimSpace(strings.Join(lines, "\n")), Items: items}
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

// Checklist statuses carried by a request whose checklist cannot be used.
const (
	checklistEmpty   = "empty"
	checklistMissing = "missing"
)

// ReasonNoChecklist is the skip reason when the checklist file is missing,
// unreadable or too large.
const ReasonNoChecklist = "no-checklist"

// readChecklist reads and parses path. status is "" when the checklist is
// usable, else checklistEmpty or checklistMissing with detail saying why.
func readChecklist(path string) (c Checklist, status, detail string) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return c, checklistMissing, fmt.Sprintf("%s does not exist: create it (see examples/quickstart/HEARTBEAT.md) or set heartbeat.checklist", path)
		}
		return c, checklistMissing, fmt.Sprintf("cannot read %s: %v", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxChecklistBytes+1))
	if err != nil {
		return c, checklistMissing, fmt.Sprintf("cannot read %s: %v", path, err)
	}
	if len(data) > MaxChecklistBytes {
		return c, checklistMissing, fmt.Sprintf("%s is larger than %d KiB: shorten it", path, MaxChecklistBytes>>10)
	}
	c = ParseChecklist(data)
	if c.Empty() {
		return c, checklistEmpty, fmt.Sprintf("%s has no items (only headings, comments or empty list items)", path)
	}
	return c, "", ""
}

// Memory is where a checklist kept in memory lives
// (heartbeat.checklist_in_memory): a *memory.Store of tools/memory. Its
// methods honour ctx and are safe for concurrent use.
type Memory interface {
	// Read returns the document called name; memory.ErrNotFound when it
	// was never written.
	Read(ctx context.Context, name string) (memory.Doc, error)
	// Put writes the document called name; with rev, only while it is at
	// *rev (0: while it does not exist), else memory.ErrConflict.
	Put(ctx context.Context, name, text, by string, rev *uint64) (memory.Doc, error)
}

// checklistNow reads the checklist as a run uses it now: from the file,
// or from the memory document (copying the file into it when the
// document was never written). name is how the prompt names it. An error
// is one of the memory (the fire is tried again); every other problem is
// a status with its detail, as from readChecklist.
func (h *Heartbeat) checklistNow(ctx context.Context) (c Checklist, name, status, detail string, err error) {
	if !h.cfg.ChecklistInMemory {
		c, status, detail = readChecklist(h.checklist)
		return c, filepath.Base(h.checklist), status, detail, nil
	}
	d, err := h.memory.Read(ctx, memory.Checklist)
	if errors.Is(err, memory.ErrNotFound) {
		d, status, detail, err = h.seedChecklist(ctx)
		if status != "" || err != nil {
			return c, "", status, detail, err
		}
	}
	if err != nil {
		return c, "", "", "", fmt.Errorf("read the checklist from memory: %w", err)
	}
	name = fmt.Sprintf("%s in your memory, revision %d", d.File, d.Revision)
	c = ParseChecklist([]byte(d.Text))
	if c.Empty() {
		return c, name, checklistEmpty, fmt.Sprintf("the checklist in memory (revision %d) has no items (only headings, comments or empty list items): agentwork memory edit checklist", d.Revision), nil
	}
	return c, name, "", "", nil
}

// seedChecklist copies the checklist file into the memory document that
// was never written, once (a create: of instances that race, one writes
// and the others read what it wrote).
func (h *Heartbeat) seedChecklist(ctx context.Context) (d memory.Doc, status, detail string, err error) {
	data, err := os.ReadFile(h.checklist)
	if errors.Is(err, fs.ErrNotExist) {
		return d, checklistMissing, fmt.Sprintf("the checklist in memory is empty and %s, which would fill it, does not exist: write it with agentwork memory edit checklist", h.checklist), nil
	}
	if err != nil {
		return d, checklistMissing, fmt.Sprintf("the checklist in memory is empty and %s cannot be read: %v", h.checklist, err), nil
	}
	var none uint64
	d, err = h.memory.Put(ctx, memory.Checklist, string(data), "heartbeat: copied from "+filepath.Base(h.checklist), &none)
	switch {
	case errors.Is(err, memory.ErrConflict):
		d, err = h.memory.Read(ctx, memory.Checklist)
	case errors.Is(err, memory.ErrTooLarge):
		return d, checklistMissing, fmt.Sprintf("%s cannot fill the checklist in memory: %v", h.checklist, err), nil
	case err == nil:
		h.log.Info("checklist copied into memory", zap.String("from", h.checklist), zap.Uint64("revision", d.Revision))
	}
	return d, "", "", err
}
