package heartbeat

import (
	"context"
	"fmt"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
)

// History limits.
const (
	DefaultHistoryLimit = 20
	MaxHistoryLimit     = 500
)

// History returns the last limit runs of the heartbeat name from the
// AGENTWORK_EVENTS stream, newest first (0 means DefaultHistoryLimit; at
// most MaxHistoryLimit). See agentwork.History for what it costs.
func History(ctx context.Context, b *bus.Bus, name string, limit int) ([]agentwork.Record, error) {
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	recs, err := agentwork.History(ctx, b, agentwork.HistoryQuery{
		Sources: []string{bus.SourceHeartbeat}, Names: []string{name}, Limit: min(limit, MaxHistoryLimit),
	})
	if err != nil {
		return nil, fmt.Errorf("heartbeat: history: %w", err)
	}
	return recs, nil
}
