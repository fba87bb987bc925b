package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
)

// Entry is one heartbeat run as the events stream recorded it.
type Entry struct {
	// Time is when the run's event was emitted (the run's end).
	Time      time.Time `json:"time"`
	EventID   string    `json:"event_id"`
	RunID     string    `json:"run_id,omitempty"`
	RequestID string    `json:"request_id,omitempty"`
	// Result is the event's data: outcome, reason, text, error, duration...
	agentwork.Result
}

// History limits.
const (
	DefaultHistoryLimit = 20
	MaxHistoryLimit     = 500
)

// History returns the last limit runs of the heartbeat name from the
// AGENTWORK_EVENTS stream, newest first. It reads backwards in growing
// windows, so it costs about as many reads as entries returned, however
// long the stream is.
func History(ctx context.Context, b *bus.Bus, name string, limit int) ([]Entry, error) {
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	limit = min(limit, MaxHistoryLimit)
	st, err := b.JetStream().Stream(ctx, bus.StreamEvents)
	if err != nil {
		return nil, fmt.Errorf("heartbeat: history: %w", err)
	}
	filter := b.Subjects.Event(bus.SourceHeartbeat, "*")
	last, err := st.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("heartbeat: history: %w", err)
	}
	var out []Entry // newest first
	end := last.Sequence
	window := uint64(4*limit + 16)
	for {
		start := uint64(1)
		if end > window {
			start = end - window + 1
		}
		var chunk []Entry // oldest first
		for seq := start; seq <= end; {
			m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("heartbeat: history: %w", err)
			}
			if m.Sequence > end {
				break
			}
			seq = m.Sequence + 1
			ev, err := bus.DecodeEvent(m.Data)
			if err != nil || ev.Subject != name {
				continue
			}
			e := Entry{Time: ev.Time, EventID: ev.ID, RunID: ev.RunID, RequestID: ev.CausationID}
			if ev.DecodeData(&e.Result) != nil {
				continue
			}
			chunk = append(chunk, e)
		}
		for i := len(chunk) - 1; i >= 0 && len(out) < limit; i-- {
			out = append(out, chunk[i])
		}
		if len(out) >= limit || start == 1 {
			return out, nil
		}
		end = start - 1
		window *= 4
	}
}
