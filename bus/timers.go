package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TimerType is the CloudEvents type of a timer's envelope.
const TimerType = "agentwork.timer.fired"

// TimerSource is the CloudEvents source of a timer's envelope.
const TimerSource = "agentwork/timers"

// TimerSetRetry bounds how long Set retries a publish that got no answer
// (a stream leader election, a lost ack) with the same message id. It is
// shorter than TimersDuplicates, so every retry is deduplicated.
const TimerSetRetry = time.Minute

// timerAttempt bounds one publish attempt inside Set and Cancel. A stream
// leader that stops drops the publishes it has not stored: the attempt
// waits this long before it is sent again (a stored timer acks within
// milliseconds, and a repeat is deduplicated).
const timerAttempt = time.Second

// maxTimerKey bounds a key's length (the subject adds its prefix).
const maxTimerKey = 200

// ErrNoTimer is returned by Pending when the key has no pending timer.
var ErrNoTimer = errors.New("bus: no pending timer")

// Timer is one timer: pending (from Pending) or fired (from DecodeTimer).
type Timer struct {
	// Key names the timer: dot-separated tokens of [a-z0-9_-], e.g.
	// "cron.daily-report" or "heartbeat.default".
	Key string
	// Due is when the timer was set to fire (UTC).
	Due time.Time
	// ID is unique per Set (a UUIDv7): a consumer that sees the same ID
	// twice sees one fire redelivered.
	ID string
	// Data is the JSON payload given to Set (may be empty).
	Data json.RawMessage
}

// Timers is the durable time engine: "fire X at T" for every time-based
// trigger. It stores each timer as a JetStream message schedule
// (`Nats-Schedule: @at <due>`) on TimerPending(key) in the stream
// AGENTWORK_TIMERS; when it is due, the stream leader copies it to
// TimerFired(key) and removes the schedule in the same stored message. So:
//
//   - a key holds at most one pending timer; Set replaces it;
//   - a timer fires once per cluster, with no claim among instances;
//   - pending timers survive restarts; one whose due time passed while the
//     server was down fires once when the stream is back;
//   - a timer fires at or after its due time: in the measurements within
//     tens of milliseconds, but never sooner than 250 ms after the server
//     stored it (the server's shortest scheduling interval), so a due time
//     in the past fires about 250 ms after Set.
//
// Fired timers are consumed from the stream StreamTimers with a durable
// consumer filtered on Subjects.TimersFired() (or TimerFired(kind)+".>"),
// and decoded with DecodeTimer. The stream keeps one fired copy per key
// (the newest) for TimerFiredTTL: a consumer that is down sees the last
// fire of each key when it comes back.
//
// Timers is safe for concurrent use. NewTimers does no I/O.
type Timers struct {
	b *Bus

	mu     sync.Mutex
	stream jetstream.Stream
}

// NewTimers returns the time engine on b.
func NewTimers(b *Bus) *Timers { return &Timers{b: b} }

// Set arms the timer key to fire at `at` with data (JSON or empty),
// replacing the key's pending timer if it has one. Set is idempotent in
// effect: setting the same key again leaves one pending timer, the last.
// It returns once the stream stored the timer; a publish that gets no answer
// is retried with the same message id for up to TimerSetRetry (the stream
// stores it once), bounded by ctx.
//
// A Set that races the key's pending timer as it fires may be removed with
// it (the server drops every pending schedule of the key when it stores the
// fired copy); callers that re-arm a key do so after consuming its fire.
func (t *Timers) Set(ctx context.Context, key string, at time.Time, data json.RawMessage) error {
	if err := CheckTimerKey(key); err != nil {
		return err
	}
	if at.IsZero() {
		return fmt.Errorf("bus: timer %s: due time is zero", key)
	}
	if len(data) > 0 && !json.Valid(data) {
		return fmt.Errorf("bus: timer %s: data is not JSON", key)
	}
	at = at.UTC()
	ev := Event{
		SpecVersion: "1.0", ID: NewID(), Source: TimerSource, Type: TimerType,
		Subject: key, Time: at, Data: data,
	}
	if len(data) > 0 {
		ev.DataContentType = "application/json"
	}
	raw, err := jsonMarshal(ev)
	if err != nil {
		return err
	}
	s := t.b.Subjects
	m := &nats.Msg{Subject: s.TimerPending(key), Data: raw, Header: nats.Header{}}
	m.Header.Set("Content-Type", ContentType)
	m.Header.Set("ce-type", TimerType)
	m.Header.Set(jetstream.MsgIDHeader, ev.ID)
	// Written by hand rather than with jetstream.WithScheduleAt, which
	// drops the fraction of a second: a due time of 10:00:00.900 would
	// fire 900 ms early. The server parses RFC 3339 with fractions.
	m.Header.Set(jetstream.ScheduleHeader, "@at "+at.Format(time.RFC3339Nano))
	m.Header.Set(jetstream.ScheduleTargetHeader, s.TimerFired(key))
	m.Header.Set(jetstream.ScheduleTTLHeader, TimerFiredTTL.String())

	ctx, cancel := context.WithTimeout(ctx, TimerSetRetry)
	defer cancel()
	err = retry(ctx, func() error {
		actx, acancel := context.WithTimeout(ctx, timerAttempt)
		defer acancel()
		_, err := t.b.js.PublishMsg(actx, m, jetstream.WithExpectStream(StreamTimers))
		return err
	})
	if err != nil {
		return fmt.Errorf("bus: set timer %s: %w", key, err)
	}
	return nil
}

