package agentwork

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
)

// History limits.
const (
	// DefaultHistoryLimit is how many records History returns for Limit 0.
	DefaultHistoryLimit = 20
	// MaxHistoryLimit caps HistoryQuery.Limit: a larger limit returns this many.
	MaxHistoryLimit = 1000
)

// Read-window tuning of History (see its doc comment).
const (
	historyMinWindow = 256              // sequences of the first and smallest window
	historyBatch     = 256              // messages per fetch
	historyGrowth    = 4                // next window while nothing matched: × the last
	historyMaxGrowth = 16               // next window at most: × the last
	historyFetchWait = 5 * time.Second  // to fetch messages known to be stored
	historyIdle      = 30 * time.Second // the server drops a read consumer left behind
	historyCleanup   = 5 * time.Second  // to delete a read consumer
)

// HistoryQuery selects run events (done, skip, error) on AGENTWORK_EVENTS.
// The zero value asks for the DefaultHistoryLimit latest runs of every
// source.
type HistoryQuery struct {
	// Sources are the run sources (heartbeat, cron, task...); empty means all.
	Sources []string
	// Outcomes are done, skip or error; empty means all three, which leaves
	// out delivery results (outcomes delivered and failed): they are no runs.
	Outcomes []string
	// Names select by the event's subject attribute (heartbeat name, cron
	// job id, task name). Each matches a name equal to it or, as a
	// path.Match pattern, names like "report-*". Empty means every name.
	Names []string
	// Since, if set, leaves out events stored before it.
	Since time.Time
	// Before, if set, leaves out events whose time (the run's end) is not
	// before it: the next page of a list that ended with a run of that
	// time.
	Before time.Time
	// Limit is how many records to return: 0 means DefaultHistoryLimit, more
	// than MaxHistoryLimit means MaxHistoryLimit.
	Limit int
}

// Record is one run in a history: a run event as the events stream holds
// it. Its JSON is the one shape of every run history (heartbeat and cron,
// over the CLI, HTTP and NATS):
//
//	{"id", "time", "outcome", "run_id", "request_id", "result": {...}}
type Record struct {
	// ID is the event's id.
	ID string `json:"id"`
	// Time is when the event was emitted: the run's end.
	Time time.Time `json:"time"`
	// Outcome is done, skip or error.
	Outcome string `json:"outcome"`
	// RunID is the run's id (the event's runid).
	RunID string `json:"run_id,omitempty"`
	// RequestID is the id of the request that caused the run (the event's
	// causationid).
	RequestID string `json:"request_id,omitempty"`
	// Result is the event's data: reason, error, text sent, scheduled
	// time, model and usage.
	Result Result `json:"result"`

	// Event is the CloudEvents envelope (not in the JSON).
	Event bus.Event `json:"-"`
	// JSON is the event exactly as stored, for callers that pass it on
	// (GET /v1/runs); not in the record's own JSON.
	JSON json.RawMessage `json:"-"`
}

// History returns the latest run events that match q, newest first. It
// reads AGENTWORK_EVENTS backwards in windows of sequence numbers, each with
// one short-lived consumer filtered by source and outcome: the newest
// window first (4 × limit sequences, at least 256), then older ones sized
// by how many matches the part read so far held. Windows do not overlap and
// each is read exactly to its end, so the cost is about the messages of the
// chosen sources and outcomes since the oldest record returned, plus one
// consumer per window — not the length of the stream. Messages that are not
// CloudEvents with a JSON object as data are skipped. A message deleted from
// the stream while History reads may hide as many older ones from that call.
func History(ctx context.Context, b *bus.Bus, q HistoryQuery) ([]Record, error) {
	subjects, err := q.subjects(b.Subjects)
	if err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	limit = min(limit, MaxHistoryLimit)
	js := b.JetStream()
	stream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return nil, fmt.Errorf("agentwork: history: read stream %s: %w", bus.StreamEvents, err)
	}
	st := stream.CachedInfo().State
	if st.Msgs == 0 {
		return nil, nil
	}
	var out []Record // newest first
	end, newer := st.LastSeq, uint64(0)
	size := uint64(max(historyMinWindow, 4*limit))
	for {
		start := st.FirstSeq
		if end-st.FirstSeq >= size {
			start = end - size + 1
		}
		w, err := readWindow(ctx, js, subjects, q, start, end, newer)
		if err != nil {
			return nil, fmt.Errorf("agentwork: history: read %s from sequence %d: %w", bus.StreamEvents, start, err)
		}
		for i := len(w.found) - 1; i >= 0 && len(out) < limit; i-- {
			rec := w.found[i]
			if rec.Event.DecodeData(&rec.Result) == nil { // else not a run
				rec.ID, rec.Time, rec.Outcome = rec.Event.ID, rec.Event.Time, rec.Result.Outcome
				rec.RunID, rec.RequestID = rec.Event.RunID, rec.Event.CausationID
				out = append(out, rec)
			}
		}
		if len(out) >= limit || start == st.FirstSeq || w.pastSince {
			return out, nil
		}
		end, newer = start-1, w.pending
		size = nextWindow(size, st.LastSeq-start+1, len(out), limit)
	}
}

