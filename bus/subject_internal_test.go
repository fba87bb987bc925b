package bus

import (
	"regexp"
	"strings"
	"testing"
)

// tokenRE is the rule ValidToken and bus.prefix kept before it became a
// loop over the bytes: the loop must accept exactly what it accepted.
var tokenRE = regexp.MustCompile(`^[a-z0-9_-]+$`)

func TestTokenCharsIsTheRegexp(t *testing.T) {
	t.Parallel()
	check := func(s string) {
		t.Helper()
		want := tokenRE.MatchString(s)
		if got := tokenChars(s); got != want {
			t.Errorf("tokenChars(%q) = %v, want %v (as %s)", s, got, want, tokenRE)
		}
		if got, want := ValidToken(s), want && len(s) <= 64; got != want {
			t.Errorf("ValidToken(%q) = %v, want %v", s, got, want)
		}
	}
	// Every string of one and of two bytes, and each byte before, after
	// and inside a good token.
	for a := range 256 {
		check(string([]byte{byte(a)}))
		check(string([]byte{byte(a)}) + "ok")
		check("ok" + string([]byte{byte(a)}))
		check("o" + string([]byte{byte(a)}) + "k")
		for b := range 256 {
			check(string([]byte{byte(a), byte(b)}))
		}
	}
	for _, s := range []string{
		"", "a", "z", "0", "9", "_", "-", "--", "__", "sales-report_2",
		"A", "Sales", "sales report", " sales", "sales ", "sales.report", "sales*", "sales>",
		"sales\n", "\nsales", "sales\x00", "ok\r\n", "a$", "^a",
		"café", "ｓales", "sales\u00e9", "\xff", "ok\xffok", "\xc3", "ok\xc3\xa9",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 65), strings.Repeat("a", 1000),
		strings.Repeat("é", 32), strings.Repeat("-", 64) + "A",
	} {
		check(s)
	}
}
