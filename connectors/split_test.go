package connectors_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/rivo/uniseg"

	"github.com/agentwork/agentwork/connectors"
)

// checkSplit asserts the promises of Split: parts within the limit (a part
// of one rune longer than the limit aside: nothing shorter can carry it),
// valid UTF-8, no grapheme cut unless it is longer than the limit on its
// own (then it is cut between runes), and the text's non-space characters
// all there in order, with white space changed only at the cuts.
func checkSplit(t *testing.T, text string, limit int, length func(string) int) []string {
	t.Helper()
	parts := connectors.Split(text, limit, length)
	graphemes := map[string]bool{}
	var long []string // graphemes longer than the limit
	g := uniseg.NewGraphemes(text)
	for g.Next() {
		graphemes[g.Str()] = true
		if length(g.Str()) > limit {
			long = append(long, g.Str())
		}
	}
	for i, p := range parts {
		if !utf8.ValidString(p) {
			t.Fatalf("part %d is not valid UTF-8", i)
		}
		if l := length(p); l > limit && utf8.RuneCountInString(p) > 1 {
			t.Fatalf("part %d has length %d > limit %d", i, l, limit)
		}
		if strings.TrimSpace(p) == "" && p != text {
			t.Fatalf("part %d is blank", i)
		}
		pg := uniseg.NewGraphemes(p)
		for pg.Next() {
			if !graphemes[pg.Str()] && !slices.ContainsFunc(long, func(l string) bool { return strings.Contains(l, pg.Str()) }) {
				t.Fatalf("part %d holds %q, a cut grapheme", i, pg.Str())
			}
		}
	}
	joined := strings.Join(parts, "")
	if strip(joined) != strip(text) {
		t.Fatalf("parts lost, added or reordered characters:\n got %q\nwant %q", preview(strip(joined)), preview(strip(text)))
	}
	// White space may go only where a part ends.
	if len(parts) > 0 && !strings.Contains(text, parts[0]) {
		t.Fatalf("part 0 is not in the text")
	}
	return parts
}

// strip is s without white space (unicode.IsSpace, what Split cuts at).
func strip(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, s)
}

func preview(s string) string {
	if len(s) > 80 {
		return s[:40] + "..." + s[len(s)-40:]
	}
	return s
}

func TestSplitFits(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"short", strings.Repeat("x", 4096)} {
		if got := connectors.Split(text, 4096, connectors.UTF16); !slices.Equal(got, []string{text}) {
			t.Errorf("Split(%d chars) = %d parts, want the text alone", len(text), len(got))
		}
	}
	if got := connectors.Split("abc", 0, connectors.Runes); !slices.Equal(got, []string{"abc"}) {
		t.Errorf("limit 0 = %q, want the text alone", got)
	}
}

func TestSplitPrefersParagraphsThenLinesThenWords(t *testing.T) {
	t.Parallel()
	para := strings.Repeat("a", 30) + "\n\n" + strings.Repeat("b", 10) + "\n" + strings.Repeat("c", 5) + " " + strings.Repeat("d", 20)
	tests := []struct {
		name  string
		text  string
		limit int
		want  []string
	}{
		{"paragraph", para, 50, []string{strings.Repeat("a", 30), strings.Repeat("b", 10) + "\n" + strings.Repeat("c", 5) + " " + strings.Repeat("d", 20)}},
		{"line", "one two three\nfour five six seven", 24, []string{"one two three", "four five six seven"}},
		{"word", "alpha beta gamma delta epsilon", 12, []string{"alpha beta", "gamma delta", "epsilon"}},
		{"hard", "abcdefghij", 4, []string{"abcd", "efgh", "ij"}},
		{"a paragraph break too early loses to a line break", "ab\n\n" + strings.Repeat("x", 20) + "\n" + strings.Repeat("y", 10), 30, []string{"ab\n\n" + strings.Repeat("x", 20), strings.Repeat("y", 10)}},
		{"trailing space is not a part", "abcd     ", 4, []string{"abcd"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := checkSplit(t, tc.text, tc.limit, connectors.Runes)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Split = %q, want %q", got, tc.want)
			}
		})
	}
}

// An emoji (two UTF-16 units, several code points with a skin tone and a
// ZWJ sequence) across the boundary moves whole to the next part.
func TestSplitKeepsGraphemesWhole(t *testing.T) {
	t.Parallel()
	for _, emoji := range []string{"😀", "👍🏽", "👩‍👩‍👧‍👦", "🇩🇪", "é"} {
		for pad := 4090; pad <= 4096; pad++ {
			text := strings.Repeat("a", pad) + emoji + strings.Repeat("b", 900)
			parts := checkSplit(t, text, 4096, connectors.UTF16)
			if len(parts) != 2 {
				t.Fatalf("%q at %d: %d parts, want 2", emoji, pad, len(parts))
			}
			if !strings.Contains(parts[0], emoji) && !strings.HasPrefix(parts[1], emoji) {
				t.Fatalf("%q at %d: the emoji is not whole in either part", emoji, pad)
			}
		}
	}
}

