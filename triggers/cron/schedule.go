package cron

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	rcron "github.com/robfig/cron/v3"
)

// Schedule yields a job's ticks.
type Schedule interface {
	// Next returns the first tick strictly after t, or the zero time when
	// there is none.
	Next(t time.Time) time.Time
}

// parser accepts 5 fields, an optional leading seconds field, and the
// descriptors (@daily, @hourly, ...). @every is handled by ParseSchedule.
var parser = rcron.NewParser(rcron.SecondOptional | rcron.Minute | rcron.Hour | rcron.Dom | rcron.Month | rcron.Dow | rcron.Descriptor)

// ParseSchedule parses a cron expression for a time zone (nil: UTC).
//
// Accepted: 5 fields (minute hour day-of-month month day-of-week), 6 fields
// with a leading seconds field, the descriptors @yearly, @annually,
// @monthly, @weekly, @daily, @midnight, @hourly, and "@every <duration>"
// (at least 1s, whole seconds), whose ticks are the multiples of the
// duration since the Unix epoch, so "@every 1h" fires on the hour.
//
// Ticks of a time zone with daylight saving time follow the wall clock, as
// ISC cron does: a job whose hour field is not "*" runs once at a wall time
// that spring-forward skips (right after the gap) and once at a wall time
// that fall-back repeats (the first time). A job that runs every hour
// (hour field "*") keeps its rhythm in real time: skipped wall times do not
// run, repeated ones run again.
//
// The parser never panics (robfig/cron panics on some inputs, e.g. "TZ=0"),
// and it rejects a schedule that never fires.
//
// Schedules are immutable: the parsed ones are cached by expression and
// zone (jobs share few expressions, and the arming pass asks for every
// job's schedule).
func ParseSchedule(expr string, loc *time.Location) (Schedule, error) {
	if loc == nil {
		loc = time.UTC
	}
	key := scheduleKey{expr, loc.String()}
	schedules.mu.Lock()
	s, ok := schedules.m[key]
	schedules.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := parseSchedule(expr, loc)
	if err == nil {
		schedules.mu.Lock()
		if len(schedules.m) >= maxCachedSchedules {
			clear(schedules.m) // many distinct expressions: start over
		}
		schedules.m[key] = s
		schedules.mu.Unlock()
	}
	return s, err
}

// maxCachedSchedules bounds the cache of parsed schedules.
const maxCachedSchedules = 4096

type scheduleKey struct{ expr, zone string }

// schedules caches ParseSchedule's results.
var schedules = struct {
	mu sync.Mutex
	m  map[scheduleKey]Schedule
}{m: map[scheduleKey]Schedule{}}

func parseSchedule(expr string, loc *time.Location) (s Schedule, err error) {
	defer func() {
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("%q: not a cron expression (%v)", expr, p)
		}
	}()
	expr = strings.TrimSpace(expr)
	switch {
	case expr == "":
		return nil, errors.New("empty (want e.g. \"0 9 * * mon\", \"@daily\" or \"@every 90m\")")
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return nil, fmt.Errorf("%q: set the job's timezone field instead of a TZ= prefix", expr)
	case strings.HasPrefix(expr, "@every"):
		return parseEvery(expr)
	}
	if n := len(strings.Fields(expr)); !strings.HasPrefix(expr, "@") && (n < 5 || n > 6) {
		return nil, fmt.Errorf("%q: %d fields, want 5 (minute hour day-of-month month day-of-week) or 6 (with seconds first)", expr, n)
	}
	parsed, err := parser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", expr, err)
	}
	spec, ok := parsed.(*rcron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("%q: unsupported schedule", expr)
	}
	// robfig computes Next in wall-clock ("civil") time, expressed in UTC
	// where there is no DST; we map wall times to instants ourselves.
	cp := *spec
	cp.Location = time.UTC
	const allHours = 1<<24 - 1
	w := &wallSchedule{spec: &cp, loc: loc, hourly: cp.Hour&allHours == allHours}
	// A schedule that never fires (30 February) is a mistake worth reporting.
	// (robfig looks five years ahead: from 2000 that covers two leap days.)
	if w.spec.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("%q: never fires (no date matches)", expr)
	}
	return w, nil
}

func parseEvery(expr string) (Schedule, error) {
	arg := strings.TrimSpace(strings.TrimPrefix(expr, "@every"))
	d, err := time.ParseDuration(arg)
	if err != nil {
		return nil, fmt.Errorf("%q: %q is not a duration (want e.g. @every 90m)", expr, arg)
	}
	if d < time.Second || d%time.Second != 0 {
		return nil, fmt.Errorf("%q: want a whole number of seconds, at least 1s", expr)
	}
	return Every(d), nil
}

