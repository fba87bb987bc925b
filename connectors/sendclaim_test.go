package connectors_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
)

// splitter sends a text word by word with SendParts, as the connectors
// that split do; after the first part of its first attempt it calls
// after (once).
type splitter struct {
	after func()
	mu    sync.Mutex
	sent  [][]string // the parts each attempt sent
	done  chan struct{}
}

func (s *splitter) Send(ctx context.Context, n connectors.Notification) (connectors.Receipt, error) {
	s.mu.Lock()
	s.sent = append(s.sent, nil)
	attempt := len(s.sent)
	s.mu.Unlock()
	defer func() {
		if attempt == 1 {
			close(s.done)
		}
	}()
	return connectors.SendParts(ctx, strings.Fields(n.Text), n.SentParts, func(i int, part string) (string, error) {
		s.mu.Lock()
		s.sent[attempt-1] = append(s.sent[attempt-1], part)
		s.mu.Unlock()
		if attempt == 1 && i == 0 {
			s.after()
		}
		return fmt.Sprintf("m%d", i+1), nil
	})
}

func (s *splitter) attempts() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

// limitLocks sets the largest message agentwork_locks takes (-1: any).
// A send claim is larger than 16 bytes: every write of one fails, with an
// error of the server that is not a lost compare-and-set.
func limitLocks(t *testing.T, b *bus.Bus, size int32) {
	t.Helper()
	s, err := b.JetStream().Stream(t.Context(), "KV_"+bus.BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.MaxMsgSize = size
	if _, err := b.JetStream().UpdateStream(t.Context(), cfg); err != nil {
		t.Fatalf("limit %s to %d bytes: %v", s.CachedInfo().Config.Name, size, err)
	}
}

// TestDispatcherStopsSplitTextWhenProgressIsNotRecorded: when the part a
// destination confirmed cannot be recorded in the send claim (the bus
// refuses the write), the send stops there, as a retryable failure, instead
// of sending the next parts unrecorded: were the instance to die then, the
// one taking over would send every one of them again. The next attempt
// sends what is not recorded, and the text arrives whole.
func TestDispatcherStopsSplitTextWhenProgressIsNotRecorded(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	cfg := fastRetries
	cfg.AckWait = time.Second
	chat := &splitter{done: make(chan struct{})}
	chat.after = func() { limitLocks(t, b, 16) }
	n := note("1", "chat", "one two three")
	enqueue(t, b, n)
	stop := run(t, b, connectors.Registry{"chat": chat}, cfg)
	select {
	case <-chat.done:
	case <-time.After(wait):
		t.Fatal("the first attempt did not end")
	}
	if first := chat.attempts()[0]; !slices.Equal(first, []string{"one"}) {
		t.Errorf("the first attempt sent %q after the record of part 1 failed, want only %q", first, []string{"one"})
	}
	limitLocks(t, b, -1)
	d := next(t, events)
	stopped(t, stop)
	if d.outcome != connectors.OutcomeDelivered {
		t.Fatalf("event %s %+v, want delivered", d.outcome, d.res)
	}
	var all []string
	for _, a := range chat.attempts() {
		all = append(all, a...)
	}
	// Part 1 was not recorded: it may be sent again (the one part whose
	// record failed), never parts 2 and 3.
	if got := strings.Join(all, " "); got != "one one two three" && got != "one two three" {
		t.Errorf("the destination got %q over %d attempts, want every part, and none but part 1 twice", got, len(chat.attempts()))
	}
	if d.res.Receipt == nil || d.res.Receipt.Parts != 3 {
		t.Errorf("delivered receipt = %+v, want 3 parts", d.res.Receipt)
	}
}