// A grapheme longer than the limit on its own is cut between its runes,
// so that every part fits: a family emoji (11 UTF-16 units) at a limit of
// 4, and a letter with 5,000 combining marks (one grapheme) at each
// platform's limit and measure.
func TestSplitGraphemeLongerThanLimit(t *testing.T) {
	t.Parallel()
	family := "👩‍👩‍👧‍👦" // 👩 ZWJ 👩 ZWJ 👧 ZWJ 👦: 11 UTF-16 units
	parts := checkSplit(t, "ab"+family+"cd", 4, connectors.UTF16)
	if want := []string{"ab", "👩\u200d", "👩\u200d", "👧\u200d", "👦cd"}; !slices.Equal(parts, want) {
		t.Fatalf("parts = %q, want %q", parts, want)
	}
	zalgo := "a" + strings.Repeat("\u0301", 5000)
	bytes := func(s string) int { return len(s) }
	for _, tc := range []struct {
		name   string
		limit  int
		length func(string) int
	}{
		{"telegram", 4096, connectors.UTF16},
		{"discord", 2000, connectors.Runes},
		{"slack", 4000, connectors.Runes},
		{"ntfy", 4095, bytes},
		{"odd byte limit", 4, bytes}, // U+0301 is 2 bytes: a part of 3 would cut it
	} {
		for _, text := range []string{zalgo, "Alert: " + zalgo + " is the word.", zalgo + zalgo} {
			parts := checkSplit(t, text, tc.limit, tc.length)
			if len(parts) < 2 {
				t.Errorf("%s: %d parts, want the grapheme cut", tc.name, len(parts))
			}
			if !strings.Contains(text, " ") && strings.Join(parts, "") != text {
				t.Errorf("%s: the parts joined are not the text: a cut lost or added runes", tc.name)
			}
		}
	}
}

// Random texts of words, emoji, accents and white space, at random limits.
func TestSplitRandom(t *testing.T) {
	t.Parallel()
	atoms := []string{"word", "longerword", "é", "👍🏽", "🇩🇪", "日本語", " ", " ", "\n", "\n\n", "\t", "x", strings.Repeat("z", 40)}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		var b strings.Builder
		for range rng.IntN(400) {
			b.WriteString(atoms[rng.IntN(len(atoms))])
		}
		limit := 8 + rng.IntN(120)
		length := connectors.Runes
		if i%2 == 0 {
			length = connectors.UTF16
		}
		checkSplit(t, b.String(), limit, length)
	}
}

func TestLengths(t *testing.T) {
	t.Parallel()
	if got := connectors.UTF16("a😀é"); got != 4 {
		t.Errorf("UTF16 = %d, want 4", got)
	}
	if got := connectors.Runes("a😀é"); got != 3 {
		t.Errorf("Runes = %d, want 3", got)
	}
}

// Every part fits its limit, for each platform's measure, down to a limit
// of one rune's greatest length (4 bytes, 2 UTF-16 units); no text is
// refused or changed beyond its cuts.
func FuzzSplit(f *testing.F) {
	f.Add("hello world\n\nthis is 👍🏽 a test", 7)
	f.Add("a"+strings.Repeat("\u0301", 300), 10)
	f.Add("👩‍👩‍👧‍👦 x"+strings.Repeat("\u0301", 9), 5)
	bytes := func(s string) int { return len(s) }
	f.Fuzz(func(t *testing.T, text string, limit int) {
		if !utf8.ValidString(text) || limit < 1 || limit > 1000 {
			t.Skip()
		}
		for _, m := range []struct {
			length func(string) int
			rune   int // the longest rune by this measure
		}{{connectors.UTF16, 2}, {connectors.Runes, 1}, {bytes, 4}} {
			parts := checkSplit(t, text, max(limit, m.rune), m.length)
			for i, p := range parts {
				if l := m.length(p); l > max(limit, m.rune) {
					t.Fatalf("part %d has length %d, over the limit %d", i, l, max(limit, m.rune))
				}
			}
		}
	})
}

// SendParts sends from the parts an earlier attempt sent, stops at a
// failing part, and names it.
func TestSendParts(t *testing.T) {
	t.Parallel()
	parts := []string{"a", "b", "c"}
	fail := errors.New("down")
	for _, tc := range []struct {
		name    string
		sent    int
		failAt  int // -1: none
		want    connectors.Receipt
		sends   string
		wantErr string
	}{
		{"all", 0, -1, connectors.Receipt{Parts: 3, MessageIDs: []string{"id-a", "id-b", "id-c"}}, "abc", ""},
		{"resumed", 1, -1, connectors.Receipt{Parts: 3, MessageIDs: []string{"id-b", "id-c"}}, "bc", ""},
		{"all sent before", 5, -1, connectors.Receipt{Parts: 3}, "", ""},
		{"negative", -1, -1, connectors.Receipt{Parts: 3, MessageIDs: []string{"id-a", "id-b", "id-c"}}, "abc", ""},
		{"second fails", 0, 1, connectors.Receipt{Parts: 1, MessageIDs: []string{"id-a"}}, "ab", "part 2 of 3: down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var sends string
			rec, err := connectors.SendParts(t.Context(), parts, tc.sent, func(i int, part string) (string, error) {
				sends += part
				if i == tc.failAt {
					return "", fail
				}
				return "id-" + part, nil
			})
			if sends != tc.sends || rec.Parts != tc.want.Parts || !slices.Equal(rec.MessageIDs, tc.want.MessageIDs) {
				t.Errorf("SendParts sent %q, receipt %+v; want %q, %+v", sends, rec, tc.sends, tc.want)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr || !errors.Is(err, fail)) {
				t.Errorf("SendParts = %v, want %q", err, tc.wantErr)
			}
		})
	}
	// One part: the error is the send's own.
	if _, err := connectors.SendParts(t.Context(), []string{"x"}, 0, func(int, string) (string, error) { return "", fail }); err != fail {
		t.Errorf("SendParts of one part = %v, want the send's error as it is", err)
	}
}
