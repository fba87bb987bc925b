package activehours_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/triggers/activehours"
)

func mustLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

// at is a wall-clock time in zone.
func at(t testing.TB, zone string, y int, m time.Month, d, h, mi int) time.Time {
	t.Helper()
	return time.Date(y, m, d, h, mi, 0, 0, mustLoad(t, zone))
}

func TestContains(t *testing.T) {
	t.Parallel()
	// 2026-03-09 is a Monday.
	utc := func(d, h, mi, s int) time.Time { return time.Date(2026, 3, d, h, mi, s, 0, time.UTC) }
	day := activehours.Window{Start: "09:00", End: "17:00"}
	night := activehours.Window{Start: "22:00", End: "06:00"}
	cases := []struct {
		name string
		w    activehours.Window
		t    time.Time
		want bool
	}{
		{"zero window is always", activehours.Window{}, utc(9, 3, 0, 0), true},
		{"start inclusive", day, utc(9, 9, 0, 0), true},
		{"just before start", day, utc(9, 8, 59, 59), false},
		{"inside", day, utc(9, 12, 0, 0), true},
		{"last instant", day, utc(9, 16, 59, 59).Add(999 * time.Millisecond), true},
		{"end exclusive", day, utc(9, 17, 0, 0), false},
		{"overnight evening", night, utc(9, 23, 0, 0), true},
		{"overnight start inclusive", night, utc(9, 22, 0, 0), true},
		{"overnight morning", night, utc(10, 3, 0, 0), true},
		{"overnight end exclusive", night, utc(10, 6, 0, 0), false},
		{"overnight midday", night, utc(9, 12, 0, 0), false},
		{"overnight midnight", night, utc(10, 0, 0, 0), true},
		{"24:00 end, late evening", activehours.Window{Start: "18:00", End: "24:00"}, utc(9, 23, 59, 59), true},
		{"24:00 end, midnight is out", activehours.Window{Start: "18:00", End: "24:00"}, utc(10, 0, 0, 0), false},
		{"whole day", activehours.Window{Start: "00:00", End: "24:00"}, utc(9, 0, 0, 0), true},
		{"whole day, last second", activehours.Window{Start: "00:00", End: "24:00"}, utc(9, 23, 59, 59), true},
		{"single digit hour", activehours.Window{Start: "9:00", End: "9:30"}, utc(9, 9, 15, 0), true},
		{"weekdays: monday", activehours.Window{Start: "09:00", End: "17:00", Days: []string{"mon-fri"}}, utc(9, 10, 0, 0), true},
		{"weekdays: sunday", activehours.Window{Start: "09:00", End: "17:00", Days: []string{"mon-fri"}}, utc(8, 10, 0, 0), false},
		{"days list", activehours.Window{Start: "09:00", End: "17:00", Days: []string{"Sat", "sunday"}}, utc(8, 10, 0, 0), true},
		{"wrapping day range", activehours.Window{Start: "09:00", End: "17:00", Days: []string{"fri-mon"}}, utc(8, 10, 0, 0), true},
		{"wrapping day range excludes", activehours.Window{Start: "09:00", End: "17:00", Days: []string{"fri-mon"}}, utc(11, 10, 0, 0), false},
		// Overnight windows belong to the day they start.
		{"overnight fri: fri 23:00", activehours.Window{Start: "22:00", End: "06:00", Days: []string{"fri"}}, utc(13, 23, 0, 0), true},
		{"overnight fri: sat 03:00", activehours.Window{Start: "22:00", End: "06:00", Days: []string{"fri"}}, utc(14, 3, 0, 0), true},
		{"overnight fri: fri 03:00", activehours.Window{Start: "22:00", End: "06:00", Days: []string{"fri"}}, utc(13, 3, 0, 0), false},
		{"overnight fri: sat 23:00", activehours.Window{Start: "22:00", End: "06:00", Days: []string{"fri"}}, utc(14, 23, 0, 0), false},
		// Zones: the wall clock of the zone counts, not the instant's own zone.
		{"berlin 09:00 is 08:00 utc", activehours.Window{Start: "09:00", End: "17:00", Timezone: "Europe/Berlin"}, utc(9, 8, 0, 0), true},
		{"berlin 17:00 is 16:00 utc", activehours.Window{Start: "09:00", End: "17:00", Timezone: "Europe/Berlin"}, utc(9, 16, 0, 0), false},
		{"tokyo day moves the weekday", activehours.Window{Start: "08:00", End: "10:00", Timezone: "Asia/Tokyo", Days: []string{"tue"}}, utc(9, 23, 30, 0), true},
		{"kolkata half hour offset", activehours.Window{Start: "09:00", End: "10:00", Timezone: "Asia/Kolkata"}, utc(9, 3, 30, 0), true},
		{"kolkata half hour offset, before", activehours.Window{Start: "09:00", End: "10:00", Timezone: "Asia/Kolkata"}, utc(9, 3, 29, 0), false},
		{"instant given in another zone", activehours.Window{Start: "09:00", End: "17:00", Timezone: "America/New_York"}, at(t, "Asia/Tokyo", 2026, 3, 10, 0, 0), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, err := activehours.Parse("active_hours", c.w)
			if err != nil {
				t.Fatalf("Parse(%+v) = %v", c.w, err)
			}
			if got := s.Contains(c.t); got != c.want {
				t.Errorf("%s.Contains(%s) = %v, want %v", s, c.t.Format(time.RFC3339), got, c.want)
			}
		})
	}
}

