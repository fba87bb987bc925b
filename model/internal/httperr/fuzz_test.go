package httperr_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentwork/agentwork/model/internal/httperr"
)

// FuzzServerMessage: any error body gives one short line of valid UTF-8,
// never a panic.
func FuzzServerMessage(f *testing.F) {
	for _, seed := range []string{
		`{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
		`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
		`{"error":{"message":"x","code":429}}`,
		`{"error":"model not found"}`, `{"message":"m"}`, `{"detail":"d"}`, `{"detail":[{"loc":["body"]}]}`,
		"<html>\n502</html>", "", "null", `{"error":null}`, "\xff\xfe", `{"error":{"message":"` + strings.Repeat("é", 200) + `"}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s := httperr.ServerMessage(body)
		if !utf8.ValidString(s) {
			t.Fatalf("ServerMessage() = %q, not valid UTF-8", s)
		}
		if strings.ContainsAny(s, "\r\n") {
			t.Fatalf("ServerMessage() = %q, more than one line", s)
		}
		if len(s) > 300+len(" ...") {
			t.Fatalf("ServerMessage() is %d bytes, want at most 304", len(s))
		}
	})
}
