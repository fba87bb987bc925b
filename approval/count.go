package approval

import (
	"context"
	"encoding/json"
	"fmt"
)

// Count returns how many approvals the bucket holds in each state (a
// state with none is left out): the pending ones, and the ended ones
// until they expire (bus.ApprovalTTL). It reads the bucket in one pass
// (a watch of each key's latest value) and decodes of each value its
// state only, where List reads and decodes each approval whole, one
// request each.
func (s *Service) Count(ctx context.Context) (map[State]int, error) {
	all, err := s.bus.Latest(ctx, s.bus.Approvals, ">", false)
	if err != nil {
		return nil, fmt.Errorf("approval: count: %w", err)
	}
	out := map[State]int{}
	for _, ent := range all {
		var a struct {
			State State `json:"state"`
		}
		if json.Unmarshal(ent.Value(), &a) != nil || !a.State.Valid() {
			continue // not an approval: not counted
		}
		out[a.State]++
	}
	return out, nil
}

// States are the states of an approval, the one that waits first.
var States = []State{Pending, Approved, Rejected, Expired, Cancelled}
