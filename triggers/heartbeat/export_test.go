package heartbeat

import (
	"context"
	"time"
)

// Test hooks.

// SetQueuePoll shortens the wait between lease checks of overlap: queue.
func (h *Heartbeat) SetQueuePoll(d time.Duration) { h.queuePoll = d }

// SetEvery sets the interval below the 1m that Config allows, so a test
// sees ticks of the real clock within seconds.
func (h *Heartbeat) SetEvery(d time.Duration) { h.cfg.Every = d }

// Plan exposes the tick planner.
func (h *Heartbeat) Plan(last, now time.Time) time.Time { return h.plan(last, now) }

// Due exposes what a fire of the timer publishes.
func (h *Heartbeat) Due(last, armed, now time.Time) (time.Time, bool) { return h.due(last, armed, now) }

// Fire exposes a fire of the timer armed for armed.
func (h *Heartbeat) Fire(ctx context.Context, armed time.Time) error { return h.fire(ctx, armed) }

// ChecklistNow exposes the checklist a run would get now: its name in the
// prompt, and the skip status and detail when it cannot be used.
func (h *Heartbeat) ChecklistNow(ctx context.Context) (text, name, status, detail string, err error) {
	c, name, status, detail, err := h.checklistNow(ctx)
	return c.Text, name, status, detail, err
}
