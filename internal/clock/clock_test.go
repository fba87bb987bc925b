package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentwork/agentwork/internal/clock"
)

func TestFakeTimers(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 8, 6, 0, 0, 0, time.UTC)
	f := clock.NewFake(start)
	a := f.NewTimer(time.Minute)
	b := f.NewTimer(2 * time.Minute)
	if got := f.Waiters(); got != 2 {
		t.Fatalf("Waiters() = %d, want 2", got)
	}
	f.Advance(59 * time.Second)
	select {
	case <-a.C():
		t.Fatal("timer fired 1s early")
	default:
	}
	f.Advance(time.Second)
	select {
	case got := <-a.C():
		if want := start.Add(time.Minute); !got.Equal(want) {
			t.Fatalf("fired at %v, want %v", got, want)
		}
	default:
		t.Fatal("timer did not fire at its deadline")
	}
	if b.Stop() != true {
		t.Fatal("Stop of an active timer = false, want true")
	}
	f.Advance(time.Hour)
	select {
	case <-b.C():
		t.Fatal("stopped timer fired")
	default:
	}
	if a.Reset(time.Second) {
		t.Fatal("Reset of a fired timer = true, want false")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := f.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("BlockUntil(1) = %v", err)
	}
	f.Advance(time.Second)
	<-a.C()
	if !f.Now().Equal(start.Add(time.Hour + time.Minute + time.Second)) {
		t.Fatalf("Now() = %v", f.Now())
	}
	// A zero or negative duration fires at once.
	select {
	case <-f.After(0):
	default:
		t.Fatal("After(0) did not fire at once")
	}
}

func TestFakeBlockUntilTimesOut(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(time.Unix(0, 0))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := f.BlockUntil(ctx, 1); err == nil {
		t.Fatal("BlockUntil with no timers = nil, want a context error")
	}
}

func TestRealClock(t *testing.T) {
	t.Parallel()
	var c clock.Clock = clock.Real{}
	tm := c.NewTimer(time.Millisecond)
	select {
	case <-tm.C():
	case <-time.After(5 * time.Second):
		t.Fatal("real timer did not fire")
	}
	if c.Now().IsZero() {
		t.Fatal("Now() is zero")
	}
}
