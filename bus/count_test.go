package bus_test

import (
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// CountSince counts the messages of the subjects stored since a time,
// exactly, however many there are, without reading them.
func TestCountSince(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	ctx := t.Context()
	js := b.JetStream()
	pub := func(source, outcome string, n int) {
		t.Helper()
		bustest.EmitEvents(t, b, source, outcome, "x", nil, n)
	}
	pub("cron", bus.OutcomeDone, 7)
	// The stream's clock, not the test's: the time of the last stored.
	st, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mid := info.State.LastTime.Add(time.Nanosecond) // what is stored next is stored after it
	pub("cron", bus.OutcomeDone, 1203)
	pub("heartbeat", bus.OutcomeSkip, 40)
	pub("delivery", "delivered", 11)

	for _, tc := range []struct {
		subjects []string
		since    time.Time
		want     uint64
	}{
		{[]string{b.Subjects.Event("*", bus.OutcomeDone)}, time.Time{}, 1210},
		{[]string{b.Subjects.Event("*", bus.OutcomeDone)}, mid, 1203},
		{[]string{b.Subjects.Event("*", bus.OutcomeSkip)}, mid, 40},
		{[]string{b.Subjects.Event("*", bus.OutcomeDone), b.Subjects.Event("*", bus.OutcomeSkip)}, mid, 1243},
		{[]string{b.Subjects.Event("*", bus.OutcomeError)}, mid, 0},
		{[]string{b.Subjects.Events()}, mid, 1254},
		{[]string{b.Subjects.Event("*", bus.OutcomeDone)}, time.Now().Add(time.Hour), 0},
	} {
		got, err := b.CountSince(ctx, bus.StreamEvents, tc.subjects, tc.since)
		if err != nil {
			t.Fatalf("CountSince(%v, %s): %v", tc.subjects, tc.since, err)
		}
		if got != tc.want {
			t.Errorf("CountSince(%v, %s) = %d, want %d", tc.subjects, tc.since, got, tc.want)
		}
	}
	// It leaves no consumer behind.
	names := st.ConsumerNames(ctx)
	for n := range names.Name() {
		t.Errorf("consumer %s left on the events stream", n)
	}
	if _, err := b.CountSince(ctx, "NO_SUCH_STREAM", []string{"x"}, time.Time{}); err == nil {
		t.Error("CountSince on a missing stream = nil error, want one")
	}
}
