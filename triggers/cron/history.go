package cron

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
)

// Entry is one event of a job's (or the heartbeat's) history.
type Entry struct {
	// ID is the event id; RunID and RequestID tie it to its run.
	ID        string    `json:"id"`
	Time      time.Time `json:"time"`
	Outcome   string    `json:"outcome"`
	RunID     string    `json:"run_id,omitempty"`
	RequestID string    `json:"request_id,omitempty"`
	// Result is the event's data: reason, error, text sent, scheduled time.
	Result agentwork.Result `json:"result"`
}

// DefaultHistoryLimit is how many entries History returns when asked for 0.
const DefaultHistoryLimit = 20

// History returns the latest events of source/name (the events on
// <prefix>.event.<source>.* whose subject attribute is name) from the
// AGENTWORK_EVENTS stream, newest first, at most limit. It reads the
// stream backwards in growing windows, so a recent history costs little
// however long the stream is.
func History(ctx context.Context, b *bus.Bus, source, name string, limit int) ([]Entry, error) {
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	js := b.JetStream()
	st, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	info := st.CachedInfo().State
	if info.Msgs == 0 {
		return nil, nil
	}
	filter := b.Subjects.Event(source, "*")
	var out []Entry // newest first
	end := info.LastSeq
	window := uint64(max(256, 16*limit))
	for len(out) < limit {
		start := info.FirstSeq
		if end >= info.FirstSeq+window {
			start = end - window + 1
		}
		batch, err := readRange(ctx, js, filter, name, start, end)
		if err != nil {
			return nil, err
		}
		for i := len(batch) - 1; i >= 0 && len(out) < limit; i-- {
			out = append(out, batch[i])
		}
		if start <= info.FirstSeq {
			break
		}
		end = start - 1
		window *= 4
	}
	return out, nil
}

// readRange returns the matching events with sequence in [start, end], oldest first.
func readRange(ctx context.Context, js jetstream.JetStream, filter, name string, start, end uint64) ([]Entry, error) {
	cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    start,
	})
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer func() {
		if ci := cons.CachedInfo(); ci != nil {
			_ = js.DeleteConsumer(context.WithoutCancel(ctx), bus.StreamEvents, ci.Name)
		}
	}()
	var out []Entry
	for {
		msgs, err := cons.FetchNoWait(256)
		if err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		n := 0
		done := false
		for m := range msgs.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			if md.Sequence.Stream > end {
				done = true
				continue
			}
			if md.NumPending == 0 {
				done = true
			}
			ev, err := bus.DecodeEvent(m.Data())
			if err != nil || ev.Subject != name {
				continue
			}
			e := Entry{ID: ev.ID, Time: ev.Time, RunID: ev.RunID, RequestID: ev.CausationID}
			if err := ev.DecodeData(&e.Result); err != nil {
				continue
			}
			e.Outcome = e.Result.Outcome
			out = append(out, e)
		}
		if err := msgs.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("history: %w", err)
		}
		if done || n == 0 {
			return out, nil
		}
	}
}
