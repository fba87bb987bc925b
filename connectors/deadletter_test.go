package connectors_test

import (
	"context"
	"errors"
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
	if d, err := dl.Retry(t.Context(), n.ID); err != nil || d.Retries != 1 || !d.Pending() {
		t.Fatalf("Retry = %+v, %v; want retries 1, pending", d, err)
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
	if _, err := dl.Retry(t.Context(), n.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := dl.Retry(t.Context(), n.ID); !errors.Is(err, connectors.ErrRetryPending) {
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
