// Package activehours is the "only between these hours" window of triggers:
// a daily wall-clock window (start inclusive, end exclusive) in an IANA time
// zone, optionally limited to some days of the week.
//
// The semantics, fixed here once for every trigger that uses them:
//
//   - Start is inclusive, End exclusive: 09:00-17:00 contains 09:00:00 and
//     16:59:59.999 but not 17:00.
//   - End may be 24:00 (the end of the day); 00:00-24:00 is the whole day.
//   - A window whose End is before its Start runs over midnight: 22:00-06:00
//     contains 23:00 and 03:00. Days name the day the window STARTED, so
//     {22:00-06:00, days: [fri]} contains Friday 23:00 and Saturday 03:00,
//     but not Friday 03:00.
//   - Start == End is a configuration error, not "always" and not "never":
//     the two readings are equally plausible and both would surprise half of
//     the users silently. Write 00:00-24:00 for the whole day.
//   - Times are wall-clock times in Timezone (default UTC). On the day clocks
//     spring forward, a window edge inside the skipped hour takes effect at
//     the first instant whose wall clock is past it (02:30 in New York on
//     that day means 03:00 EDT). On the day clocks fall back, the repeated
//     hour is inside or outside the window both times, as its wall clock says.
//   - An invalid time, zone or day is an error at load, naming the field;
//     it never turns into "always on".
//
// A zero Window means "no window": always active.
package activehours

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Window is the configuration of active hours, as written in YAML.
type Window struct {
	// Start is the wall-clock time the window opens, HH:MM (00:00-23:59).
	Start string `yaml:"start" json:"start"`
	// End is the wall-clock time the window closes, HH:MM (00:00-24:00),
	// exclusive. Before Start: the window runs over midnight.
	End string `yaml:"end" json:"end"`
	// Timezone is an IANA zone name such as Europe/Berlin. Default UTC.
	// "Local" is the zone of the machine running agentwork.
	Timezone string `yaml:"timezone" json:"timezone,omitempty"`
	// Days limits the window to some days of the week (the day the window
	// starts): mon, tue, wed, thu, fri, sat, sun, full names, or ranges such
	// as mon-fri. Empty: every day.
	Days []string `yaml:"days" json:"days,omitempty"`
}

// IsZero reports whether w is unset (every field empty): no window, always
// active.
func (w Window) IsZero() bool {
	return w.Start == "" && w.End == "" && w.Timezone == "" && len(w.Days) == 0
}

// Schedule is a checked Window. The zero Schedule is always active. It is a
// value, safe for concurrent use.
type Schedule struct {
	set        bool
	start, end time.Duration // since local midnight; end may be 24h
	loc        *time.Location
	days       [7]bool // by time.Weekday
	w          Window
}

