package heartbeat

import (
	"context"
	"fmt"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
)

// Entry is one heartbeat run as the events stream recorded it.
type Entry struct {
	// Time is when the run's event was emitted (the run's end).
	Time      time.Time `json:"time"`
	EventID   string    `json:"event_id"`
	RunID     string    `json:"run_id,omitempty"`
	RequestID string    `json:"request_id,omitempty"`
	// Result is the event's data: outcome, reason, text, error, duration...
	agentwork.Result
}

// History limits.
const (
	DefaultHistoryLimit = 20
	MaxHistoryLimit     = 500
)

// History returns the last limit runs of the heartbeat name from the
// AGENTWORK_EVENTS stream, newest first. See agentwork.History for what it
// costs.
func History(ctx context.Context, b *bus.Bus, name string, limit int) ([]Entry, error) {
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	recs, err := agentwork.History(ctx, b, agentwork.HistoryQuery{
		Sources: []string{bus.SourceHeartbeat}, Names: []string{name}, Limit: min(limit, MaxHistoryLimit),
	})
	if err != nil {
		return nil, fmt.Errorf("heartbeat: history: %w", err)
	}
	var out []Entry
	for _, r := range recs {
		out = append(out, Entry{Time: r.Event.Time, EventID: r.Event.ID, RunID: r.Event.RunID, RequestID: r.Event.CausationID, Result: r.Result})
	}
	return out, nil
}
