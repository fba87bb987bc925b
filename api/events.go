package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
)

// Limits of the event queries.
const (
	DefaultRunsLimit = 50
	MaxRunsLimit     = agentwork.MaxHistoryLimit
	maxFilterValues  = 16
	// resumeWindow is how far around a Last-Event-ID's time the stream is
	// searched for it (clock skew between instances and the server).
	resumeWindow = 30 * time.Second
	// resumeLate is how long after its id's time an event may be stored: a
	// run's event carries the run's id, made when the run started, so it is
	// stored up to the run's timeout later.
	resumeLate    = 10 * time.Minute
	maxResumeHeld = 1000
)

// EventOutcomes are the outcomes events carry, the last token of their
// subjects: a run's done, skip or error, and a delivery's delivered or
// failed. A filter naming anything else would match nothing.
var EventOutcomes = []string{bus.OutcomeDone, bus.OutcomeSkip, bus.OutcomeError, connectors.OutcomeDelivered, connectors.OutcomeFailed}

// eventQuery is the parsed filter of /v1/events and /v1/runs.
type eventQuery struct {
	sources  []string
	outcomes []string
	names    []string // path.Match globs on the event subject attribute
	since    time.Time
	before   time.Time // runs only
	limit    int
}

// parseQuery reads source, outcome, name (comma-separated lists, or the
// parameter repeated), since (a duration back from now, or RFC 3339) and,
// when allowLimit, limit. Unknown parameters are errors.
func parseQuery(q url.Values, now time.Time, allowLimit bool, outcomes []string) (eventQuery, []problem.FieldError) {
	var eq eventQuery
	var errs []problem.FieldError
	add := func(field, format string, a ...any) {
		errs = append(errs, problem.FieldError{Field: field, Detail: fmt.Sprintf(format, a...)})
	}
	list := func(name string) []string {
		var out []string
		for _, v := range q[name] {
			for _, p := range strings.Split(v, ",") {
				// A value twice would make overlapping filter subjects,
				// which JetStream refuses.
				if p = strings.TrimSpace(p); p != "" && !slices.Contains(out, p) {
					out = append(out, p)
				}
			}
		}
		if len(out) > maxFilterValues {
			add(name, "%d values; at most %d", len(out), maxFilterValues)
			return nil
		}
		return out
	}
	for k := range q {
		switch k {
		case "source", "outcome", "name", "since":
		case "limit", "before":
			if allowLimit {
				continue
			}
			fallthrough
		default:
			add(k, "unknown parameter; want source, outcome, name, since%s", map[bool]string{true: ", before or limit", false: ""}[allowLimit])
		}
	}
	eq.sources = list("source")
	for _, s := range eq.sources {
		if !bus.ValidToken(s) {
			add("source", "%q: want a source name of a-z, 0-9, _ and -", s)
		}
	}
	eq.outcomes = list("outcome")
	for _, o := range eq.outcomes {
		if !contains(outcomes, o) {
			add("outcome", "%q: want one or more of %s", o, strings.Join(outcomes, ", "))
		}
	}
	eq.names = list("name")
	for _, n := range eq.names {
		if _, err := path.Match(n, ""); err != nil {
			add("name", "%q is not a valid glob", n)
		}
	}
	if v := q.Get("since"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			eq.since = now.Add(-d)
		} else if t, err := time.Parse(time.RFC3339, v); err == nil {
			eq.since = t
		} else {
			add("since", "%q: want a duration such as 1h or 30m, or an RFC 3339 time such as 2026-05-04T09:00:00Z", v)
		}
	}
	if v := q.Get("before"); v != "" && allowLimit {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			add("before", "%q: want an RFC 3339 time, such as the time of the last run of a page", v)
		}
		eq.before = t
	}
	if allowLimit {
		eq.limit = DefaultRunsLimit
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxRunsLimit {
				add("limit", "%q: want a number from 1 to %d", v, MaxRunsLimit)
			} else {
				eq.limit = n
			}
		}
	}
	return eq, errs
}

