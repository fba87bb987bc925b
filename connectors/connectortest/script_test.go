package connectortest_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentwork/agentwork/connectors/connectortest"
)

// answers returns what n requests get from s: the fault kind, or 0 for a
// normal answer.
func answers(s *connectortest.Script[connectortest.Fault], n int) []connectortest.FaultKind {
	out := make([]connectortest.FaultKind, n)
	for i := range out {
		if f, ok := s.Next(); ok {
			out[i] = f.Kind
		}
	}
	return out
}

func TestScript(t *testing.T) {
	t.Parallel()
	const (
		none = 0
		down = connectortest.Unavailable
		auth = connectortest.Unauthorized
		slow = connectortest.RateLimited
		bad  = connectortest.BadRequest
	)
	for _, tc := range []struct {
		name   string
		script func(s *connectortest.Script[connectortest.Fault])
		want   []connectortest.FaultKind
	}{
		{"nothing", func(*connectortest.Script[connectortest.Fault]) {}, []connectortest.FaultKind{none, none}},
		{"inject", func(s *connectortest.Script[connectortest.Fault]) {
			s.Inject(connectortest.Fault{Kind: auth})
		}, []connectortest.FaultKind{auth, none}},
		{"inject after 2", func(s *connectortest.Script[connectortest.Fault]) {
			s.Inject(connectortest.Fault{Kind: down, After: 2})
		}, []connectortest.FaultKind{none, none, down, none}},
		{"fail next 2", func(s *connectortest.Script[connectortest.Fault]) { s.FailNext(2, down) }, []connectortest.FaultKind{down, down, none}},
		{"fail next 0", func(s *connectortest.Script[connectortest.Fault]) { s.FailNext(0, down) }, []connectortest.FaultKind{none}},
		{"in order", func(s *connectortest.Script[connectortest.Fault]) {
			s.RateLimit(1, time.Second)
			s.FailNext(1, down)
			s.AnswerNext(1, connectortest.Fault{Kind: bad})
		}, []connectortest.FaultKind{slow, down, bad, none}},
		{"fail for ever", func(s *connectortest.Script[connectortest.Fault]) { s.Fail(down) }, []connectortest.FaultKind{down, down, down, down}},
		{"recover", func(s *connectortest.Script[connectortest.Fault]) {
			s.Fail(down)
			s.Recover()
		}, []connectortest.FaultKind{none, none}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := connectortest.NewScript(func(f connectortest.Fault) connectortest.Fault { return f })
			tc.script(s)
			got := answers(s, len(tc.want))
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("answers = %v, want %v", got, tc.want)
				}
			}
			if s.Requests() != len(tc.want) {
				t.Errorf("Requests() = %d, want %d", s.Requests(), len(tc.want))
			}
		})
	}
}

// The fake's answer function turns each fault into its answer; a rate
// limit carries its wait.
func TestScriptAnswer(t *testing.T) {
	t.Parallel()
	s := connectortest.NewScript(func(f connectortest.Fault) time.Duration { return f.RetryAfter })
	s.RateLimit(1, 3*time.Second)
	if d, ok := s.Next(); !ok || d != 3*time.Second {
		t.Fatalf("Next() after RateLimit(1, 3s) = %s, %v; want 3s", d, ok)
	}
}

// Stall returns when its ctx is done, and at once after Release.
func TestScriptStall(t *testing.T) {
	t.Parallel()
	s := connectortest.NewScript(func(f connectortest.Fault) connectortest.Fault { return f })
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	s.Stall(ctx)
	if ctx.Err() == nil {
		t.Fatal("Stall returned before its ctx was done")
	}
	done := make(chan struct{})
	go func() { s.Stall(t.Context()); close(done) }()
	s.Release()
	s.Release() // idempotent
	select {
	case <-done:
	case <-time.After(connectortest.Wait):
		t.Fatal("Stall did not return after Release")
	}
}
