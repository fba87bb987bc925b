package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
)

// Bounds of the search for one run (GET /v1/runs/{id}).
const (
	// runDeliveriesWithin is how long after a run's event its deliveries
	// are looked for (retries with backoff included).
	runDeliveriesWithin = time.Hour
	// runScanMax bounds the events read for one run.
	runScanMax   = 20000
	runScanBatch = 256
)

// run answers one run by the id of its event (the ids GET /v1/runs and
// /v1/events give), with the delivery results of its notifications:
// {"run": <CloudEvent>, "deliveries": [<CloudEvent>...]}. The id is a
// UUIDv7, so it tells when the event was made: the stream is read from a
// little before that, and for the deliveries up to an hour after.
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	at, ok := uuidV7Time(id)
	if !ok {
		problem.Write(w, problem.Details{Status: http.StatusNotFound, Code: "not_found",
			Detail: "no run event " + id + ": want the id of a run's event, as GET /v1/runs lists them"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	run, deliveries, err := s.findRun(ctx, id, at)
	if err != nil {
		problem.Unavailable(w, 5*time.Second, "cannot read the events stream: "+err.Error())
		return
	}
	if run == nil {
		problem.Write(w, problem.Details{Status: http.StatusNotFound, Code: "not_found",
			Detail: "no run event " + id + " (runs are kept 30 days)"})
		return
	}
	if deliveries == nil {
		deliveries = []json.RawMessage{}
	}
	writeJSON(w, http.StatusOK, struct {
		Run        json.RawMessage   `json:"run"`
		Deliveries []json.RawMessage `json:"deliveries"`
	}{run, deliveries})
}

// findRun reads the events stream from resumeWindow before at: the run
// event id, then the delivery results that carry its run id.
func (s *Server) findRun(ctx context.Context, id string, at time.Time) (json.RawMessage, []json.RawMessage, error) {
	js := s.deps.Bus.JetStream()
	start := at.Add(-resumeWindow)
	cons, err := js.CreateConsumer(ctx, bus.StreamEvents, jetstream.ConsumerConfig{
		FilterSubjects: []string{s.deps.Bus.Subjects.Events()}, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start,
		AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = js.DeleteConsumer(dctx, bus.StreamEvents, cons.CachedInfo().Name)
	}()
	var (
		run        json.RawMessage
		runID      string
		deliveries []json.RawMessage
	)
	left := min(cons.CachedInfo().NumPending, runScanMax)
	for left > 0 {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msgs, err := cons.Fetch(int(min(left, runScanBatch)), jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			return nil, nil, err
		}
		n, done := 0, false
		for m := range msgs.Messages() {
			n++
			if done {
				continue
			}
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			if run == nil && md.Timestamp.After(at.Add(resumeLate)) ||
				run != nil && md.Timestamp.After(at.Add(runDeliveriesWithin)) {
				done = true
				continue
			}
			ev, err := bus.DecodeEvent(m.Data())
			if err != nil {
				continue
			}
			switch {
			case run == nil && ev.ID == id:
				run, runID = append(json.RawMessage(nil), m.Data()...), ev.RunID
				if runID == "" {
					done = true // nothing to match its deliveries by
				}
			case run != nil && ev.RunID == runID && (ev.Type == bus.TypeOf(bus.SourceDelivery, connectors.OutcomeDelivered) ||
				ev.Type == bus.TypeOf(bus.SourceDelivery, connectors.OutcomeFailed)):
				deliveries = append(deliveries, append(json.RawMessage(nil), m.Data()...))
			}
		}
		ferr := msgs.Error()
		cancel()
		if ferr != nil && !errors.Is(ferr, jetstream.ErrNoMessages) && !errors.Is(ferr, context.DeadlineExceeded) {
			return nil, nil, ferr
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		if done || n == 0 {
			break
		}
		left -= min(uint64(n), left)
	}
	return run, deliveries, nil
}