// subjects are the filter subjects of q on the events stream.
func (q eventQuery) subjects(s bus.Subjects) []string {
	sources, outcomes := q.sources, q.outcomes
	if len(sources) == 0 && len(outcomes) == 0 {
		return []string{s.Events()}
	}
	if len(sources) == 0 {
		sources = []string{"*"}
	}
	if len(outcomes) == 0 {
		outcomes = []string{"*"}
	}
	out := make([]string, 0, len(sources)*len(outcomes))
	for _, src := range sources {
		for _, o := range outcomes {
			out = append(out, s.Event(src, o))
		}
	}
	return out
}

// match applies the filters the subjects cannot express: name and since.
func (q eventQuery) match(ev bus.Event, stored time.Time) bool {
	if !q.since.IsZero() && stored.Before(q.since) {
		return false
	}
	if len(q.names) == 0 {
		return true
	}
	for _, n := range q.names {
		if ok, _ := path.Match(n, ev.Subject); ok {
			return true
		}
	}
	return false
}

// events streams AGENTWORK_EVENTS as Server-Sent Events: each event is
//
//	id: <CloudEvents id>
//	event: <CloudEvents type>
//	data: <the CloudEvents JSON, one line>
//
// From now on by default; since=... replays from a time; a Last-Event-ID
// header resumes after that event.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q, errs := parseQuery(r.URL.Query(), s.now(), false, EventOutcomes)
	if len(errs) > 0 {
		problem.Invalid(w, "invalid event filter", errs...)
		return
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: q.subjects(s.deps.Bus.Subjects), DeliverPolicy: jetstream.DeliverNewPolicy}
	resume := newResume(r.Header.Get("Last-Event-ID"))
	switch {
	case resume != nil:
		start := resume.at.Add(-resumeWindow)
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	case !q.since.IsZero():
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &q.since
	}
	ctx := r.Context()
	cons, err := s.deps.Bus.JetStream().OrderedConsumer(ctx, bus.StreamEvents, cfg)
	if err != nil {
		problem.Unavailable(w, 5*time.Second, "cannot read the events stream: "+err.Error())
		return
	}
	it, err := cons.Messages()
	if err != nil {
		problem.Unavailable(w, 5*time.Second, "cannot read the events stream: "+err.Error())
		return
	}
	defer it.Stop()

	// A stream outlives the server's write timeout: each write gets its
	// own deadline, so a client that stops reading is dropped instead of
	// blocking the handler. (net/http clears the read deadline itself.)
	rc := http.NewResponseController(w)
	write := func(p []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		if _, err := w.Write(p); err != nil {
			return err
		}
		return rc.Flush()
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// A comment first, so the client knows the stream is subscribed.
	if write([]byte(": agentwork events\n\n")) != nil {
		return
	}
	s.metrics.streams.Add(1)
	defer s.metrics.streams.Add(-1)

	var buf bytes.Buffer
	send := func(ev bus.Event, data []byte) error {
		buf.Reset()
		fmt.Fprintf(&buf, "id: %s\nevent: %s\ndata: ", oneLine(ev.ID), oneLine(ev.Type))
		if err := json.Compact(&buf, data); err != nil {
			return nil // not JSON: skip
		}
		buf.WriteString("\n\n")
		return write(buf.Bytes())
	}
	for {
		nctx, cancel := context.WithTimeout(ctx, s.cfg.KeepAlive)
		m, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, context.DeadlineExceeded):
			// Caught up with the stream and the id never came by: it was
			// stored before the scan's start or not at all (the client had
			// it, so it cannot come later). Send what was held back.
			if resume != nil {
				if resume.flush(send) != nil {
					return
				}
				resume = nil
			}
			if write([]byte(": keepalive\n\n")) != nil {
				return
			}
			continue
		case err != nil:
			s.log.Warn("event stream ended", zap.Error(err))
			return
		}
		ev, derr := bus.DecodeEvent(m.Data())
		if derr != nil {
			continue
		}
		var stored time.Time
		if md, err := m.Metadata(); err == nil {
			stored = md.Timestamp
		}
		matches := q.match(ev, stored)
		if resume != nil {
			var err error
			if resume, err = resume.offer(ev, m.Data(), stored, matches, send); err != nil {
				return
			}
			continue
		}
		if matches && send(ev, m.Data()) != nil {
			return
		}
	}
}