// Cancel removes the pending timer of key, if any. A timer that already
// fired stays fired: its copy is the consumer's to take. A Cancel that
// races the timer as it fires may not stop it.
func (t *Timers) Cancel(ctx context.Context, key string) error {
	if err := CheckTimerKey(key); err != nil {
		return err
	}
	st, err := t.streamHandle(ctx)
	if err != nil {
		return err
	}
	err = retry(ctx, func() error {
		actx, acancel := context.WithTimeout(ctx, timerAttempt)
		defer acancel()
		return st.Purge(actx, jetstream.WithPurgeSubject(t.b.Subjects.TimerPending(key)))
	})
	if err != nil {
		return fmt.Errorf("bus: cancel timer %s: %w", key, err)
	}
	return nil
}

// Pending returns the pending timer of key, or ErrNoTimer.
func (t *Timers) Pending(ctx context.Context, key string) (Timer, error) {
	if err := CheckTimerKey(key); err != nil {
		return Timer{}, err
	}
	st, err := t.streamHandle(ctx)
	if err != nil {
		return Timer{}, err
	}
	m, err := st.GetLastMsgForSubject(ctx, t.b.Subjects.TimerPending(key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Timer{}, fmt.Errorf("bus: timer %s: %w", key, ErrNoTimer)
	}
	if err != nil {
		return Timer{}, fmt.Errorf("bus: timer %s: %w", key, err)
	}
	return t.decode(key, m.Data)
}

// DecodeTimer decodes a fired timer from its subject and data, as a
// consumer of Subjects.TimersFired() receives them.
func (t *Timers) DecodeTimer(subject string, data []byte) (Timer, error) {
	key, ok := strings.CutPrefix(subject, t.b.Subjects.TimerFired(""))
	if !ok || CheckTimerKey(key) != nil {
		return Timer{}, fmt.Errorf("bus: %q is not a fired timer subject (want %s)", subject, t.b.Subjects.TimerFired("<key>"))
	}
	return t.decode(key, data)
}

func (t *Timers) decode(key string, data []byte) (Timer, error) {
	ev, err := DecodeEvent(data)
	if err != nil {
		return Timer{}, fmt.Errorf("bus: timer %s: %w", key, err)
	}
	if ev.Type != TimerType || ev.Subject != key {
		return Timer{}, fmt.Errorf("bus: timer %s: envelope is %s for %q, want %s for %q", key, ev.Type, ev.Subject, TimerType, key)
	}
	return Timer{Key: key, Due: ev.Time, ID: ev.ID, Data: ev.Data}, nil
}

func (t *Timers) streamHandle(ctx context.Context) (jetstream.Stream, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stream != nil {
		return t.stream, nil
	}
	var st jetstream.Stream
	err := retry(ctx, func() error {
		var err error
		st, err = t.b.js.Stream(ctx, StreamTimers)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bus: stream %s: %w (was the bus provisioned?)", StreamTimers, err)
	}
	t.stream = st
	return st, nil
}

// CheckTimerKey returns an error when key is not a timer key: 1-8
// dot-separated tokens (ValidToken: 1-64 of [a-z0-9_-]), at most 200
// characters in all.
func CheckTimerKey(key string) error {
	bad := len(key) == 0 || len(key) > maxTimerKey
	if !bad {
		toks := strings.Split(key, ".")
		bad = len(toks) > 8
		for _, tok := range toks {
			bad = bad || !ValidToken(tok)
		}
	}
	if bad {
		return fmt.Errorf("bus: timer key %q: want 1-8 dot-separated tokens of 1-64 a-z, 0-9, _ and -, at most %d characters in all", key, maxTimerKey)
	}
	return nil
}

// timersStreamConfig is the timers stream: the pending schedules and their
// fired copies must share one stream (a schedule's target is in its own
// stream), and no MaxAge, which would delete a timer set for next month.
func timersStreamConfig(s Subjects, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamTimers,
		Description: "agentwork timers: pending schedules and their fired copies",
		Subjects:    []string{s.TimersPending(), s.TimersFired()},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		// One message per subject: the pending schedule of a key (the
		// server rolls up its predecessors anyway) and its newest fired
		// copy, so the stream is bounded by the number of keys.
		MaxMsgsPerSubject: 1,
		AllowMsgSchedules: true,
		AllowRollup:       true,
		// Fired copies carry Nats-TTL (TimerFiredTTL) from the schedule's
		// Nats-Schedule-TTL; schedules carry none.
		AllowMsgTTL: true,
		Duplicates:  TimersDuplicates,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}
}
