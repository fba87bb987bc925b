package cron

import (
	"strings"
	"testing"
	"time"
)

func mustLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

// ticks returns the first n ticks of expr in zone after the wall time
// "from" (RFC 3339 without offset, read in zone), as RFC 3339 with offsets.
func ticks(t *testing.T, expr, zone, from string, n int) []string {
	t.Helper()
	loc := mustLoc(t, zone)
	s, err := ParseSchedule(expr, loc)
	if err != nil {
		t.Fatalf("ParseSchedule(%q) = %v", expr, err)
	}
	at, err := time.ParseInLocation("2006-01-02T15:04:05", from, loc)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for range n {
		at = s.Next(at)
		if at.IsZero() {
			out = append(out, "none")
			break
		}
		out = append(out, at.In(loc).Format(time.RFC3339))
	}
	return out
}

func TestScheduleNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, expr, zone, from string
		want                   []string
	}{
		{"every minute", "* * * * *", "UTC", "2026-05-01T10:00:30",
			[]string{"2026-05-01T10:01:00Z", "2026-05-01T10:02:00Z", "2026-05-01T10:03:00Z"}},
		{"with seconds", "*/20 * * * * *", "UTC", "2026-05-01T10:00:00",
			[]string{"2026-05-01T10:00:20Z", "2026-05-01T10:00:40Z", "2026-05-01T10:01:00Z"}},
		{"monday 9:00 Berlin", "0 9 * * mon", "Europe/Berlin", "2026-05-01T00:00:00",
			[]string{"2026-05-04T09:00:00+02:00", "2026-05-11T09:00:00+02:00"}},
		{"@daily", "@daily", "UTC", "2026-05-01T10:00:00",
			[]string{"2026-05-02T00:00:00Z", "2026-05-03T00:00:00Z"}},
		{"@every 90m is aligned to the epoch", "@every 90m", "UTC", "2026-05-01T10:00:00",
			[]string{"2026-05-01T10:30:00Z", "2026-05-01T12:00:00Z", "2026-05-01T13:30:00Z"}},
		{"leap day", "0 12 29 2 *", "UTC", "2026-01-01T00:00:00",
			[]string{"2028-02-29T12:00:00Z"}},

		// America/New_York: 2026-03-08 02:00 EST → 03:00 EDT; 2026-11-01 02:00 EDT → 01:00 EST.
		{"NY: time in the spring-forward gap runs once right after it", "30 2 * * *", "America/New_York", "2026-03-07T12:00:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"NY: every minute of the gap hour collapses into one run", "* 2 * * *", "America/New_York", "2026-03-08T01:58:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"}},
		{"NY: fixed time in the repeated hour runs once", "30 1 * * *", "America/New_York", "2026-10-31T12:00:00",
			[]string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"NY: hourly job keeps real-time rhythm through the gap", "0 * * * *", "America/New_York", "2026-03-08T00:30:00",
			[]string{"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"}},
		{"NY: hourly job runs in both copies of the repeated hour", "0 * * * *", "America/New_York", "2026-11-01T00:30:00",
			[]string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"}},

		// Europe/London: 2026-03-29 01:00 GMT → 02:00 BST; 2026-10-25 02:00 BST → 01:00 GMT.
		{"London: gap", "15 1 * * *", "Europe/London", "2026-03-28T12:00:00",
			[]string{"2026-03-29T02:00:00+01:00", "2026-03-30T01:15:00+01:00"}},
		{"London: repeated hour once", "15 1 * * *", "Europe/London", "2026-10-24T12:00:00",
			[]string{"2026-10-25T01:15:00+01:00", "2026-10-26T01:15:00Z"}},
		{"London: every 30 minutes through fall-back", "*/30 * * * *", "Europe/London", "2026-10-25T00:45:00",
			[]string{"2026-10-25T01:00:00+01:00", "2026-10-25T01:30:00+01:00", "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z", "2026-10-25T02:00:00Z"}},

		// Australia/Lord_Howe shifts by 30 minutes: 2026-10-04 02:00 (+10:30) → 02:30 (+11);
		// 2026-04-05 02:00 (+11) → 01:30 (+10:30).
		{"Lord Howe: half-hour gap", "15 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:00:00",
			[]string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"}},
		{"Lord Howe: repeated half hour once", "45 1 * * *", "Australia/Lord_Howe", "2026-04-04T12:00:00",
			[]string{"2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"}},
		{"Lord Howe: every 15 minutes through fall-back", "*/15 * * * *", "Australia/Lord_Howe", "2026-04-05T01:20:00",
			[]string{"2026-04-05T01:30:00+11:00", "2026-04-05T01:45:00+11:00", "2026-04-05T01:30:00+10:30", "2026-04-05T01:45:00+10:30", "2026-04-05T02:00:00+10:30"}},
		{"Lord Howe: every 15 minutes through spring-forward", "*/15 * * * *", "Australia/Lord_Howe", "2026-10-04T01:40:00",
			[]string{"2026-10-04T01:45:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-04T02:45:00+11:00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := ticks(t, tt.expr, tt.zone, tt.from, len(tt.want))
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("ticks of %q in %s after %s =\n  %v\nwant\n  %v", tt.expr, tt.zone, tt.from, got, tt.want)
			}
		})
	}
}

// TestScheduleDSTNoDoubleFire walks a year of ticks of DST-sensitive
// schedules: ticks strictly increase, and a fixed-time daily job fires
// exactly once per calendar day.
func TestScheduleDSTNoDoubleFire(t *testing.T) {
	t.Parallel()
	for _, zone := range []string{"America/New_York", "Europe/London", "Australia/Lord_Howe"} {
		for _, expr := range []string{"30 1 * * *", "45 1 * * *", "15 2 * * *", "0 2 * * *"} {
			loc := mustLoc(t, zone)
			s, err := ParseSchedule(expr, loc)
			if err != nil {
				t.Fatal(err)
			}
			at := time.Date(2026, 1, 1, 0, 0, 0, 0, loc)
			days := map[string]int{}
			var prev time.Time
			for at.In(loc).Year() == 2026 {
				at = s.Next(at)
				if !at.After(prev) {
					t.Fatalf("%s %q: tick %v not after %v", zone, expr, at, prev)
				}
				prev = at
				if at.In(loc).Year() == 2026 {
					days[at.In(loc).Format(time.DateOnly)]++
				}
			}
			if len(days) != 365 {
				t.Errorf("%s %q: fired on %d days of 2026, want 365", zone, expr, len(days))
			}
			for d, n := range days {
				if n != 1 {
					t.Errorf("%s %q: fired %d times on %s, want 1", zone, expr, n, d)
				}
			}
		}
	}
}

func TestParseScheduleErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ expr, want string }{
		{"", "empty"},
		{"61 * * * *", "above maximum"},
		{"* * *", "3 fields"},
		{"1 2 3 4 5 6 7", "7 fields"},
		{"TZ=0", "timezone field"},
		{"CRON_TZ=Europe/Berlin 0 9 * * *", "timezone field"},
		{"@every 1500ms", "whole number of seconds"},
		{"@every soon", "not a duration"},
		{"@every 0s", "at least 1s"},
		{"0 0 30 2 *", "never fires"},
		{"@fortnightly", "unrecognized descriptor"},
		{"x y z a b", "failed to parse"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			t.Parallel()
			_, err := ParseSchedule(tt.expr, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseSchedule(%q) = %v, want an error containing %q", tt.expr, err, tt.want)
			}
		})
	}
}

