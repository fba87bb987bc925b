package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// watching waits until something watches b's agentwork_locks (AcquireWait
// found the lease held and waits for its release).
func watching(t *testing.T, b *bus.Bus) {
	t.Helper()
	s, err := b.JetStream().Stream(t.Context(), "KV_"+bus.BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		info, err := s.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Consumers > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("AcquireWait did not start watching the lease within 15s")
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-t.Context().Done():
		}
	}
}

// TestAcquireWait: the lease is taken when it is free, when its holder
// releases it, and when a dead holder's lease expires; a live holder keeps
// it until ctx ends or maxWait passes.
func TestAcquireWait(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		// hold takes the lease before AcquireWait (nil: nobody) and
		// returns what to do once AcquireWait watches it (nil: nothing).
		hold    func(t *testing.T, b, other *bus.Bus, key string) func()
		maxWait time.Duration
		// cancel cancels AcquireWait's ctx once it watches.
		cancel bool
		// wantErr checks AcquireWait's error (nil: the lease is taken).
		wantErr func(err error) bool
	}{
		{name: "free"},
		{name: "a released lease", hold: func(t *testing.T, _, other *bus.Bus, key string) func() {
			theirs := record{Note: "theirs"}
			rev, err := bus.Acquire(t.Context(), other, other.Locks, key, time.Hour, &theirs, nil)
			if err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := bus.Release(t.Context(), other.Locks, key, theirs.Token, rev); err != nil {
					t.Error(err)
				}
			}
		}},
		{name: "renewed, then released", hold: func(t *testing.T, _, other *bus.Bus, key string) func() {
			theirs := record{Note: "theirs"}
			rev, err := bus.Acquire(t.Context(), other, other.Locks, key, time.Hour, &theirs, nil)
			if err != nil {
				t.Fatal(err)
			}
			return func() {
				rev, err := bus.Renew(t.Context(), other.Locks, key, &theirs, rev, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				if err := bus.Release(t.Context(), other.Locks, key, theirs.Token, rev); err != nil {
					t.Error(err)
				}
			}
		}},
		{name: "a dead holder's lease expires (nothing renews or releases it)", hold: func(t *testing.T, b, _ *bus.Bus, key string) func() {
			// An instance of a cluster that died: no boot id, so only
			// its expiry frees the lease; no write tells the watch.
			put(t, b.Locks, key, record{Lease: bus.Lease{Owner: "dead", Token: "t", Expires: time.Now().Add(300 * time.Millisecond).UTC()}})
			return nil
		}},
		{name: "ctx cancelled", cancel: true, hold: live, wantErr: func(err error) bool { return errors.Is(err, context.Canceled) }},
		{name: "max wait", maxWait: 200 * time.Millisecond, hold: live, wantErr: func(err error) bool {
			var he *bus.HeldError
			return errors.As(err, &he) && he.Holder.Owner != "" && !errors.Is(err, context.Canceled)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			other := bustest.Client(t, b)
			key := "wait." + bus.Token(tt.name)
			var then func()
			if tt.hold != nil {
				then = tt.hold(t, b, other, key)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
			defer cancel()
			type result struct {
				rev uint64
				err error
			}
			done := make(chan result, 1)
			mine := record{Note: "mine"}
			go func() {
				rev, err := bus.AcquireWait(ctx, b, b.Locks, key, time.Minute, tt.maxWait, &mine, nil)
				done <- result{rev, err}
			}()
			if then != nil || tt.cancel {
				watching(t, b)
			}
			if then != nil {
				then()
			}
			if tt.cancel {
				cancel()
			}
			var r result
			select {
			case r = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("AcquireWait did not return")
			}
			if tt.wantErr != nil {
				if r.err == nil || !tt.wantErr(r.err) {
					t.Fatalf("AcquireWait = %d, %v; want the error of %s", r.rev, r.err, tt.name)
				}
				if got, _ := get[record](t, b.Locks, key); got.Note == "mine" {
					t.Fatal("the held lease was taken")
				}
				return
			}
			if r.err != nil {
				t.Fatalf("AcquireWait: %v", r.err)
			}
			got, rev := get[record](t, b.Locks, key)
			if rev != r.rev || got != mine || got.Owner != b.Instance() || !b.Held(got.Lease, time.Now()) {
				t.Fatalf("stored %+v at %d, want %+v at %d held by %s", got, rev, mine, r.rev, b.Instance())
			}
		})
	}
}

// live takes key for an hour as other, a live instance, and keeps it.
func live(t *testing.T, _, other *bus.Bus, key string) func() {
	theirs := record{Note: "theirs"}
	if _, err := bus.Acquire(t.Context(), other, other.Locks, key, time.Hour, &theirs, nil); err != nil {
		t.Fatal(err)
	}
	return nil
}
