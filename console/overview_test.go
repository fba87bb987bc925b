package console_test

import (
	"strings"
	"testing"
)

// The overview counts the runs of the last 24 hours by outcome exactly,
// also beyond the 1,000 a runs list holds, and each count links to the
// runs behind it.
func TestOverviewCountsRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	fillRuns(t, f.b, 2400) // 1,200 done, 600 skipped, 600 failed
	p := f.browser(t).login(viewerToken).do("GET", "/", nil)
	for _, want := range []string{
		`<a href="/runs?outcome=done&amp;since=24h"><span class="num done">1200</span> done</a>`,
		`<a href="/runs?outcome=skip&amp;since=24h"><span class="num skip">600</span> skip</a>`,
		`<a href="/runs?outcome=error&amp;since=24h"><span class="num error">600</span> error</a>`,
	} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the overview lacks %s:\n%s", want, p.body)
		}
	}
}
