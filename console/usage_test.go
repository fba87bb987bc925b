package console_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork/usage"
)

// The usage page draws the tokens per day as an SVG bar chart stacked by
// model, on the server, lists them per job and model, and shows the jobs'
// budgets and what they paused; a model's name is escaped everywhere.
func TestUsagePage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.browser(t).login(viewerToken)

	empty := b.do("GET", "/usage", nil)
	if empty.status != 200 || !strings.Contains(empty.body, "No model tokens recorded in the last 14 days") || strings.Contains(empty.body, "<svg viewBox") {
		t.Errorf("the usage page without usage = %d, want its empty state:\n%s", empty.status, empty.body)
	}

	const evil = `<script>alert(1)</script>`
	now := time.Now().UTC()
	today, yesterday := now.Format(time.DateOnly), now.AddDate(0, 0, -1).Format(time.DateOnly)
	for _, r := range []usage.Record{
		{Day: today, Source: "cron", Name: "digest", Model: "small", Runs: 2, InputTokens: 1500, OutputTokens: 500},
		{Day: today, Source: "task", Name: "x", Model: evil, Runs: 1, InputTokens: 300, OutputTokens: 200},
		{Day: yesterday, Source: "cron", Name: "digest", Model: "small", Runs: 1, InputTokens: 700, OutputTokens: 300},
	} {
		raw, _ := json.Marshal(r)
		if _, err := f.b.Usage.Put(t.Context(), usage.Key(r.Day, r.Source, r.Name, r.Model), raw); err != nil {
			t.Fatal(err)
		}
	}
	got := b.do("GET", "/usage?days=7", nil)
	if got.status != 200 {
		t.Fatalf("GET /usage = %d:\n%s", got.status, got.body)
	}
	if strings.Contains(got.body, evil) || !strings.Contains(got.body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("a model's name is not escaped:\n%s", got.body)
	}
	// Three stacked parts: today's two models, yesterday's one; each says
	// its day, model and tokens.
	rects := regexp.MustCompile(`<rect class="bar m[0-7]" x="[0-9.]+" y="[0-9.]+" width="[0-9.]+" height="[0-9.]+"><title>([^<]*)</title>`).FindAllStringSubmatch(got.body, -1)
	if len(rects) != 3 {
		t.Fatalf("the chart has %d bar parts, want 3:\n%s", len(rects), got.body)
	}
	if want := today + " · small: 2k tokens"; !strings.Contains(got.body, want) {
		t.Errorf("the chart has no part %q:\n%s", want, got.body)
	}
	for _, want := range []string{
		`Model tokens per day from`, "3.5k in all", // the text alternative
		`<td class="n">3</td><td class="n">2200</td><td class="n">0</td><td class="n">800</td><td class="n">3000</td>`, // cron digest small, two days summed
		`/runs?source=cron&amp;name=digest`,
		`<a href="/heartbeat">heartbeat</a>`, `<td class="n">1234</td><td class="n">5000</td>`,
		`<a href="/jobs#job-nightly">nightly</a>`, "paused by its budget", `<td class="n">900</td><td class="n">1000</td>`,
	} {
		if !strings.Contains(got.body, want) {
			t.Errorf("the usage page lacks %q:\n%s", want, got.body)
		}
	}
}