// Parse checks w and returns its Schedule. field names w in errors, e.g.
// "heartbeat.active_hours". A zero Window gives the always-active Schedule.
func Parse(field string, w Window) (Schedule, error) {
	if w.IsZero() {
		return Schedule{}, nil
	}
	var errs []error
	s := Schedule{set: true, w: w}
	var err error
	if s.start, err = parseClock(w.Start, false); err != nil {
		errs = append(errs, fmt.Errorf("%s.start: %w", field, err))
	}
	if s.end, err = parseClock(w.End, true); err != nil {
		errs = append(errs, fmt.Errorf("%s.end: %w", field, err))
	}
	if len(errs) == 0 && s.start == s.end {
		errs = append(errs, fmt.Errorf("%s: start and end are both %s, which leaves no time in between; for the whole day write start: \"00:00\", end: \"24:00\", or remove %s", field, w.Start, field))
	}
	switch tz := strings.TrimSpace(w.Timezone); tz {
	case "", "UTC":
		s.loc = time.UTC
	default:
		if s.loc, err = time.LoadLocation(tz); err != nil {
			errs = append(errs, fmt.Errorf("%s.timezone: %q is not a known IANA time zone (want e.g. Europe/Berlin, America/New_York, UTC)", field, w.Timezone))
		}
	}
	if len(w.Days) == 0 {
		s.days = [7]bool{true, true, true, true, true, true, true}
	}
	for i, d := range w.Days {
		if err := addDays(&s.days, d); err != nil {
			errs = append(errs, fmt.Errorf("%s.days[%d]: %w", field, i, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Schedule{}, err
	}
	return s, nil
}

// MustParse is Parse that panics; for tests and constants.
func MustParse(w Window) Schedule {
	s, err := Parse("active_hours", w)
	if err != nil {
		panic(err)
	}
	return s
}

// parseClock parses H:MM or HH:MM. 24:00 is allowed only as an end.
func parseClock(v string, isEnd bool) (time.Duration, error) {
	want := "want HH:MM, 00:00-23:59"
	if isEnd {
		want = "want HH:MM, 00:00-24:00"
	}
	bad := fmt.Errorf("%q is not a time (%s)", v, want)
	h, m, ok := strings.Cut(strings.TrimSpace(v), ":")
	if !ok || len(h) < 1 || len(h) > 2 || len(m) != 2 {
		return 0, bad
	}
	hh, ok1 := digits(h)
	mm, ok2 := digits(m)
	if !ok1 || !ok2 || mm > 59 || hh > 24 || (hh == 24 && (mm != 0 || !isEnd)) {
		return 0, bad
	}
	return time.Duration(hh)*time.Hour + time.Duration(mm)*time.Minute, nil
}

func digits(s string) (int, bool) {
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, false
		}
		n = n*10 + int(r-'0')
	}
	return n, true
}

var dayNames = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
	"sunday": time.Sunday, "monday": time.Monday, "tuesday": time.Tuesday, "wednesday": time.Wednesday,
	"thursday": time.Thursday, "friday": time.Friday, "saturday": time.Saturday,
	"tues": time.Tuesday, "thur": time.Thursday, "thurs": time.Thursday,
}

func day(s string) (time.Weekday, error) {
	d, ok := dayNames[strings.ToLower(strings.TrimSpace(s))]
	if !ok {
		return 0, fmt.Errorf("%q is not a day (want mon, tue, wed, thu, fri, sat, sun or a range like mon-fri)", s)
	}
	return d, nil
}

// addDays adds "mon" or a range "mon-fri" (wrapping: "fri-mon" is fri, sat,
// sun, mon) to days.
func addDays(days *[7]bool, v string) error {
	from, to, isRange := strings.Cut(v, "-")
	a, err := day(from)
	if err != nil {
		if isRange {
			return fmt.Errorf("%q is not a day range (want e.g. mon-fri)", v)
		}
		return err
	}
	if !isRange {
		days[a] = true
		return nil
	}
	b, err := day(to)
	if err != nil {
		return fmt.Errorf("%q is not a day range (want e.g. mon-fri)", v)
	}
	for d := a; ; d = (d + 1) % 7 {
		days[d] = true
		if d == b {
			return nil
		}
	}
}

// IsAlways reports whether s has no window (always active).
func (s Schedule) IsAlways() bool { return !s.set }

// Window returns the configuration s was parsed from.
func (s Schedule) Window() Window { return s.w }

// Location is the zone of the window (UTC for the always-active Schedule).
func (s Schedule) Location() *time.Location {
	if s.loc == nil {
		return time.UTC
	}
	return s.loc
}

// Contains reports whether t is inside the window.
func (s Schedule) Contains(t time.Time) bool {
	if !s.set {
		return true
	}
	lt := t.In(s.loc)
	tod := sinceMidnight(lt)
	if s.start < s.end { // same-day window (end may be 24:00)
		return tod >= s.start && tod < s.end && s.days[lt.Weekday()]
	}
	// Over midnight: the evening part belongs to today, the morning part to
	// the window that started yesterday.
	if tod >= s.start {
		return s.days[lt.Weekday()]
	}
	if tod < s.end {
		return s.days[(lt.Weekday()+6)%7]
	}
	return false
}

