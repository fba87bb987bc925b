package approval_test

import (
	"fmt"
	"testing"

	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus/bustest"
)

// Count counts the approvals by state, decided and expired ones apart
// from those that wait.
func TestCount(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := newService(t, b)
	ctx := t.Context()
	if got, err := s.Count(ctx); err != nil || len(got) != 0 {
		t.Fatalf("Count of none = %v, %v; want no counts", got, err)
	}
	var ids []string
	for i := range 7 {
		id := fmt.Sprintf("count-%d", i)
		if _, _, err := s.Ask(ctx, request(id)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := s.Decide(ctx, ids[0], approval.Approve, approval.ByAdmin, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decide(ctx, ids[1], approval.Reject, approval.ByAdmin, "no"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decide(ctx, ids[2], approval.Reject, approval.ByAdmin, ""); err != nil {
		t.Fatal(err)
	}
	got, err := s.Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[approval.State]int{approval.Pending: 4, approval.Approved: 1, approval.Rejected: 2}
	if len(got) != len(want) {
		t.Errorf("Count = %v, want %v", got, want)
	}
	for st, n := range want {
		if got[st] != n {
			t.Errorf("Count[%s] = %d, want %d", st, got[st], n)
		}
	}
}
