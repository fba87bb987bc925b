package connectortest

import (
	"context"
	"slices"
	"sync"
)

// Recorder is an Observer for fakes that see each message arrive, such as an
// httptest handler or a NATS subscription: call Add as messages arrive. The
// zero value is ready to use; safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	msgs    []Message
	changed chan struct{}
}

var _ Observer = (*Recorder)(nil)

// Add records m and wakes the callers waiting in Messages.
func (r *Recorder) Add(m Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// Messages implements Observer.
func (r *Recorder) Messages(ctx context.Context, n int) ([]Message, error) {
	for {
		r.mu.Lock()
		if len(r.msgs) >= n {
			out := slices.Clone(r.msgs)
			r.mu.Unlock()
			return out, nil
		}
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			r.mu.Lock()
			out := slices.Clone(r.msgs)
			r.mu.Unlock()
			return out, ctx.Err()
		}
	}
}
