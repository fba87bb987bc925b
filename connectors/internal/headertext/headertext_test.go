package headertext_test

import (
	"mime"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/agentwork/agentwork/connectors/internal/headertext"
)

func TestFill(t *testing.T) {
	t.Parallel()
	const def = "agentwork: {source}/{name}"
	for _, tc := range []struct{ template, source, name, want string }{
		{def, "heartbeat", "default", "agentwork: heartbeat/default"},
		{def, "task", "", "agentwork: task"},
		{"[{source}] {name} report", "cron", "sales", "[cron] sales report"},
		{def, "heartbeat", "a\r\nBcc: evil@example.com", "agentwork: heartbeat/a  Bcc: evil@example.com"},
		{" {name}\t", "x", "bad\xffname", "bad\uFFFDname"},
		{strings.Repeat("日", 199) + "{name}", "", "ab", strings.Repeat("日", 199) + "…"},
		{strings.Repeat("日", 198) + "{name}", "", "ab", strings.Repeat("日", 198) + "ab"},
	} {
		if got := headertext.Fill(tc.template, tc.source, tc.name); got != tc.want {
			t.Errorf("Fill(%q, %q, %q) = %q, want %q", tc.template, tc.source, tc.name, got, tc.want)
		}
	}
}

func TestEncode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		plain bool // sent as it is
	}{
		{"agentwork: heartbeat/default", true},
		{"", true},
		{"tab\tand spaces  ", true},
		{"Größe: 日本語 🚀", false},
		{"=?utf-8?q?pwned?= default", false},
		{"ASCII with =? inside, long enough to need more than one encoded word of the forty-five bytes each", false},
		{strings.Repeat("é", 100), false},
	} {
		got := headertext.Encode(tc.in)
		if (got == tc.in) != tc.plain {
			t.Errorf("Encode(%q) = %q, want it encoded: %v", tc.in, got, !tc.plain)
		}
		checkWords(t, tc.in, got)
	}
}

// checkWords fails t unless enc, Encode(s), decodes back to s and its
// encoded words keep RFC 2047's 75-character limit.
func checkWords(t *testing.T, s, enc string) {
	t.Helper()
	var dec mime.WordDecoder
	if back, err := dec.DecodeHeader(enc); err != nil || back != s {
		t.Errorf("DecodeHeader(Encode(%q)) = %q, %v; want it back", s, back, err)
	}
	if enc == s {
		return
	}
	for _, w := range strings.Split(enc, " ") {
		if len(w) > 75 || !strings.HasPrefix(w, "=?utf-8?b?") {
			t.Errorf("Encode(%q) has the word %q, want =?utf-8?b?...?= of at most 75 characters", s, w)
		}
	}
}

// FuzzEncode: whatever the text (a title or subject, control characters
// already replaced), a decoder reads it back.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"plain", "=?utf-8?q?x?=", "Größe 🚀", "a =? b ?= c", strings.Repeat("x=?", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\t' }) {
			return
		}
		checkWords(t, s, headertext.Encode(s))
	})
}
