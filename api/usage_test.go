package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	tokens "github.com/agentwork/agentwork/agentwork/usage"
)

// TestUsage: GET /v1/usage reads agentwork_usage, sums by what it is
// asked, needs the admin token, and answers a bad filter with a problem.
func TestUsage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	today := time.Now().UTC().Format(tokens.DayLayout)
	old := time.Now().UTC().AddDate(0, 0, -20).Format(tokens.DayLayout)
	for _, r := range []tokens.Record{
		{Day: today, Source: "cron", Name: "digest", Model: "m1", Runs: 2, InputTokens: 700, OutputTokens: 100},
		{Day: today, Source: "cron", Name: "digest", Model: "m2", Runs: 1, InputTokens: 10, OutputTokens: 5},
		{Day: old, Source: "heartbeat", Name: "default", Model: "m1", Runs: 5, InputTokens: 50, OutputTokens: 5},
	} {
		data, _ := json.Marshal(r)
		if _, err := f.b.Usage.Put(t.Context(), tokens.Key(r.Day, r.Source, r.Name, r.Model), data); err != nil {
			t.Fatal(err)
		}
	}
	rep := f.do(t, "GET", "/v1/usage?since=7d&by=name", adminToken, "")
	if rep.status != http.StatusOK {
		t.Fatalf("GET /v1/usage = %d %s", rep.status, rep.body)
	}
	var got struct{ Usage []tokens.Record }
	if err := json.Unmarshal(rep.body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Usage) != 1 || got.Usage[0].Name != "digest" || got.Usage[0].Total() != 815 || got.Usage[0].Runs != 3 {
		t.Errorf("GET /v1/usage?since=7d&by=name = %s, want digest alone with 3 runs, 815 tokens", rep.body)
	}
	if rep := f.do(t, "GET", "/v1/usage", adminToken, ""); !strings.Contains(string(rep.body), `"heartbeat"`) {
		t.Errorf("GET /v1/usage (all days) = %s, want the heartbeat's row too", rep.body)
	}
	if rep := f.do(t, "GET", "/v1/usage", "", ""); rep.status != http.StatusUnauthorized {
		t.Errorf("GET /v1/usage without a token = %d, want 401", rep.status)
	}
	rep = f.do(t, "GET", "/v1/usage?since=week", adminToken, "")
	if p := rep.problem(t); rep.status != http.StatusBadRequest || !strings.Contains(p.Detail, "7d") {
		t.Errorf("GET /v1/usage?since=week = %d %+v, want 400 saying what to write", rep.status, p)
	}
}
