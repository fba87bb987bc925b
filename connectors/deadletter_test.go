package connectors_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
)

// TestDeadLetters: a delivery that failed for good is kept; a retry sends
// it again with the same notification id and removes it once delivered;
// a retry that fails again replaces it; a queued retry is not queued twice.
func TestDeadLetters(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	var down atomic.Bool
	down.Store(true)
	chat := &fake{fn: func(context.Context, connectors.Notification, int) error {
		if down.Load() {
			return connectors.Permanent(errors.New("403 Forbidden: bot was blocked by the user"))
		}
		return nil
	}}
	other := &fake{}
	n, m := note("1", "chat", "Disk /var is 95% full"), note("2", "other", "fine")
	enqueue(t, b, n, m)
	stop := run(t, b, connectors.Registry{"chat": chat, "other": other}, fastRetries)
	defer stopped(t, stop)
	dl := connectors.NewDeadLetters(b)

	for range 2 {
		if d := next(t, events); d.res.Connector == "chat" && d.outcome != connectors.OutcomeFailed {
			t.Fatalf("chat's event = %s, want failed", d.outcome)
		}
	}
	list, err := dl.List(t.Context(), "")
	if err != nil || len(list) != 1 {
		t.Fatalf("List = %d dead letters, %v; want the one failed delivery", len(list), err)
	}
	got := list[0]
	if got.Notification.ID != n.ID || got.Connector != "chat" || !got.Permanent || got.Attempts != 1 || got.Notification.Text != n.Text || got.Pending() {
		t.Fatalf("dead letter = %+v, want chat's permanent failure of %s after 1 attempt, not pending", got, n.ID)
	}
	if list, _ := dl.List(t.Context(), "other"); len(list) != 0 {
		t.Fatalf("List(other) = %d, want 0", len(list))
	}
	if _, err := dl.Get(t.Context(), "nope"); !errors.Is(err, connectors.ErrNoDeadLetter) {
		t.Fatalf("Get(unknown) = %v, want ErrNoDeadLetter", err)
	}

	// Still down: the retry fails and replaces the dead letter.
	// The retry may have failed again by the time Retry answers (its
	// record then already names retry 1's failure): pending, or that.
	if d, err := dl.Retry(t.Context(), n.ID, false); err != nil || d.Retries != 1 || (!d.Pending() && d.FailedRetry != 1) {
		t.Fatalf("Retry = %+v, %v; want retries 1, pending (or failed again as retry 1)", d, err)
	}
	if d := next(t, events); d.outcome != connectors.OutcomeFailed || d.res.Notification.ID != n.ID || d.res.Notification.Retry != 1 {
		t.Fatalf("event after the first retry = %s %+v, want failed for %s retry 1", d.outcome, d.res.Notification, n.ID)
	}
	got, err = dl.Get(t.Context(), n.ID)
	if err != nil || got.Retries != 1 || got.Pending() {
		t.Fatalf("dead letter after a failed retry = %+v, %v; want retries 1, not pending", got, err)
	}

	// Up again: the retry is delivered once and the dead letter goes.
	down.Store(false)
	if _, err := dl.Retry(t.Context(), n.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := dl.Retry(t.Context(), n.ID, false); !errors.Is(err, connectors.ErrRetryPending) {
		// Either still pending, or delivered and gone already.
		if !errors.Is(err, connectors.ErrNoDeadLetter) {
			t.Fatalf("second Retry while the first is queued = %v, want ErrRetryPending", err)
		}
	}
	d := next(t, events)
	if d.outcome != connectors.OutcomeDelivered || d.res.Notification.ID != n.ID {
		t.Fatalf("event after the second retry = %s for %s, want delivered for %s", d.outcome, d.res.Notification.ID, n.ID)
	}
	eventually(t, "the dead letter removed", func() bool {
		_, err := dl.Get(t.Context(), n.ID)
		return errors.Is(err, connectors.ErrNoDeadLetter)
	})
	sent := 0
	for _, c := range chat.Calls() {
		if c.n.ID == n.ID {
			sent++
		}
	}
	if sent != 3 {
		t.Fatalf("chat got %s %d times, want 3 (the failure and two retries, all with the same id)", n.ID, sent)
	}
}

// TestDeadLetterRetryEdges: a retry for a connector the server does not
// run is refused and leaves nothing marked; a forced retry queues again
// while one is pending; the retry count never goes down, so every retry
// is a new message the stream stores.
func TestDeadLetterRetryEdges(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	var sends atomic.Int32
	second := make(chan struct{}) // the send of retry 2 waits for it
	chat := &fake{fn: func(_ context.Context, n connectors.Notification, _ int) error {
		sends.Add(1)
		if n.Retry == 2 {
			<-second
		}
		return connectors.Permanent(errors.New("400 Bad Request: chat not found"))
	}}
	n, gone := note("1", "chat", "Disk full"), note("2", "gone", "for a removed connector")
	enqueue(t, b, n, gone)
	// "gone" has no dispatcher: its dead letter comes from a dispatcher
	// that ran it once, then it left the config.
	stopGone := run(t, b, connectors.Registry{"gone": &fake{fn: func(context.Context, connectors.Notification, int) error {
		return connectors.Permanent(errors.New("401"))
	}}}, fastRetries)
	if d := next(t, events); d.outcome != connectors.OutcomeFailed {
		t.Fatalf("gone: %s, want failed", d.outcome)
	}
	stopped(t, stopGone)
	if err := b.JetStream().DeleteConsumer(t.Context(), "AGENTWORK_DELIVERIES", connectors.ConsumerName("gone")); err != nil {
		t.Fatal(err)
	}
	dl := connectors.NewDeadLetters(b)
	if _, err := dl.Retry(t.Context(), gone.ID, false); err == nil || !strings.Contains(err.Error(), "add it back to agentwork.yaml") {
		t.Fatalf("Retry for a connector without a consumer = %v, want an error that says to add it back", err)
	}
	if d, _ := dl.Get(t.Context(), gone.ID); d.Pending() {
		t.Fatal("a refused retry left the dead letter marked as queued")
	}

	stop := run(t, b, connectors.Registry{"chat": chat}, fastRetries)
	defer stopped(t, stop)
	if d := next(t, events); d.outcome != connectors.OutcomeFailed {
		t.Fatalf("chat: %s, want failed", d.outcome)
	}
	for i := 1; i <= 3; i++ {
		d, err := dl.Retry(t.Context(), n.ID, i == 3)
		if err != nil || d.Retries != i {
			t.Fatalf("retry %d = %+v, %v; want retries %d", i, d, err, i)
		}
		if i == 2 {
			// Queued and not failed yet (its send waits): only a forced
			// retry goes.
			if _, err := dl.Retry(t.Context(), n.ID, false); !errors.Is(err, connectors.ErrRetryPending) {
				t.Fatalf("unforced retry while pending = %v, want ErrRetryPending", err)
			}
			close(second)
		}
		if d := next(t, events); d.outcome != connectors.OutcomeFailed || d.res.Notification.Retry != i {
			t.Fatalf("event after retry %d = %s for retry %d", i, d.outcome, d.res.Notification.Retry)
		}
		eventually(t, fmt.Sprintf("the failure of retry %d recorded", i), func() bool {
			d, err := dl.Get(t.Context(), n.ID)
			return err == nil && !d.Pending() && d.Retries == i && !d.RetriedAt.IsZero()
		})
	}
	if got := sends.Load(); got != 4 {
		t.Fatalf("chat got %d sends, want 4 (the delivery and three retries)", got)
	}
}