// resumeState finds the Last-Event-ID in the stream. The id is a UUIDv7,
// so it tells when the event was made; the stream is read from a little
// before that. Events up to and including the id were sent before and are
// dropped. If the id is not found (filtered out, aged out) the events held
// back meanwhile are sent, so nothing is lost.
type resumeState struct {
	id   string
	at   time.Time
	held []heldEvent
}

type heldEvent struct {
	ev   bus.Event
	data []byte
}

func newResume(id string) *resumeState {
	at, ok := uuidV7Time(id)
	if !ok {
		return nil
	}
	return &resumeState{id: id, at: at}
}

// offer handles one event while resuming (matches: it passes the filters);
// it returns nil once resumed.
func (rs *resumeState) offer(ev bus.Event, data []byte, stored time.Time, matches bool, send func(bus.Event, []byte) error) (*resumeState, error) {
	if ev.ID == rs.id {
		return nil, nil // found: what came before was sent before, what follows is new
	}
	if stored.After(rs.at.Add(resumeLate)) || len(rs.held) >= maxResumeHeld {
		if err := rs.flush(send); err != nil {
			return nil, err
		}
		if matches {
			return nil, send(ev, data)
		}
		return nil, nil
	}
	if matches {
		rs.held = append(rs.held, heldEvent{ev, append([]byte(nil), data...)})
	}
	return rs, nil
}

func (rs *resumeState) flush(send func(bus.Event, []byte) error) error {
	for _, h := range rs.held {
		if err := send(h.ev, h.data); err != nil {
			return err
		}
	}
	rs.held = nil
	return nil
}

// uuidV7Time is the millisecond timestamp in the first 48 bits of a UUIDv7.
func uuidV7Time(id string) (time.Time, bool) {
	raw, err := hex.DecodeString(strings.ReplaceAll(id, "-", ""))
	if err != nil || len(raw) != 16 || raw[6]>>4 != 7 {
		return time.Time{}, false
	}
	var b [8]byte
	copy(b[2:], raw[:6])
	return time.UnixMilli(int64(binary.BigEndian.Uint64(b[:]))), true
}

func oneLine(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }

