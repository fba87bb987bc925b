package bus

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// openAt opens a bus on a data dir of the test's own (dir "": a new one),
// and returns its config to open it again.
func openAt(t *testing.T, cfg Config, mods ...Option) (*Bus, Config) {
	t.Helper()
	if cfg.DataDir == "" {
		cfg = Config{DataDir: t.TempDir(), Listen: "off", ReadyTimeout: 20 * time.Second}
	}
	b, err := Open(t.Context(), cfg, mods...)
	if err != nil {
		t.Fatal(err)
	}
	return b, cfg
}

// TestResetOnlyWhileClaimsLast: after a restart, a consumer with a message
// in flight is reset to its ack floor (re-delivering what was acked above
// it) only while the first message above the floor is younger than the
// horizon within which the claims of those acked messages are sure to
// exist; past it, the consumer is left alone and what was in flight comes
// after its ack wait.
func TestResetOnlyWhileClaimsLast(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b, cfg := openAt(t, Config{})
	cons, err := b.js.CreateOrUpdateConsumer(ctx, StreamRequests, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := b.js.Publish(ctx, b.Subjects.Request("task", "x"), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []jetstream.Msg
	for m := range batch.Messages() {
		got = append(got, m)
	}
	if len(got) != 2 {
		t.Fatalf("fetched %d messages, want 2", len(got))
	}
	if err := got[1].DoubleAck(ctx); err != nil { // acked above the floor; the first stays in flight
		t.Fatal(err)
	}
	b.Close()

	pending := func(b *Bus) int {
		t.Helper()
		c, err := b.js.Consumer(ctx, StreamRequests, "w")
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.Close()
		return info.NumAckPending
	}
	// The message in flight is older than the horizon: no reset.
	old, err := Open(ctx, cfg, func(b *Bus) { b.resetHorizon = 0 })
	if err != nil {
		t.Fatal(err)
	}
	if n := pending(old); n != 1 {
		t.Errorf("acks pending after a restart past the horizon = %d, want 1 (no reset)", n)
	}
	// Within the horizon: reset, nothing pending, both come again.
	fresh, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := pending(fresh); n != 0 {
		t.Errorf("acks pending after a restart within the horizon = %d, want 0 (reset to the ack floor)", n)
	}
}

// TestTimerFiresInFlightComeAgainAtOnce: after a restart, a consumer of
// the timers' fires with one in flight is reset to its ack floor however
// old the fire is (a fire handled again finds its work done in its
// owner's state): the fire comes again at once, not after its ack wait.
// The reset also hands out again the fires handled after it; when more
// than replayBound were, the consumer is left alone, and the fire in
// flight comes after its ack wait.
func TestTimerFiresInFlightComeAgainAtOnce(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		after int // fires handled after the one in flight
		reset bool
	}{
		{"a few handled after it", 300, true},
		{"more than the bound handled after it", 4200, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			b, cfg := openAt(t, Config{DataDir: t.TempDir(), Listen: "off", ReadyTimeout: 20 * time.Second, SyncInterval: time.Minute})
			timers := NewTimers(b)
			if err := timers.Set(ctx, "cron.stuck", time.Now(), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			cons, err := b.js.CreateOrUpdateConsumer(ctx, StreamTimers, jetstream.ConsumerConfig{
				Durable: "cron-test", FilterSubject: b.Subjects.TimerFired("cron") + ".>",
				AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour, MaxAckPending: 1024,
			})
			if err != nil {
				t.Fatal(err)
			}
			fetch := func(c jetstream.Consumer, n int, ack bool) int {
				t.Helper()
				got := 0
				for deadline := time.Now().Add(30 * time.Second); got < n && time.Now().Before(deadline); {
					batch, err := c.Fetch(min(n-got, 500), jetstream.FetchMaxWait(2*time.Second))
					if err != nil {
						t.Fatal(err)
					}
					for m := range batch.Messages() {
						got++
						if ack {
							if err := m.Ack(); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
				return got
			}
			if fetch(cons, 1, false) != 1 { // in flight when the process stops
				t.Fatal("the timer did not fire")
			}
			for i := range tt.after {
				if err := timers.Set(ctx, fmt.Sprintf("cron.job-%04d", i), time.Now(), nil); err != nil {
					t.Fatal(err)
				}
			}
			if got := fetch(cons, tt.after, true); got != tt.after {
				t.Fatalf("%d of %d fires handled", got, tt.after)
			}
			b.Close()

			// However old: the horizon does not hold for the timers.
			again, _ := openAt(t, cfg, func(b *Bus) { b.resetHorizon = 0 })
			defer again.Close()
			c, err := again.js.Consumer(ctx, StreamTimers, "cron-test")
			if err != nil {
				t.Fatal(err)
			}
			info, err := c.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if reset := info.NumAckPending == 0; reset != tt.reset {
				t.Errorf("after the restart: %d acks pending (reset %v), want reset %v", info.NumAckPending, reset, tt.reset)
			}
			if tt.reset && fetch(c, 1, false) != 1 {
				t.Error("the fire in flight when the process stopped did not come again at once (its ack wait is an hour)")
			}
		})
	}
}
