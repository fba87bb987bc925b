package approval

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
)

// maxID bounds an approval id: a Telegram button's callback_data
// ("a:<id>:approve") holds 64 bytes.
const maxID = 48

func checkID(id string) error {
	if !bus.ValidToken(id) || len(id) > maxID {
		return fmt.Errorf("%w %q (an approval id is 1-%d characters of a-z, 0-9, _ and -)", ErrNoApproval, id, maxID)
	}
	return nil
}

// read returns the approval id and its revision (ErrNoApproval if none).
func (s *Service) read(ctx context.Context, id string) (Approval, uint64, error) {
	if err := checkID(id); err != nil {
		return Approval{}, 0, err
	}
	ent, err := s.bus.Approvals.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Approval{}, 0, fmt.Errorf("%w %q", ErrNoApproval, id)
	}
	if err != nil {
		return Approval{}, 0, fmt.Errorf("approval: read %s: %w", id, err)
	}
	var a Approval
	if err := json.Unmarshal(ent.Value(), &a); err != nil {
		return Approval{}, 0, &bus.CorruptError{Key: id, Revision: ent.Revision(), Err: err}
	}
	return a, ent.Revision(), nil
}

// write stores a at revision rev by compare-and-set; on a conflict it
// reads again and calls fn (see bus.UpdateAt). An ended approval's key
// expires bus.ApprovalTTL after the write.
func (s *Service) write(ctx context.Context, a Approval, rev uint64, fn func(*Approval, bool) (bool, error)) (Approval, uint64, error) {
	kv := s.bus.Approvals
	var out Approval
	var err error
	if a.State.Ended() {
		out, rev, err = bus.UpdateAtExpiring(ctx, s.bus, kv, a.ID, a, rev, bus.ApprovalTTL, fn)
	} else {
		out, rev, err = bus.UpdateAt(ctx, kv, a.ID, a, rev, fn)
	}
	s.bus.NoteWrite(err)
	if err != nil {
		return out, rev, fmt.Errorf("approval: write %s: %w", a.ID, err)
	}
	return out, rev, nil
}

func (s *Service) list(ctx context.Context, f Filter) ([]Approval, error) {
	if f.State != "" && !f.State.Valid() {
		return nil, fmt.Errorf("%w: state %q (want pending, approved, rejected, expired or cancelled)", ErrInvalid, f.State)
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	keys, err := s.bus.Keys(ctx, s.bus.Approvals, ">")
	if err != nil {
		return nil, fmt.Errorf("approval: list: %w", err)
	}
	var out []Approval
	for _, key := range keys {
		a, _, err := s.read(ctx, key)
		if errors.Is(err, ErrNoApproval) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if f.State == "" || a.State == f.State {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b Approval) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), strings.Compare(b.ID, a.ID))
	})
	if len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// errAbort stops a caller where it is, as if its process died (a test
// hook said so).
var errAbort = errors.New("approval: aborted")

func (s *Service) at(point, id string) error {
	if s.hook == nil {
		return nil
	}
	if err := s.hook(point, id); err != nil {
		return fmt.Errorf("%w at %s %s: %w", errAbort, point, id, err)
	}
	return nil
}
