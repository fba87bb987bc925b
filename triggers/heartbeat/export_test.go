package heartbeat

import "time"

// Test hooks.

// SetQueuePoll shortens the wait between lease checks of overlap: queue.
func (h *Heartbeat) SetQueuePoll(d time.Duration) { h.queuePoll = d }

// Plan exposes the tick planner.
func (h *Heartbeat) Plan(last, now time.Time) time.Time { return h.plan(last, now) }
