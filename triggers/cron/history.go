package cron

import (
	"context"
	"fmt"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
)

// DefaultHistoryLimit is how many records History returns when asked for 0.
const DefaultHistoryLimit = 20

// History returns the latest run events (done, skip, error) of the job,
// newest first: at most limit (0 means DefaultHistoryLimit; capped at
// agentwork.MaxHistoryLimit). See agentwork.History for what it costs.
func (s *Scheduler) History(ctx context.Context, id string, limit int) ([]agentwork.Record, error) {
	if !bus.ValidToken(id) {
		return nil, apiErr(ErrNotFound, "job %q not found", id)
	}
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	recs, err := agentwork.History(ctx, s.bus, agentwork.HistoryQuery{Sources: []string{bus.SourceCron}, Names: []string{id}, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("cron: history of %s: %w", id, err)
	}
	return recs, nil
}