// TestDST covers the days the clocks change, in zones with a one-hour and
// a 30-minute shift, on both sides of UTC.
func TestDST(t *testing.T) {
	t.Parallel()
	type check struct {
		t    time.Time
		want bool
	}
	cases := []struct {
		name   string
		w      activehours.Window
		checks []check
	}{
		{
			// 2026-03-08 02:00 EST -> 03:00 EDT: 02:30 does not exist.
			name: "new york spring forward, start in the gap",
			w:    activehours.Window{Start: "02:30", End: "05:00", Timezone: "America/New_York"},
			checks: []check{
				{time.Date(2026, 3, 8, 6, 59, 0, 0, time.UTC), false}, // 01:59 EST
				{time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), true},   // 03:00 EDT
				{time.Date(2026, 3, 8, 8, 59, 0, 0, time.UTC), true},  // 04:59 EDT
				{time.Date(2026, 3, 8, 9, 0, 0, 0, time.UTC), false},  // 05:00 EDT
			},
		},
		{
			// 2026-11-01 02:00 EDT -> 01:00 EST: 01:00-01:59 happens twice.
			name: "new york fall back, window in the repeated hour",
			w:    activehours.Window{Start: "01:30", End: "02:00", Timezone: "America/New_York"},
			checks: []check{
				{time.Date(2026, 11, 1, 5, 29, 0, 0, time.UTC), false}, // 01:29 EDT
				{time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), true},  // 01:30 EDT
				{time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC), false},  // 01:00 EST
				{time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC), true},  // 01:30 EST
				{time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC), false},  // 02:00 EST
			},
		},
		{
			// The 9-to-5 day on the fall-back day is 9 real hours long.
			name: "new york fall back, working day",
			w:    activehours.Window{Start: "09:00", End: "17:00", Timezone: "America/New_York"},
			checks: []check{
				{time.Date(2026, 11, 1, 13, 59, 0, 0, time.UTC), false}, // 08:59 EST
				{time.Date(2026, 11, 1, 14, 0, 0, 0, time.UTC), true},   // 09:00 EST
			},
		},
		{
			// 2026-03-29 01:00 GMT -> 02:00 BST.
			name: "london spring forward, overnight window",
			w:    activehours.Window{Start: "22:00", End: "01:30", Timezone: "Europe/London"},
			checks: []check{
				{time.Date(2026, 3, 28, 22, 0, 0, 0, time.UTC), true},   // 22:00 GMT
				{time.Date(2026, 3, 29, 0, 59, 0, 0, time.UTC), true},   // 00:59 GMT
				{time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), false},   // 02:00 BST: jumped past the end
				{time.Date(2026, 3, 29, 21, 0, 0, 0, time.UTC), true},   // 22:00 BST
				{time.Date(2026, 3, 29, 20, 59, 0, 0, time.UTC), false}, // 21:59 BST
			},
		},
		{
			// 2026-10-25 02:00 BST -> 01:00 GMT.
			name: "london fall back",
			w:    activehours.Window{Start: "01:00", End: "01:30", Timezone: "Europe/London"},
			checks: []check{
				{time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC), true},   // 01:00 BST
				{time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), false}, // 01:30 BST
				{time.Date(2026, 10, 25, 1, 0, 0, 0, time.UTC), true},   // 01:00 GMT
				{time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC), false}, // 01:30 GMT
			},
		},
		{
			// Lord Howe shifts by 30 minutes: 2026-10-04 02:00 +10:30 -> 02:30 +11.
			name: "lord howe spring forward, end in the gap",
			w:    activehours.Window{Start: "01:00", End: "02:15", Timezone: "Australia/Lord_Howe"},
			checks: []check{
				{time.Date(2026, 10, 3, 15, 29, 0, 0, time.UTC), true},  // 01:59 +10:30
				{time.Date(2026, 10, 3, 15, 30, 0, 0, time.UTC), false}, // 02:30 +11: the window ended in the gap
			},
		},
		{
			// 2026-04-05 02:00 +11 -> 01:30 +10:30.
			name: "lord howe fall back",
			w:    activehours.Window{Start: "01:45", End: "02:00", Timezone: "Australia/Lord_Howe"},
			checks: []check{
				{time.Date(2026, 4, 4, 14, 45, 0, 0, time.UTC), true},  // 01:45 +11
				{time.Date(2026, 4, 4, 15, 0, 0, 0, time.UTC), false},  // 01:30 +10:30
				{time.Date(2026, 4, 4, 15, 15, 0, 0, time.UTC), true},  // 01:45 +10:30
				{time.Date(2026, 4, 4, 15, 30, 0, 0, time.UTC), false}, // 02:00 +10:30
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, err := activehours.Parse("active_hours", c.w)
			if err != nil {
				t.Fatal(err)
			}
			for _, ch := range c.checks {
				if got := s.Contains(ch.t); got != ch.want {
					t.Errorf("%s.Contains(%s = %s) = %v, want %v", s, ch.t.Format(time.RFC3339), ch.t.In(s.Location()).Format("15:04 MST"), got, ch.want)
				}
			}
		})
	}
}