// Every ticks at the multiples of d since the Unix epoch.
type Every time.Duration

// Next implements Schedule.
func (e Every) Next(t time.Time) time.Time {
	d := time.Duration(e)
	if d <= 0 {
		return time.Time{}
	}
	n := t.UnixNano()
	q := n / int64(d)
	if n < 0 && n%int64(d) != 0 {
		q-- // floor
	}
	return time.Unix(0, (q+1)*int64(d)).UTC()
}

// At is a one-shot schedule: one tick at the given time.
type At time.Time

// Next implements Schedule.
func (a At) Next(t time.Time) time.Time {
	if at := time.Time(a); at.After(t) {
		return at.UTC()
	}
	return time.Time{}
}

// wallSchedule is a robfig spec evaluated in wall-clock time of loc.
type wallSchedule struct {
	spec   *rcron.SpecSchedule // Location UTC: operates on wall times
	loc    *time.Location
	hourly bool // hour field is "*": keeps its rhythm in real time across DST
}

// Next implements Schedule.
func (w *wallSchedule) Next(t time.Time) time.Time { return w.next(t, true) }

// next is Next; without stopEarly it works out one more wall time than
// it needs to (TestNextStopsEarlyWithTheSameTick compares the two).
func (w *wallSchedule) next(t time.Time, stopEarly bool) time.Time {
	t = t.In(w.loc)
	_, off := t.Zone()
	oMin, oMax := off, off
	_, end := t.ZoneBounds()
	if !end.IsZero() {
		_, o2 := end.In(w.loc).Zone()
		oMin, oMax = min(oMin, o2), max(oMax, o2)
	}
	// An instant x after t has wall time x+offset(x) > t+oMin.
	c := time.Unix(t.Unix()+int64(oMin), int64(t.Nanosecond())).UTC()
	var best time.Time
	for range 10000 {
		c = w.spec.Next(c)
		if c.IsZero() {
			break
		}
		// No later wall time can map to an instant before best.
		if !best.IsZero() && !c.Add(-time.Duration(oMax)*time.Second).Before(best) {
			break
		}
		insts, gapEnd := wallInstants(c, w.loc)
		if len(insts) == 0 && !w.hourly {
			insts = []time.Time{gapEnd}
		}
		if len(insts) > 1 && !w.hourly {
			insts = insts[:1]
		}
		for _, x := range insts {
			if x.After(t) && (best.IsZero() || x.Before(best)) {
				best = x
			}
		}
		if !gapEnd.IsZero() {
			// c lies in a gap: every wall time up to its end maps to the
			// same instant, skip them.
			_, o := gapEnd.In(w.loc).Zone()
			if g := time.Unix(gapEnd.Unix()+int64(o)-1, 0).UTC(); g.After(c) {
				c = g
			}
		}
		// The next wall time is a second or more after c (c is a whole
		// second). An instant between t and best has t's offset when the
		// zone does not change before best (end), else one up to oMax.
		// When even that wall time maps to no instant before best, no
		// later one does: the loop need not work out another (half the
		// work of a daily job's next tick).
		if stopEarly && !best.IsZero() {
			o := oMax
			if end.IsZero() || !end.Before(best) {
				o = off
			}
			if !c.Add(time.Second - time.Duration(o)*time.Second).Before(best) {
				break
			}
		}
	}
	if best.IsZero() {
		return best
	}
	return best.UTC()
}

// wallInstants returns the instants whose wall time in loc is c (c in
// UTC carrying the wall time): one normally, two in a repeated hour
// (sorted), none in a gap, in which case gapEnd is the first instant after
// the gap.
func wallInstants(c time.Time, loc *time.Location) (insts []time.Time, gapEnd time.Time) {
	u := c.Unix()
	offset := func(sec int64) int64 {
		_, o := time.Unix(sec, 0).In(loc).Zone()
		return int64(o)
	}
	before, after := offset(u-86400), offset(u+86400)
	for _, o := range []int64{before, after, offset(u)} {
		x := time.Unix(u-o, 0).In(loc)
		if offset(x.Unix()) != o {
			continue
		}
		dup := false
		for _, y := range insts {
			dup = dup || y.Equal(x)
		}
		if !dup {
			insts = append(insts, x)
		}
	}
	if len(insts) > 0 {
		sort.Slice(insts, func(i, j int) bool { return insts[i].Before(insts[j]) })
		return insts, time.Time{}
	}
	// In the gap: read the wall time with the offset from before the
	// transition; that instant lies in the zone period that starts at the
	// gap's end.
	start, _ := time.Unix(u-before, 0).In(loc).ZoneBounds()
	return nil, start
}
