// Package headertext makes the header text a reader sees (an email's
// Subject, ntfy's X-Title and X-Tags): a {source}/{name} template filled
// in as one safe line, written as RFC 2047 encoded words with the
// standard library's mime.BEncoding.
package headertext

import (
	"encoding/base64"
	"mime"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxLine is the longest line Fill makes, in characters.
const maxLine = 200

// Fill returns template (a subject, a title) with {source} and {name}
// replaced by source and name ("{source}/{name}" by source alone when name
// is empty), as one line: control characters, line breaks among them,
// become spaces (so no header can be smuggled in), invalid UTF-8 becomes
// U+FFFD, at most 200 characters ("…" marks a cut), trimmed.
func Fill(template, source, name string) string {
	if name == "" {
		template = strings.ReplaceAll(template, "{source}/{name}", "{source}")
	}
	s := strings.NewReplacer("{source}", source, "{name}", name).Replace(template)
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if utf8.RuneCountInString(s) > maxLine {
		s = string([]rune(s)[:maxLine-1]) + "…"
	}
	return strings.TrimSpace(s)
}

// maxWord is how many bytes of text one encoded word holds, as
// mime.BEncoding cuts them: its 75-character limit less
// "=?utf-8?b?" and "?=".
const maxWord = 45

// Encode returns s as a header value that a MIME decoder (a mail client,
// ntfy's mime.WordDecoder) reads back as s: s itself when it is printable
// ASCII without "=?", else base64 encoded words of at most 75 characters,
// separated by a space (a mail header may fold its line there).
func Encode(s string) string {
	enc := mime.BEncoding.Encode("utf-8", s)
	if enc != s || !strings.Contains(s, "=?") {
		return enc
	}
	// Printable ASCII needs no encoding to mime.BEncoding, but a decoder
	// would take its "=?" for the start of an encoded word, and show
	// something else: encode it too.
	var words []string
	for s != "" {
		n := min(len(s), maxWord)
		words = append(words, "=?utf-8?b?"+base64.StdEncoding.EncodeToString([]byte(s[:n]))+"?=")
		s = s[n:]
	}
	return strings.Join(words, " ")
}