func TestNext(t *testing.T) {
	t.Parallel()
	utc := func(m time.Month, d, h, mi int) time.Time { return time.Date(2026, m, d, h, mi, 0, 0, time.UTC) }
	cases := []struct {
		name string
		w    activehours.Window
		t    time.Time
		want time.Time
	}{
		{"always", activehours.Window{}, utc(3, 9, 3, 0), utc(3, 9, 3, 0)},
		{"inside is now", activehours.Window{Start: "09:00", End: "17:00"}, utc(3, 9, 10, 0), utc(3, 9, 10, 0)},
		{"before start, same day", activehours.Window{Start: "09:00", End: "17:00"}, utc(3, 9, 3, 0), utc(3, 9, 9, 0)},
		{"after end, next day", activehours.Window{Start: "09:00", End: "17:00"}, utc(3, 9, 17, 0), utc(3, 10, 9, 0)},
		{"friday evening to monday", activehours.Window{Start: "09:00", End: "17:00", Days: []string{"mon-fri"}}, utc(3, 13, 18, 0), utc(3, 16, 9, 0)},
		{"overnight, midday", activehours.Window{Start: "22:00", End: "06:00"}, utc(3, 9, 12, 0), utc(3, 9, 22, 0)},
		{"berlin", activehours.Window{Start: "09:00", End: "17:00", Timezone: "Europe/Berlin"}, utc(3, 9, 3, 0), utc(3, 9, 8, 0)},
		{"new york spring forward gap", activehours.Window{Start: "02:30", End: "05:00", Timezone: "America/New_York"}, utc(3, 8, 5, 0), utc(3, 8, 7, 0)},
		{"new york fall back, first 01:30", activehours.Window{Start: "01:30", End: "02:00", Timezone: "America/New_York"}, utc(11, 1, 4, 0), utc(11, 1, 5, 30)},
		{"new york fall back, second 01:30", activehours.Window{Start: "01:30", End: "02:00", Timezone: "America/New_York"}, utc(11, 1, 6, 0), utc(11, 1, 6, 30)},
		{"london fall back, first 01:00", activehours.Window{Start: "01:00", End: "01:30", Timezone: "Europe/London"}, utc(10, 24, 23, 30), utc(10, 25, 0, 0)},
		{"london fall back, wall clock jumps back into the window", activehours.Window{Start: "00:30", End: "01:30", Timezone: "Europe/London"}, utc(10, 25, 0, 45), utc(10, 25, 1, 0)},
		{"london fall back, re-entered at the transition", activehours.Window{Start: "01:00", End: "01:30", Timezone: "Europe/London"}, utc(10, 25, 0, 45), utc(10, 25, 1, 0)},
		{"lord howe spring forward gap", activehours.Window{Start: "02:10", End: "04:00", Timezone: "Australia/Lord_Howe"}, utc(10, 3, 15, 0), utc(10, 3, 15, 30)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := activehours.MustParse(c.w)
			if got := s.Next(c.t); !got.Equal(c.want) {
				t.Errorf("%s.Next(%s) = %s, want %s", s, c.t.Format(time.RFC3339), got.UTC().Format(time.RFC3339), c.want.Format(time.RFC3339))
			}
		})
	}
}

