package connectors

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/rivo/uniseg"
)

// Runes is the length of s in Unicode code points, the measure of most
// platforms' limits (Discord's 2000, Slack's).
func Runes(s string) int { return utf8.RuneCountInString(s) }

// UTF16 is the length of s in UTF-16 code units, the measure of Telegram's
// 4096: an emoji outside the Basic Multilingual Plane counts two.
func UTF16(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// SendParts sends parts, a split text, in order with send, skipping the
// sent parts an earlier attempt sent (n.SentParts), as Connector.Send
// does, and returns the receipt: Parts counts the parts the destination
// holds, MessageIDs the id send returned for each part it sent ("" is no
// id). It stops at the first error, which names the part when there are
// several ("part 2 of 3: ..."); the receipt then counts the parts before.
//
// After each part but the last it tells the Dispatcher, through ctx, what
// the destination holds so far; the dispatcher records that in the send
// claim before the next part goes, so an instance that dies mid-text
// leaves the parts sent on record and the one that takes over sends only
// the rest. When that record fails, SendParts stops with its error (a
// retryable one) and the receipt of the parts sent.
func SendParts(ctx context.Context, parts []string, sent int, send func(i int, part string) (id string, err error)) (Receipt, error) {
	rec := Receipt{Parts: min(max(sent, 0), len(parts))}
	progress, _ := ctx.Value(progressKey{}).(func(Receipt) error)
	for i := rec.Parts; i < len(parts); i++ {
		id, err := send(i, parts[i])
		if err != nil {
			if len(parts) > 1 {
				err = fmt.Errorf("part %d of %d: %w", i+1, len(parts), err)
			}
			return rec, err
		}
		rec.Parts++
		if id != "" {
			rec.MessageIDs = append(rec.MessageIDs, id)
		}
		if progress != nil && rec.Parts < len(parts) {
			if err := progress(Receipt{Parts: rec.Parts, MessageIDs: slices.Clone(rec.MessageIDs)}); err != nil {
				return rec, err
			}
		}
	}
	return rec, nil
}

// progressKey is the context key of the function SendParts tells the
// parts confirmed so far.
type progressKey struct{}

// withProgress returns ctx carrying f for SendParts.
func withProgress(ctx context.Context, f func(Receipt) error) context.Context {
	return context.WithValue(ctx, progressKey{}, f)
}

// Split cuts text into parts no longer than limit (measured by length) for
// a platform that takes at most limit per message. It cuts at the last
// paragraph break that fits, else the last line break, else the last
// space (each only in the second half of the part, so that parts are not
// needlessly short), else between two graphemes: never inside a UTF-8 sequence or a
// grapheme (an emoji with its modifiers, a flag, a letter with its accents
// stay whole). The white space a cut falls on is left out; nothing else is
// lost, added or reordered. A grapheme longer than limit on its own (a
// letter with thousands of combining marks) starts a part and is cut
// between its runes, keeping every rune: the parts after the first show
// the rest of its marks on no letter. Every part fits the limit, unless
// limit is shorter than one rune (then that rune is a part alone).
// length must be the sum of the lengths of a string's runes. limit <= 0 or a text that fits returns text alone; a
// longer text of white space alone has no parts.
func Split(text string, limit int, length func(string) int) []string {
	if limit <= 0 || length(text) <= limit {
		return []string{text}
	}
	var parts []string
	rest := text
	for length(rest) > limit {
		end, next := cut(rest, limit, length)
		if part := rest[:end]; strings.TrimSpace(part) != "" {
			parts = append(parts, part)
		}
		rest = rest[next:]
	}
	if strings.TrimSpace(rest) != "" {
		parts = append(parts, rest)
	}
	return parts
}

// cut returns where the first part of s ends (end) and the next begins
// (next): at the best break within limit.
func cut(s string, limit int, length func(string) int) (end, next int) {
	// The latest white-space run starting within the limit, by kind: a
	// paragraph break (two line breaks), a line break, any space.
	var para, line, space [2]int
	n, pos, state := 0, 0, -1
	hard := 0 // the last grapheme boundary within the limit
	for pos < len(s) {
		g, _, _, st := uniseg.FirstGraphemeClusterInString(s[pos:], state)
		state = st
		n += length(g)
		if n > limit {
			break
		}
		if isSpace(g) {
			// A white-space run is one break: find its end, counting it.
			runEnd, breaks := pos+len(g), strings.Count(g, "\n")
			for runEnd < len(s) {
				h, _, _, st := uniseg.FirstGraphemeClusterInString(s[runEnd:], state)
				if !isSpace(h) {
					break
				}
				state = st
				n += length(h)
				breaks += strings.Count(h, "\n")
				runEnd += len(h)
			}
			if pos > 0 {
				switch {
				case breaks >= 2:
					para = [2]int{pos, runEnd}
				case breaks == 1:
					line = [2]int{pos, runEnd}
				default:
					space = [2]int{pos, runEnd}
				}
			}
			g = s[pos:runEnd]
		}
		pos += len(g)
		if n <= limit {
			hard = pos
		}
	}
	// The best kind of break in the second half of the part; failing
	// that, the latest break of any kind rather than a cut inside a word.
	var latest [2]int
	for _, b := range [][2]int{para, line, space} {
		if b[0] > 0 && b[0] >= hard/2 {
			return b[0], b[1]
		}
		if b[0] > latest[0] {
			latest = b
		}
	}
	if latest[0] > 0 {
		return latest[0], latest[1]
	}
	if hard == 0 {
		hard = cutRunes(s, limit, length)
	}
	return hard, hard
}

// cutRunes returns where the first part of s ends when its first grapheme
// is longer than limit: after the last of its runes that fits, and after
// its first rune at least.
func cutRunes(s string, limit int, length func(string) int) int {
	g, _, _, _ := uniseg.FirstGraphemeClusterInString(s, -1)
	n, end := 0, 0
	for end < len(g) {
		_, size := utf8.DecodeRuneInString(g[end:])
		if n += length(g[end : end+size]); n > limit && end > 0 {
			break
		}
		end += size
	}
	return end
}

// isSpace reports whether grapheme g is white space alone.
func isSpace(g string) bool {
	for _, r := range g {
		if !unicode.IsSpace(r) {
			return false
		}
	}
	return g != ""
}
