package memory

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// replaceSection returns doc with the "## title" section's body set to
// body: the lines after its heading up to the next heading of level 1 or
// 2. The title matches case-insensitively. A missing section is added at
// the end; an empty body removes the section, heading and all.
func replaceSection(doc, title, body string) string {
	lines := strings.Split(strings.TrimRight(doc, "\n"), "\n")
	if doc == "" {
		lines = nil
	}
	start, end := -1, len(lines)
	for i, l := range lines {
		if start < 0 {
			if h, ok := heading2(l); ok && strings.EqualFold(h, title) {
				start = i
			}
			continue
		}
		if _, ok := heading2(l); ok || strings.HasPrefix(l, "# ") {
			end = i
			break
		}
	}
	var section []string
	if body != "" {
		section = []string{"## " + title, "", body, ""}
	}
	var out []string
	if start < 0 {
		out = append(lines, "")
		if len(lines) == 0 {
			out = nil
		}
		out = append(out, section...)
	} else {
		out = append(append(append([]string{}, lines[:start]...), section...), lines[end:]...)
	}
	text := strings.TrimSpace(strings.Join(out, "\n"))
	if text == "" {
		return ""
	}
	return text + "\n"
}

// heading2 returns the title of a "## title" line.
func heading2(line string) (string, bool) {
	t, ok := strings.CutPrefix(line, "## ")
	return strings.TrimSpace(t), ok
}

// escapeHeadings returns text with every line that a reader may take for
// a heading of at most maxLevel # (0: of any level) written as text: its
// leading white space and invisible characters dropped, and a backslash
// before it (Markdown's escape: "\\## x" shows "## x", and is no
// heading). A line is read as a reader may: after any line break (see
// isBreak), without leading white space or invisible characters, with
// look-alikes of # (fold). It is how an entry or a section that a run
// writes cannot pass for a heading of the runtime's: an entry's header
// (## <time> · <by>), a day's title, a section.
func escapeHeadings(text string, maxLevel int) string {
	var b strings.Builder
	for text != "" {
		line, rest := text, ""
		if i := strings.IndexFunc(text, isBreak); i >= 0 {
			_, n := utf8.DecodeRuneInString(text[i:])
			line, rest = text[:i+n], text[i+n:]
		}
		if l := headingLevel(line); l > 0 && (maxLevel == 0 || l <= maxLevel) {
			line = "\\" + strings.TrimLeftFunc(line, blank)
		}
		b.WriteString(line)
		text = rest
	}
	return b.String()
}

// headingLevel returns how many # (or look-alikes) start line, after
// white space and invisible characters.
func headingLevel(line string) int {
	n := 0
	for _, r := range strings.TrimLeftFunc(line, blank) {
		if fold(r) != '#' {
			break
		}
		n++
	}
	return n
}

// blank says whether r is white space (not a line break) or does not show.
func blank(r rune) bool { return unicode.IsSpace(r) && !isBreak(r) || fold(r) < 0 }

// Export writes every document into dir as Markdown files (MEMORY.md,
// HEARTBEAT.md, memory/YYYY-MM-DD.md), creating dir, overwriting the
// files it writes and touching no other. It returns the files written.
func Export(dir string, docs []Doc) ([]string, error) {
	var files []string
	for _, d := range docs {
		p := filepath.Join(dir, filepath.FromSlash(d.File))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return files, fmt.Errorf("memory: export: %w", err)
		}
		if err := os.WriteFile(p, []byte(d.Text), 0o644); err != nil {
			return files, fmt.Errorf("memory: export: %w", err)
		}
		files = append(files, d.File)
	}
	return files, nil
}

// ReadDir reads the Markdown files of a memory folder as Export writes
// it: MEMORY.md, HEARTBEAT.md and memory/YYYY-MM-DD.md. It returns them
// as documents (Name and Text), sorted by name; a folder with none of
// them is an error.
func ReadDir(dir string) ([]Doc, error) {
	var docs []Doc
	add := func(name, file string) error {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(file)))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("memory: import: %w", err)
		}
		docs = append(docs, Doc{Name: name, File: file, Text: string(b), Bytes: len(b)})
		return nil
	}
	if err := add(Long, "MEMORY.md"); err != nil {
		return nil, err
	}
	if err := add(Checklist, "HEARTBEAT.md"); err != nil {
		return nil, err
	}
	days, err := filepath.Glob(filepath.Join(dir, "memory", "*.md"))
	if err != nil {
		return nil, err
	}
	for _, p := range days {
		day := strings.TrimSuffix(filepath.Base(p), ".md")
		if err := add(DailyPrefix+day, "memory/"+day+".md"); err != nil {
			return nil, err
		}
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("memory: import: %s holds no MEMORY.md, HEARTBEAT.md or memory/YYYY-MM-DD.md (as agentwork memory export writes them)", dir)
	}
	sort.Slice(docs, func(i, j int) bool { return docs[i].Name < docs[j].Name })
	return docs, nil
}