// TestNextMatchesBruteForce checks Next against a minute-by-minute scan of
// Contains, for random windows and instants around this decade's DST days.
func TestNextMatchesBruteForce(t *testing.T) {
	t.Parallel()
	zones := []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata", "America/Santiago", "Pacific/Chatham"}
	days := [][]string{nil, {"mon-fri"}, {"sat"}, {"sun", "wed"}}
	rng := rand.New(rand.NewPCG(1, 2))
	clock := func() string {
		return strings.Join([]string{pad(rng.IntN(24)), pad(rng.IntN(4) * 15)}, ":")
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 2000 {
		w := activehours.Window{Start: clock(), End: clock(), Timezone: zones[i%len(zones)], Days: days[rng.IntN(len(days))]}
		if rng.IntN(8) == 0 {
			w.End = "24:00"
		}
		s, err := activehours.Parse("w", w)
		if err != nil {
			continue // start == end
		}
		from := base.Add(time.Duration(rng.Int64N(int64(365 * 24 * time.Hour))))
		if i%2 == 0 {
			// Near a zone transition, where the interesting cases are.
			if _, end := from.In(s.Location()).ZoneBounds(); !end.IsZero() {
				from = end.Add(time.Duration(rng.Int64N(int64(48*time.Hour))) - 36*time.Hour)
			}
		}
		from = from.Truncate(time.Minute).Add(time.Duration(rng.IntN(60)) * time.Second)
		want := from
		if !s.Contains(from) {
			want = from.Truncate(time.Minute).Add(time.Minute)
			for !s.Contains(want) {
				want = want.Add(time.Minute)
				if want.Sub(from) > 9*24*time.Hour {
					t.Fatalf("%s: brute force found no opening after %s", s, from)
				}
			}
		}
		if got := s.Next(from); !got.Equal(want) {
			t.Errorf("%s.Next(%s) = %s, want %s (scan)", s, from.Format(time.RFC3339), got.Format(time.RFC3339), want.Format(time.RFC3339))
		}
	}
}

func pad(n int) string {
	if n < 10 {
		return "0" + string(rune('0'+n))
	}
	return string(rune('0'+n/10)) + string(rune('0'+n%10))
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		w    activehours.Window
		want string
	}{
		{"end 25:00", activehours.Window{Start: "09:00", End: "25:00"}, `heartbeat.active_hours.end: "25:00" is not a time (want HH:MM, 00:00-24:00)`},
		{"start 24:00", activehours.Window{Start: "24:00", End: "06:00"}, `heartbeat.active_hours.start: "24:00" is not a time (want HH:MM, 00:00-23:59)`},
		{"end 24:30", activehours.Window{Start: "09:00", End: "24:30"}, `heartbeat.active_hours.end: "24:30" is not a time`},
		{"minutes 60", activehours.Window{Start: "09:60", End: "10:00"}, `heartbeat.active_hours.start: "09:60" is not a time`},
		{"missing end", activehours.Window{Start: "09:00"}, `heartbeat.active_hours.end: "" is not a time`},
		{"only a zone", activehours.Window{Timezone: "Europe/Berlin"}, `heartbeat.active_hours.start: "" is not a time`},
		{"seconds", activehours.Window{Start: "09:00:00", End: "10:00"}, `heartbeat.active_hours.start: "09:00:00" is not a time`},
		{"am/pm", activehours.Window{Start: "9am", End: "10:00"}, `heartbeat.active_hours.start: "9am" is not a time`},
		{"negative", activehours.Window{Start: "-1:00", End: "10:00"}, `heartbeat.active_hours.start: "-1:00" is not a time`},
		{"three digit hour", activehours.Window{Start: "009:00", End: "10:00"}, `is not a time`},
		{"start equals end", activehours.Window{Start: "09:00", End: "09:00"}, `heartbeat.active_hours: start and end are both 09:00`},
		{"midnight to midnight", activehours.Window{Start: "00:00", End: "00:00"}, `for the whole day write start: "00:00", end: "24:00"`},
		{"bad zone", activehours.Window{Start: "09:00", End: "17:00", Timezone: "Mars/Olympus"}, `heartbeat.active_hours.timezone: "Mars/Olympus" is not a known IANA time zone`},
		{"bad day", activehours.Window{Start: "09:00", End: "17:00", Days: []string{"mon", "funday"}}, `heartbeat.active_hours.days[1]: "funday" is not a day`},
		{"bad range", activehours.Window{Start: "09:00", End: "17:00", Days: []string{"mon-xyz"}}, `heartbeat.active_hours.days[0]: "mon-xyz" is not a day range`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, err := activehours.Parse("heartbeat.active_hours", c.w)
			if err == nil {
				t.Fatalf("Parse(%+v) = %s, nil; want an error containing %q", c.w, s, c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("Parse(%+v) error = %q, want it to contain %q", c.w, err, c.want)
			}
			if !s.IsAlways() || s.String() != "always" {
				// The zero Schedule is returned with an error; callers must not use it.
				t.Errorf("Parse error returned a usable schedule %s", s)
			}
		})
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	s := activehours.MustParse(activehours.Window{Start: "9:00", End: "24:00", Timezone: "Europe/Berlin", Days: []string{"mon-fri"}})
	if got, want := s.String(), "09:00-24:00 Europe/Berlin mon,tue,wed,thu,fri"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// FuzzParse: any input either fails with an error naming the field or gives
// a schedule whose Contains and Next agree.
func FuzzParse(f *testing.F) {
	for _, s := range [][4]string{
		{"09:00", "17:00", "", ""}, {"22:00", "06:00", "Europe/Berlin", "fri"}, {"00:00", "24:00", "UTC", "mon-fri"},
		{"24:00", "01:00", "", ""}, {"9:5", "10:00", "", ""}, {"", "", "Local", ""}, {"02:30", "05:00", "America/New_York", "sun"},
		{"01:00", "02:15", "Australia/Lord_Howe", "sat-sun"}, {"\x00:00", "１２:００", "../../etc/passwd", "mon-"},
	} {
		f.Add(s[0], s[1], s[2], s[3], int64(1772000000))
	}
	f.Fuzz(func(t *testing.T, start, end, zone, days string, unix int64) {
		w := activehours.Window{Start: start, End: end, Timezone: zone}
		if days != "" {
			w.Days = strings.Split(days, ",")
		}
		s, err := activehours.Parse("f", w)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f") {
				t.Fatalf("error %q does not name the field", err)
			}
			return
		}
		at := time.Unix(unix%(1<<33), 0) // years 1970-2242
		next := s.Next(at)
		if next.IsZero() {
			t.Fatalf("%s.Next(%s) is zero", s, at)
		}
		if next.Before(at) || !s.Contains(next) {
			t.Fatalf("%s.Next(%s) = %s: before it or outside the window", s, at, next)
		}
		if s.Contains(at) != next.Equal(at) {
			t.Fatalf("%s: Contains(%s) = %v but Next = %s", s, at, s.Contains(at), next)
		}
	})
}
