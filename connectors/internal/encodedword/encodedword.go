// Package encodedword writes the header values a reader sees decoded (an
// email's Subject, ntfy's X-Title and X-Tags) as RFC 2047 encoded words,
// with the standard library's mime.BEncoding.
package encodedword

import (
	"encoding/base64"
	"mime"
	"strings"
)

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
