package mcpserver

import "testing"

// A credential has at most MaxWaits tool calls waiting for outcomes at
// once (each polls the API); another credential is not held up by it.
func TestWaitsPerCredential(t *testing.T) {
	t.Parallel()
	s := New(nil)
	ops, other := Caller{Name: "ops", Credential: "ops"}, Caller{Name: "other", Credential: "other"}
	var releases []func()
	for i := range MaxWaits {
		release, err := s.acquireWait(ops)
		if err != nil {
			t.Fatalf("wait %d of ops: %v", i+1, err)
		}
		releases = append(releases, release)
	}
	if _, err := s.acquireWait(ops); err == nil || err.(*Error).Code != CodeUnavailable {
		t.Errorf("wait %d of ops = %v, want unavailable", MaxWaits+1, err)
	}
	release, err := s.acquireWait(other)
	if err != nil {
		t.Errorf("a wait of another credential: %v", err)
	} else {
		release()
	}
	releases[0]()
	release, err = s.acquireWait(ops)
	if err != nil {
		t.Errorf("a wait of ops after one ended: %v", err)
	} else {
		release()
	}
	for _, r := range releases[1:] {
		r()
	}
}