// runs answers the recent run events (done, skip, error), newest first:
// {"runs": [<CloudEvents>...]}.
func (s *Server) runs(w http.ResponseWriter, r *http.Request) {
	q, errs := parseQuery(r.URL.Query(), s.now(), true, []string{bus.OutcomeDone, bus.OutcomeSkip, bus.OutcomeError})
	if len(errs) > 0 {
		problem.Invalid(w, "invalid run filter", errs...)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	recs, err := agentwork.History(ctx, s.deps.Bus, agentwork.HistoryQuery{
		Sources: q.sources, Outcomes: q.outcomes, Names: q.names, Since: q.since, Before: q.before, Limit: q.limit,
	})
	if err != nil {
		problem.Unavailable(w, 5*time.Second, "cannot read the events stream: "+err.Error())
		return
	}
	evs := make([]json.RawMessage, len(recs))
	for i, rec := range recs {
		evs[i] = rec.JSON
	}
	writeJSON(w, http.StatusOK, struct {
		Runs []json.RawMessage `json:"runs"`
	}{evs})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		problem.Error(w, http.StatusInternalServerError, "encode response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Bounds of the search for one run (GET /v1/runs/{id}).
const (
	// runScanMax bounds the events read for one run or its deliveries.
	runScanMax   = 20000
	runScanBatch = 256
	// runAlertsWithin is how long after a run its page looks for the
	// results of notifications its event does not name (alerts queued
	// after it), at least.
	runAlertsWithin = time.Minute
	// runAlertsScan bounds the delivery results read in that minute.
	runAlertsScan = 2000
)

// RunReply is the body of GET /v1/runs/{id}: the run's event (its record:
// the model, the tool calls, the tokens, the notification) and the
// results of its notifications' deliveries.
type RunReply struct {
	Run        json.RawMessage   `json:"run"`
	Deliveries []json.RawMessage `json:"deliveries"`
}

// run answers one run by the id of its event (as GET /v1/runs lists
// them), its run id or the id of the request that caused it (UUIDv7s,
// whose time bounds the search): GET /v1/runs/{id}.
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !bus.ValidToken(strings.ToLower(id)) {
		problem.Error(w, http.StatusNotFound, fmt.Sprintf("%q is not a run or request id (GET /v1/runs lists the runs)", id))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	found, err := s.findRun(ctx, id)
	if err != nil {
		problem.Unavailable(w, 5*time.Second, "cannot read the events stream: "+err.Error())
		return
	}
	if found == nil {
		problem.Error(w, http.StatusNotFound, fmt.Sprintf("no run %s has ended (it may still be running or queued, or be older than the events stream keeps); GET /v1/runs lists the runs", id))
		return
	}
	reply := RunReply{Run: found.JSON, Deliveries: []json.RawMessage{}}
	if found.RunID != "" {
		reply.Deliveries, err = s.runDeliveries(ctx, found)
		if err != nil {
			problem.Unavailable(w, 5*time.Second, "cannot read the deliveries: "+err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, reply)
}

// runDeliveries returns the delivery results of run, oldest first: the
// results stored after it (from a little before, for clocks) up to the
// latest result of each notification its event names (notification_ids),
// or up to where it is known none is left: each notification ends with
// one result, delivered or failed, and one more for each retry a person
// asks for (connectors.DeadLetters.Retry). The failed deliveries say how
// one that failed went on: still failed (the dead letter names its last
// failure, and whether a retry waits), or delivered on a retry (the dead
// letter is gone): then the read goes on to that delivery, however late.
// Other notifications about the run (an alert queued after its event: a
// failure, a job paused at its budget) are in the answer when their
// result comes before the read stops, which is never before
// runAlertsWithin after the run. The read so costs the events between the
// run and its notifications' results (at least that minute), not an hour
// of every run's deliveries.
func (s *Server) runDeliveries(ctx context.Context, run *agentwork.Record) ([]json.RawMessage, error) {
	type last struct {
		seen    bool
		retry   int
		outcome string
	}
	wanted := make(map[string]*last, len(run.Result.NotificationIDs))
	for _, id := range run.Result.NotificationIDs {
		wanted[id] = &last{}
	}
	dead := s.deadLetters()
	// settled reports whether id's latest result is known to be l.
	settled := func(id string, l *last) (bool, error) {
		switch {
		case !l.seen:
			return false, nil // queued, or its result is further on
		case l.outcome == connectors.OutcomeDelivered:
			return true, nil
		}
		d, err := dead.Get(ctx, id)
		if errors.Is(err, connectors.ErrNoDeadLetter) {
			return false, nil // delivered on a retry since (or expired)
		}
		if err != nil {
			return false, err
		}
		// Its last failure is this one (a retry may wait, without a
		// result yet), or a later retry's, further on.
		return d.FailedRetry <= l.retry, nil
	}
	out := []json.RawMessage{}
	var ferr error
	alertsUntil, allSettled, extra := run.Time.Add(runAlertsWithin), len(wanted) == 0, 0
	// more reports whether to read on once every named notification has
	// its result: for alerts, within the minute and runAlertsScan events.
	more := func(stored time.Time) bool {
		if !allSettled {
			return true
		}
		extra++
		return stored.Before(alertsUntil) && extra < runAlertsScan
	}
	err := s.scanEvents(ctx, []string{s.deps.Bus.Subjects.Event(bus.SourceDelivery, "*")},
		run.Time.Add(-resumeWindow), func(stored time.Time, ev bus.Event, data []byte) bool {
			if ev.RunID != run.RunID {
				return more(stored)
			}
			out = append(out, append(json.RawMessage(nil), data...))
			var res connectors.Result
			if ev.DecodeData(&res) != nil {
				return true
			}
			l, ok := wanted[res.Notification.ID]
			if !ok || (l.seen && res.Notification.Retry < l.retry) {
				return more(stored)
			}
			l.seen, l.retry, l.outcome = true, res.Notification.Retry, ev.Type[strings.LastIndexByte(ev.Type, '.')+1:]
			for id, l := range wanted {
				done, err := settled(id, l)
				if err != nil {
					ferr = err
					return false
				}
				if !done {
					return true
				}
			}
			allSettled = true
			return more(stored)
		})
	return out, cmp.Or(ferr, err)
}

// findRun finds the run event of id: its event id, its run id or the id
// of the request that caused it. A UUIDv7 tells when it was made, and a
// run's event is stored after that: the run events are read forward from
// a little before it, up to the first match (at most runScanMax events).
// Another id (a manual run's with an idempotency key) is looked for among
// the latest runs.
func (s *Server) findRun(ctx context.Context, id string) (*agentwork.Record, error) {
	match := func(ev bus.Event) bool { return ev.ID == id || ev.RunID == id || ev.CausationID == id }
	at, ok := uuidV7Time(id)
	if !ok {
		recs, err := agentwork.History(ctx, s.deps.Bus, agentwork.HistoryQuery{Limit: MaxRunsLimit})
		if err != nil {
			return nil, err
		}
		for i := range recs { // the newest first: a request's latest run
			if match(recs[i].Event) {
				return &recs[i], nil
			}
		}
		return nil, nil
	}
	var subjects []string
	for _, o := range []string{bus.OutcomeDone, bus.OutcomeSkip, bus.OutcomeError} {
		subjects = append(subjects, s.deps.Bus.Subjects.Event("*", o))
	}
	var found *agentwork.Record
	err := s.scanEvents(ctx, subjects, at.Add(-resumeWindow), func(stored time.Time, ev bus.Event, data []byte) bool {
		if !match(ev) {
			return true
		}
		var res agentwork.Result
		_ = json.Unmarshal(ev.Data, &res)
		found = &agentwork.Record{ID: ev.ID, Time: ev.Time, Outcome: res.Outcome, RunID: ev.RunID, RequestID: ev.CausationID, Result: res,
			Event: ev, JSON: append(json.RawMessage(nil), data...)}
		return false
	})
	return found, err
}

// scanEvents reads the events of subjects stored since start, oldest
// first, and hands each to fn until fn returns false, the stream's end or
// runScanMax events; with one short-lived consumer.
func (s *Server) scanEvents(ctx context.Context, subjects []string, start time.Time, fn func(stored time.Time, ev bus.Event, data []byte) bool) error {
	js := s.deps.Bus.JetStream()
	cons, err := js.CreateConsumer(ctx, bus.StreamEvents, jetstream.ConsumerConfig{
		FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start,
		AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = js.DeleteConsumer(dctx, bus.StreamEvents, cons.CachedInfo().Name)
	}()
	// Read until the stream's end as it is now, not a count of pending
	// messages: a consumer with several filter subjects and a start time
	// can report fewer than it delivers (seen with nats-server 2.15).
	for left := runScanMax; left > 0; {
		msgs, err := cons.FetchNoWait(min(left, runScanBatch))
		if err != nil {
			return err
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
			ev, err := bus.DecodeEvent(m.Data())
			if err != nil {
				continue
			}
			done = !fn(md.Timestamp, ev, m.Data())
		}
		ferr := msgs.Error()
		if ferr != nil && !errors.Is(ferr, jetstream.ErrNoMessages) && !errors.Is(ferr, context.DeadlineExceeded) {
			return ferr
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if done || n == 0 {
			return nil
		}
		left -= min(n, left)
	}
	return nil
}
