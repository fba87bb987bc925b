package console_test

import (
	"net/http"
	"net/url"
	"testing"
)

// A login's next= never leads off the console: not with a tab or another
// control byte that browsers strip (/\t/evil.example → //evil.example),
// nor a backslash, nor a scheme or host.
func TestLoginNextStaysLocal(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, next := range []string{"/\t/evil.example/x", "/\x0b/evil.example/x", "/\n/evil.example/x", "/\x7f/evil.example", "//evil.example/x",
		"/\\evil.example/x", "\\\\evil.example", "https://evil.example/", "javascript:alert(1)", ""} {
		p := f.browser(t).do("POST", "/login", url.Values{"token": {adminToken}, "next": {next}})
		if p.status != http.StatusSeeOther || p.header.Get("Location") != "/" {
			t.Errorf("login, next=%q = %d to %q, want 303 to /", next, p.status, p.header.Get("Location"))
		}
	}
	for next, want := range map[string]string{"/jobs": "/jobs", "/runs?source=cron&name=a": "/runs?source=cron&name=a", "/runs/x%2Fy": "/runs/x%2Fy", "/%09/x": "/%09/x"} {
		p := f.browser(t).do("POST", "/login", url.Values{"token": {adminToken}, "next": {next}})
		if p.status != http.StatusSeeOther || p.header.Get("Location") != want {
			t.Errorf("login, next=%q = %d to %q, want 303 to %q", next, p.status, p.header.Get("Location"), want)
		}
	}
}