// nextWindow sizes the next window: when matches were found in the
// scanned sequences so far, 1.5 × the sequences the missing ones should
// take at that density; otherwise historyGrowth × the last.
func nextWindow(last, scanned uint64, found, limit int) uint64 {
	if found == 0 {
		return historyGrowth * last
	}
	need := uint64(limit-found) * scanned / uint64(found)
	return min(max(need+need/2, historyMinWindow), historyMaxGrowth*last)
}

// window is what one read window yielded.
type window struct {
	found     []Record // matches, oldest first, Result not yet decoded
	pending   uint64   // filtered messages from the window's start to the stream's end
	pastSince bool     // the window starts before q.Since: older ones need no reading
}

// readWindow reads the filtered messages of sequences [start, end]. newer
// is how many filtered messages followed end when the previous (newer)
// window was read, so the window holds pending-newer messages and the read
// stops there instead of running on into the newer window.
func readWindow(ctx context.Context, js jetstream.JetStream, subjects []string, q HistoryQuery, start, end, newer uint64) (window, error) {
	var w window
	cons, err := js.CreateConsumer(ctx, bus.StreamEvents, jetstream.ConsumerConfig{
		FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start,
		AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, InactiveThreshold: historyIdle,
	})
	if err != nil {
		return w, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), historyCleanup)
		defer cancel()
		_ = js.DeleteConsumer(dctx, bus.StreamEvents, cons.CachedInfo().Name)
	}()
	w.pending = cons.CachedInfo().NumPending
	left := w.pending - min(newer, w.pending)
	first := true
	for left > 0 {
		n, done, err := fetch(ctx, cons, int(min(left, historyBatch)), func(m jetstream.Msg) bool {
			md, err := m.Metadata()
			if err != nil {
				return true
			}
			if md.Sequence.Stream > end {
				return false
			}
			if first {
				first = false
				w.pastSince = !q.Since.IsZero() && md.Timestamp.Before(q.Since)
			}
			if rec, ok := q.record(m.Data(), md.Timestamp); ok {
				w.found = append(w.found, rec)
			}
			return true
		})
		if err != nil {
			return w, err
		}
		if done || n == 0 {
			break // past end, or the rest aged out meanwhile
		}
		left -= min(uint64(n), left)
	}
	return w, nil
}

// fetch fetches up to batch messages and hands each to fn until fn returns
// false (done). n is how many messages came.
func fetch(ctx context.Context, cons jetstream.Consumer, batch int, fn func(jetstream.Msg) bool) (n int, done bool, err error) {
	fctx, cancel := context.WithTimeout(ctx, historyFetchWait)
	defer cancel()
	msgs, err := cons.Fetch(batch, jetstream.FetchContext(fctx))
	if err != nil {
		return 0, false, err
	}
	for m := range msgs.Messages() {
		n++
		if !done && !fn(m) {
			done = true
		}
	}
	if err := msgs.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
		return n, done, err
	}
	if err := ctx.Err(); err != nil {
		return n, done, err
	}
	return n, done, nil
}

// record decodes a stored event (not yet its data) and reports whether q
// selects it (the consumer's subjects have already selected source and
// outcome).
func (q HistoryQuery) record(data []byte, stored time.Time) (Record, bool) {
	if !q.Since.IsZero() && stored.Before(q.Since) {
		return Record{}, false
	}
	ev, err := bus.DecodeEvent(data)
	if err != nil || !q.matchName(ev.Subject) || !q.Before.IsZero() && !ev.Time.Before(q.Before) {
		return Record{}, false
	}
	return Record{Event: ev, JSON: json.RawMessage(data)}, true
}

func (q HistoryQuery) matchName(name string) bool {
	if len(q.Names) == 0 {
		return true
	}
	for _, n := range q.Names {
		if n == name {
			return true
		}
		if ok, _ := path.Match(n, name); ok {
			return true
		}
	}
	return false
}

// subjects are the consumer's filter subjects: every source × outcome,
// each once.
func (q HistoryQuery) subjects(s bus.Subjects) ([]string, error) {
	sources, outcomes := q.Sources, q.Outcomes
	for _, src := range sources {
		if err := bus.CheckToken("agentwork: history: source", src); err != nil {
			return nil, err
		}
	}
	for _, o := range outcomes {
		if err := bus.CheckToken("agentwork: history: outcome", o); err != nil {
			return nil, err
		}
	}
	if len(sources) == 0 {
		sources = []string{"*"}
	}
	if len(outcomes) == 0 {
		outcomes = []string{bus.OutcomeDone, bus.OutcomeSkip, bus.OutcomeError}
	}
	out := make([]string, 0, len(sources)*len(outcomes))
	for _, src := range sources {
		for _, o := range outcomes {
			out = append(out, s.Event(src, o))
		}
	}
	// The server refuses a consumer whose filters overlap.
	slices.Sort(out)
	return slices.Compact(out), nil
}
