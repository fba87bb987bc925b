package budget

import (
	"strings"
	"testing"
	"time"
)

// Spend counts the day's tokens in the trigger's zone and foresees the
// next run: after 400, 400 + 400 fits in 1,000; after 800, 800 + 400 does
// not, so the second run asks for a pause until the next midnight there.
func TestSpend(t *testing.T) {
	t.Parallel()
	b := Budget{DailyTokens: 1000}
	now := time.Date(2026, 5, 4, 23, 0, 0, 0, time.UTC)
	s, p := Spend(nil, b, 400, now, time.UTC)
	if p != nil || s.Tokens != 400 || s.Day != "2026-05-04" {
		t.Fatalf("first run of 400: %+v, %+v; want 400 tokens, no pause (400 + 400 <= 1000)", s, p)
	}
	s, p = Spend(s, b, 400, now, time.UTC)
	if p == nil || !p.Until.Equal(time.Date(2026, 5, 5, 0, 0, 0, 0, time.UTC)) || s.Tokens != 800 || s.Runs != 2 ||
		!strings.Contains(p.Reason, "used 800 tokens today of its daily budget of 1000") {
		t.Fatalf("second run of 400: %+v, %+v; want paused until midnight", s, p)
	}
	next, p := Spend(&Spent{Day: "2026-05-04", Tokens: 900}, b, 10, now.Add(2*time.Hour), time.UTC)
	if p != nil || next.Day != "2026-05-05" || next.Tokens != 10 {
		t.Errorf("a run on the next day: %+v, %+v; want a fresh count", next, p)
	}
	if _, p := Spend(nil, Budget{}, 1_000_000, now, time.UTC); p != nil {
		t.Error("no budget paused")
	}
	next.Reset()
	if next.Tokens != 0 || next.Runs != 1 {
		t.Errorf("Reset: %+v, want 0 tokens, the runs kept", next)
	}
}

// The day and the midnight are those of the trigger's zone: 23:30 UTC is
// already the next day in Berlin, whose midnight comes first.
func TestSpendInZone(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no time zone data")
	}
	now := time.Date(2026, 5, 4, 21, 30, 0, 0, time.UTC) // 23:30 in Berlin
	s, p := Spend(&Spent{Day: "2026-05-04", Tokens: 700, LastRun: 300}, Budget{DailyTokens: 1000}, 300, now, berlin)
	want := time.Date(2026, 5, 5, 0, 0, 0, 0, berlin)
	if p == nil || !p.Until.Equal(want) || s.Day != "2026-05-04" || !strings.Contains(p.Reason, "2026-05-05 00:00 CEST") {
		t.Fatalf("Spend = %+v, %+v; want paused until %s", s, p, want)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	if err := (Budget{DailyTokens: -1}).Check("heartbeat.budget"); err == nil || !strings.HasPrefix(err.Error(), "heartbeat.budget.daily_tokens: -1:") {
		t.Errorf("Check(-1) = %v, want an error naming heartbeat.budget.daily_tokens", err)
	}
	if err := (Budget{DailyTokens: 1000}).Check("x"); err != nil {
		t.Errorf("Check(1000) = %v", err)
	}
}