func sinceMidnight(t time.Time) time.Duration {
	h, m, sec := t.Clock()
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(sec)*time.Second + time.Duration(t.Nanosecond())
}

// Next returns the earliest instant at or after t that is inside the
// window: t itself when Contains(t), otherwise the instant the window opens
// next. For the always-active Schedule it is t.
func (s Schedule) Next(t time.Time) time.Time {
	if !s.set || s.Contains(t) {
		return t
	}
	// The window can only open where the wall clock reaches Start (once, or
	// twice in a repeated fall-back hour, or at the end of a spring-forward
	// gap) or where a zone transition makes the wall clock jump into it.
	// Every allowed day has such an instant, so 9 days of candidates (a week
	// plus the edges) always hold the answer.
	var best time.Time
	consider := func(u time.Time) {
		if !u.IsZero() && u.After(t) && s.Contains(u) && (best.IsZero() || u.Before(best)) {
			best = u
		}
	}
	y, m, d := t.In(s.loc).Date()
	for off := -1; off <= 8; off++ {
		for _, c := range s.occurrences(y, m, d+off, s.start) {
			consider(c)
			zs, ze := c.ZoneBounds()
			consider(zs)
			consider(ze)
		}
	}
	return best
}

// occurrences returns the instants on the date y-m-d (normalised) whose
// wall clock in s.loc is tod: usually one, two in a repeated fall-back
// hour; in a spring-forward gap, the first instant after the gap.
func (s Schedule) occurrences(y int, m time.Month, d int, tod time.Duration) []time.Time {
	h, mi := int(tod/time.Hour), int(tod%time.Hour/time.Minute)
	c := time.Date(y, m, d, h, mi, 0, 0, s.loc)
	wy, wm, wd := time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Date() // the normalised date
	zs, ze := c.ZoneBounds()
	_, off := c.Zone()
	if ch, cm, _ := c.Clock(); ch != h || cm != mi {
		// A gap: the wall clock jumped over tod at a transition next to c.
		for _, b := range []time.Time{zs, ze} {
			if b.IsZero() || b.Sub(c).Abs() > 4*time.Hour {
				continue
			}
			lb := b.In(s.loc)
			if by, bm, bd := lb.Date(); by == wy && bm == wm && bd == wd && sinceMidnight(lb) >= tod {
				return []time.Time{b}
			}
		}
		return []time.Time{c}
	}
	out := []time.Time{c}
	same := func(e time.Time) bool {
		le := e.In(s.loc)
		ey, em, ed := le.Date()
		return ey == wy && em == wm && ed == wd && sinceMidnight(le) == tod
	}
	// The other occurrence of a repeated hour: before c if the clock fell
	// back at zs, after c if it falls back at ze.
	if !zs.IsZero() {
		if _, prev := zs.Add(-time.Nanosecond).Zone(); prev > off {
			if e := c.Add(-time.Duration(prev-off) * time.Second); e.Before(zs) && same(e) {
				out = []time.Time{e, c}
			}
		}
	}
	if !ze.IsZero() {
		if _, next := ze.Zone(); next < off {
			if e := c.Add(time.Duration(off-next) * time.Second); !e.Before(ze) && same(e) {
				out = append(out, e)
			}
		}
	}
	return out
}

// String renders the window, e.g. "09:00-17:00 Europe/Berlin mon-fri", or
// "always".
func (s Schedule) String() string {
	if !s.set {
		return "always"
	}
	out := fmtClock(s.start) + "-" + fmtClock(s.end) + " " + s.loc.String()
	if !slices.Equal(s.days[:], []bool{true, true, true, true, true, true, true}) {
		var ds []string
		for _, d := range []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday} {
			if s.days[d] {
				ds = append(ds, strings.ToLower(d.String()[:3]))
			}
		}
		out += " " + strings.Join(ds, ",")
	}
	return out
}

func fmtClock(d time.Duration) string {
	return fmt.Sprintf("%02d:%02d", int(d/time.Hour), int(d%time.Hour/time.Minute))
}
