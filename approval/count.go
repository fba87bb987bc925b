package approval

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Count returns how many approvals the bucket holds in each state (a
// state with none is left out): the pending ones, and the ended ones
// until they expire (bus.ApprovalTTL). It reads the bucket in one pass
// (a watch of each key's latest value) and decodes of each value its
// state only, where List reads and decodes each approval whole, one
// request each.
func (s *Service) Count(ctx context.Context) (map[State]int, error) {
	w, err := s.bus.Approvals.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("approval: count: %w", err)
	}
	defer func() { _ = w.Stop() }()
	out := map[State]int{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("approval: count: %w", ctx.Err())
		case ent, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("approval: count: the watch of %s ended", s.bus.Approvals.Bucket())
			}
			if ent == nil {
				return out, nil // all read
			}
			var a struct {
				State State `json:"state"`
			}
			if json.Unmarshal(ent.Value(), &a) != nil || !a.State.Valid() {
				continue // not an approval: not counted
			}
			out[a.State]++
		}
	}
}

// States are the states of an approval, the one that waits first.
var States = []State{Pending, Approved, Rejected, Expired, Cancelled}