func TestAtSchedule(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	s := At(at)
	if got := s.Next(at.Add(-time.Hour)); !got.Equal(at) {
		t.Fatalf("Next(before) = %v, want %v", got, at)
	}
	if got := s.Next(at); !got.IsZero() {
		t.Fatalf("Next(at) = %v, want none", got)
	}
}

func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{"* * * * *", "0 9 * * mon-fri", "*/5 * * * * *", "@daily", "@every 90m", "TZ=0", "CRON_TZ=", "TZ=TZ=TZ=", "0 0 30 2 *", "1-5/2 * * jan,mar sun", "@every -1s", "? ? ? ? ?"} {
		f.Add(s, "America/New_York")
	}
	f.Fuzz(func(t *testing.T, expr, zone string) {
		loc, err := time.LoadLocation(zone)
		if err != nil || len(zone) > 64 {
			loc = time.UTC
		}
		s, err := ParseSchedule(expr, loc)
		if err != nil {
			if s != nil {
				t.Fatalf("ParseSchedule(%q) returned a schedule and an error", expr)
			}
			return
		}
		from := time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC)
		prev := from
		for range 5 {
			n := s.Next(prev)
			if n.IsZero() {
				return
			}
			if !n.After(prev) {
				t.Fatalf("ParseSchedule(%q).Next(%v) = %v, not after", expr, prev, n)
			}
			prev = n
		}
	})
}

// TestNextStopsEarlyWithTheSameTick: Next stops looking once no later
// wall time can map to an earlier instant; it gives the tick it gave when
// it looked at one more, in zones with DST of an hour, half an hour and
// two, offsets of a quarter hour, and at instants around each change.
func TestNextStopsEarlyWithTheSameTick(t *testing.T) {
	t.Parallel()
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham", "Africa/Casablanca", "Antarctica/Troll", "Asia/Kolkata", "America/Sao_Paulo"}
	exprs := []string{"30 1 * * *", "15 2 * * *", "0 2 * * *", "0 3 * * 0", "0 * * * *", "*/7 * * * *", "0 0 1 * *", "30 2 * 3 0", "*/2 * * * * *", "0 30 2 * * *"}
	for _, zone := range zones {
		loc := mustLoc(t, zone)
		// Instants around each change of the zone's offset in 2026-2027,
		// and every 41 hours.
		var at []time.Time
		for x := time.Date(2026, 1, 1, 0, 0, 0, 0, loc); x.Year() < 2028; {
			_, end := x.ZoneBounds()
			if end.IsZero() || end.Year() >= 2028 {
				break
			}
			for _, d := range []time.Duration{-25 * time.Hour, -2 * time.Hour, -time.Hour, -30 * time.Minute, -time.Second, 0, time.Second, 30 * time.Minute, time.Hour, 2 * time.Hour, 25 * time.Hour} {
				at = append(at, end.Add(d))
			}
			x = end
		}
		for x := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC); x.Year() < 2028; x = x.Add(41*time.Hour + 13*time.Second) {
			at = append(at, x)
		}
		for _, expr := range exprs {
			s, err := ParseSchedule(expr, loc)
			if err != nil {
				t.Fatal(err)
			}
			w, ok := s.(*wallSchedule)
			if !ok {
				t.Fatalf("%q: a %T, not a wall-clock schedule", expr, s)
			}
			for _, x := range at {
				if got, want := w.next(x, true), w.next(x, false); !got.Equal(want) {
					t.Fatalf("%s %q after %v: %v stopping early, %v looking further", zone, expr, x, got, want)
				}
			}
		}
	}
}
