package cron

import (
	"context"
	"fmt"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
)

// Entry is one event of a job's (or the heartbeat's) history.
type Entry struct {
	// ID is the event id; RunID and RequestID tie it to its run.
	ID        string    `json:"id"`
	Time      time.Time `json:"time"`
	Outcome   string    `json:"outcome"`
	RunID     string    `json:"run_id,omitempty"`
	RequestID string    `json:"request_id,omitempty"`
	// Result is the event's data: reason, error, text sent, scheduled time.
	Result agentwork.Result `json:"result"`
}

// DefaultHistoryLimit is how many entries History returns when asked for 0.
const DefaultHistoryLimit = 20

// History returns the latest run events (done, skip, error) of source/name
// from the AGENTWORK_EVENTS stream, newest first, at most limit (capped at
// agentwork.MaxHistoryLimit). See agentwork.History for what it costs.
func History(ctx context.Context, b *bus.Bus, source, name string, limit int) ([]Entry, error) {
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	recs, err := agentwork.History(ctx, b, agentwork.HistoryQuery{Sources: []string{source}, Names: []string{name}, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("cron: history of %s %s: %w", source, name, err)
	}
	var out []Entry
	for _, r := range recs {
		out = append(out, Entry{
			ID: r.Event.ID, Time: r.Event.Time, Outcome: r.Result.Outcome,
			RunID: r.Event.RunID, RequestID: r.Event.CausationID, Result: r.Result,
		})
	}
	return out, nil
}
