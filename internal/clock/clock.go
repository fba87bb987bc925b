// Package clock is the time source of everything whose behaviour depends on
// time (schedules, windows, leases): a Real clock in production and a Fake
// one in tests, which moves only when the test advances it, so no test has
// to sleep for a minute to pass.
package clock

import (
	"time"
)

// Clock tells the time and makes timers. Implementations are safe for
// concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once d has passed.
	NewTimer(d time.Duration) Timer
	// After is NewTimer(d).C().
	After(d time.Duration) <-chan time.Time
}

// Timer is a one-shot timer, as time.Timer.
type Timer interface {
	// C delivers the time when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it stopped it.
	Stop() bool
	// Reset changes the timer to fire after d; it reports whether the timer
	// was active. As with time.Timer (Go 1.23+), no stale value is received
	// after Stop or Reset returns.
	Reset(d time.Duration) bool
}

// Real is the system clock.
type Real struct{}

var _ Clock = Real{}

// Now implements Clock.
func (Real) Now() time.Time { return time.Now() }

// NewTimer implements Clock.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// After implements Clock.
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
