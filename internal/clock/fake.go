package clock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Fake is a clock for tests: its time moves only by Advance or Set, and the
// timers whose deadline is reached fire then, in deadline order.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever timers change
}

var _ Clock = (*Fake)(nil)

// NewFake returns a fake clock set to t.
func NewFake(t time.Time) *Fake { return &Fake{now: t, changed: make(chan struct{})} }

// Now implements Clock.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer implements Clock.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// After implements Clock.
func (f *Fake) After(d time.Duration) <-chan time.Time { return f.NewTimer(d).C() }

// Advance moves the time forward by d and fires the timers that are due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	target := f.now.Add(d)
	f.mu.Unlock()
	f.Set(target)
}

// Set moves the time to t (forward only: an earlier t only fires nothing)
// and fires the timers that are due, in deadline order.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.After(f.now) {
		f.now = t
	}
	sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].when.Before(f.timers[j].when) })
	keep := f.timers[:0]
	for _, tm := range f.timers {
		if tm.when.After(f.now) {
			keep = append(keep, tm)
			continue
		}
		tm.active = false
		select {
		case tm.c <- f.now:
		default:
		}
	}
	clear(f.timers[len(keep):])
	f.timers = keep
	f.notify()
}

// Waiters returns how many timers are waiting to fire.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// BlockUntil waits until at least n timers are waiting (for example: the
// code under test has gone back to sleep), or ctx ends.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		ok, ch := len(f.timers) >= n, f.changed
		f.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// NextDeadline returns the earliest waiting timer's deadline.
func (f *Fake) NextDeadline() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var first time.Time
	for _, t := range f.timers {
		if first.IsZero() || t.when.Before(first) {
			first = t.when
		}
	}
	return first, !first.IsZero()
}

// notify wakes BlockUntil callers; f.mu is held.
func (f *Fake) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *Fake) remove(t *fakeTimer) bool {
	for i, x := range f.timers {
		if x == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			return true
		}
	}
	return false
}

type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	when   time.Time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.active
	t.active = false
	t.f.remove(t)
	t.drain()
	t.f.notify()
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.active
	t.f.remove(t)
	t.drain()
	t.when = t.f.now.Add(d)
	if d <= 0 {
		t.active = false
		t.c <- t.f.now
	} else {
		t.active = true
		t.f.timers = append(t.f.timers, t)
	}
	t.f.notify()
	return was
}

func (t *fakeTimer) drain() {
	select {
	case <-t.c:
	default:
	}
}

// BlockUntilDue waits until at least n timers will fire once the clock
// reaches when (the code under test is waiting for that moment), or ctx
// ends.
func (f *Fake) BlockUntilDue(ctx context.Context, when time.Time, n int) error {
	for {
		f.mu.Lock()
		count := 0
		for _, t := range f.timers {
			if !t.when.After(when) {
				count++
			}
		}
		ch := f.changed
		f.mu.Unlock()
		if count >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}
