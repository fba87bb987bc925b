package connectortest

import (
	"context"
	"sync"
	"time"
)

// Script is the scripted failures of a fake destination. A fake embeds a
// *Script[A], where A is its own answer (a status and an error body as its
// platform writes them, an SMTP reply), and its handler calls Next for
// each request: a scripted answer takes the place of the normal one. The
// methods tests call (Inject, FailNext, Fail, RateLimit, AnswerNext) queue
// their answers in order: each takes its requests, then the next one
// begins; Recover drops them all. Safe for concurrent use.
type Script[A any] struct {
	answer func(Fault) A
	stop   chan struct{}
	once   sync.Once

	mu       sync.Mutex
	steps    []step[A]
	requests int
}

// step is one queued script: after pass requests answered normally, the
// next left requests (-1: every one, until Recover) get a.
type step[A any] struct {
	pass, left int
	a          A
}

var _ FaultInjector = (*Script[int])(nil)

// NewScript returns a Script whose faults the fake answers with answer(f):
// its platform's answer to f.Kind, asking a RateLimited client to wait
// f.RetryAfter.
func NewScript[A any](answer func(Fault) A) *Script[A] {
	return &Script[A]{answer: answer, stop: make(chan struct{})}
}

// Inject implements FaultInjector: after f.After requests answered
// normally, the next one gets f.
func (s *Script[A]) Inject(f Fault) { s.add(step[A]{pass: f.After, left: 1, a: s.answer(f)}) }

// FailNext makes the next n requests (-1: every one, until Recover) fail
// as kind.
func (s *Script[A]) FailNext(n int, kind FaultKind) { s.AnswerNext(n, s.answer(Fault{Kind: kind})) }

// Fail makes every request fail as kind, until Recover.
func (s *Script[A]) Fail(kind FaultKind) { s.FailNext(-1, kind) }

// RateLimit answers the next n requests as RateLimited, asking the client
// to wait after.
func (s *Script[A]) RateLimit(n int, after time.Duration) {
	s.AnswerNext(n, s.answer(Fault{Kind: RateLimited, RetryAfter: after}))
}

// AnswerNext answers the next n requests (-1: every one, until Recover)
// with a, an answer of the fake's own.
func (s *Script[A]) AnswerNext(n int, a A) {
	if n != 0 {
		s.add(step[A]{left: n, a: a})
	}
}

func (s *Script[A]) add(st step[A]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, st)
}

// Recover drops every scripted answer: the requests that follow are
// answered normally.
func (s *Script[A]) Recover() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = nil
}

// Next counts a request and returns its scripted answer, if it has one.
func (s *Script[A]) Next() (A, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	var none A
	if len(s.steps) == 0 {
		return none, false
	}
	st := &s.steps[0]
	if st.pass > 0 {
		st.pass--
		return none, false
	}
	if st.left > 0 {
		if st.left--; st.left == 0 {
			s.steps = s.steps[1:]
		}
	}
	return st.a, true
}

// Requests returns how many requests asked Next, scripted or not.
func (s *Script[A]) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Stall blocks until ctx is done (the client gave up) or Release: how a
// fake answers a Stall. An HTTP handler reads the request body first: only
// then does net/http notice a client hanging up.
func (s *Script[A]) Stall(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-s.stop:
	}
}

// Release ends every Stall, now and later. A fake calls it when its test
// ends, before it closes its server (which waits for its handlers).
// Idempotent.
func (s *Script[A]) Release() { s.once.Do(func() { close(s.stop) }) }
