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
	// Seq is the stream sequence of a fired copy (from Fired), to compare
	// with a consumer's AckFloor; 0 otherwise.
	Seq uint64
}

// Timers is the durable time engine: "fire X at T" for every time-based
// trigger. Each timer is a JetStream message schedule (`Nats-Schedule: @at
// <due>`) in the stream AGENTWORK_TIMERS; when it is due, the stream leader
// copies it to TimerFired(key) and removes the schedule in the same stored
// message. So:
//
//   - a key holds one pending timer: Set replaces it;
//   - a timer fires once per cluster, with no claim among instances;
//   - pending timers survive restarts; one whose due time passed while the
//     server was down fires once when the stream is back;
//   - a timer fires at or after its due time: within milliseconds when
//     little else fires; up to 250 ms later when another timer fired less
//     than 250 ms before it (the server's scheduler passes are at least
//     250 ms apart), when a stream leader change caught it, or when it was
//     due less than 250 ms after Set (a due time in the past fires about
//     250 ms after Set). Timers due together are stored one fsync'd write
//     after another: with fsync on every write, 1,000 at once take
//     0.3-0.4 s (docs/BENCHMARKS.md).
//
// Each Set stores its timer on a subject of its own,
// <prefix>.timer.pending.<key>.<id>, and then removes the key's older ones.
// (With one subject per key, a Set that arrived while the key's previous
// timer was firing was removed by that fire: the server stores a fire
// together with a purge of every message on the subject it fired from.
// Measured: 1,228 of 2,000 such Sets lost.)
// A fire already under way when Set is called still arrives; Timer.ID
// tells it from the new timer's.
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

// Set arms the timer key to fire at `at` with data (JSON or empty). The
// key's pending timer, if it has one, is replaced: of concurrent Sets of one
// key, the last stored wins. Set returns once the stream stored the timer
// and removed the older ones. A publish that gets no answer is retried with
// the same message id for up to TimerSetRetry (the stream stores it once),
// bounded by ctx. If Set fails after storing the timer, an older one may
// still be pending: set the key again.
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
	m := &nats.Msg{Subject: t.pendingSubject(key, ev.ID), Data: raw, Header: nats.Header{}}
	m.Header.Set("Content-Type", ContentType)
	m.Header.Set("ce-type", TimerType)
	m.Header.Set(jetstream.MsgIDHeader, ev.ID)
	// Written by hand rather than with jetstream.WithScheduleAt, which
	// drops the fraction of a second: a due time of 10:00:00.900 would
	// fire 900 ms early. The server parses RFC 3339 with fractions.
	m.Header.Set(jetstream.ScheduleHeader, "@at "+at.Format(time.RFC3339Nano))
	m.Header.Set(jetstream.ScheduleTargetHeader, t.b.Subjects.TimerFired(key))
	m.Header.Set(jetstream.ScheduleTTLHeader, TimerFiredTTL.String())

	ctx, cancel := context.WithTimeout(ctx, TimerSetRetry)
	defer cancel()
	var seq uint64
	err = retry(ctx, func() error {
		actx, acancel := context.WithTimeout(ctx, timerAttempt)
		defer acancel()
		ack, err := t.b.js.PublishMsg(actx, m, jetstream.WithExpectStream(StreamTimers))
		if err == nil {
			seq = ack.Sequence
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("bus: set timer %s: %w", key, err)
	}
	// Remove the key's timers stored before this one (never a later one:
	// a concurrent Set stored after this one stays). Most Sets replace a
	// timer that fired (a cron job arming its next tick) and find none: a
	// read says so, where a purge is one more synced write on the stream
	// every timer shares.
	if n, err := t.pendingCount(ctx, key); err == nil && n <= 1 {
		return nil
	}
	if err := t.purge(ctx, key, seq); err != nil {
		return fmt.Errorf("bus: set timer %s: stored, but an older timer of the key may still be pending: %w", key, err)
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
	if n, err := t.pendingCount(ctx, key); err == nil && n == 0 {
		return nil // nothing to remove: no write
	}
	if err := t.purge(ctx, key, 0); err != nil {
		return fmt.Errorf("bus: cancel timer %s: %w", key, err)
	}
	return nil
}

// pendingCount returns how many pending timers the stream holds for key
// (one stream info request, filtered on the key's subjects). It tries
// once, for at most timerAttempt: on an error (a stream leader election)
// the caller purges, which retries, instead of waiting out its budget.
func (t *Timers) pendingCount(ctx context.Context, key string) (uint64, error) {
	st, err := t.streamHandle(ctx)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, timerAttempt)
	defer cancel()
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(t.pendingSubject(key, "*")))
	if err != nil {
		return 0, err
	}
	var n uint64 // State.Msgs is the stream's; Subjects is the filter's
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}

// purge removes the key's pending timers stored before sequence before
// (all of them when before is 0).
func (t *Timers) purge(ctx context.Context, key string, before uint64) error {
	st, err := t.streamHandle(ctx)
	if err != nil {
		return err
	}
	opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSubject(t.pendingSubject(key, "*"))}
	if before > 0 {
		opts = append(opts, jetstream.WithPurgeSequence(before))
	}
	return retry(ctx, func() error {
		actx, acancel := context.WithTimeout(ctx, timerAttempt)
		defer acancel()
		return st.Purge(actx, opts...)
	})
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
	m, err := st.GetLastMsgForSubject(ctx, t.pendingSubject(key, "*"))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Timer{}, fmt.Errorf("bus: timer %s: %w", key, ErrNoTimer)
	}
	if err != nil {
		return Timer{}, fmt.Errorf("bus: timer %s: %w", key, err)
	}
	return t.decode(key, m.Data)
}

// Fired returns the newest fired copy of key the stream keeps (for
// TimerFiredTTL), handled by its consumer or not, or ErrNoTimer. For a
// start-up check: a timer that fired while no consumer was up is not
// pending, and its fire is still to come.
func (t *Timers) Fired(ctx context.Context, key string) (Timer, error) {
	if err := CheckTimerKey(key); err != nil {
		return Timer{}, err
	}
	st, err := t.streamHandle(ctx)
	if err != nil {
		return Timer{}, err
	}
	m, err := st.GetLastMsgForSubject(ctx, t.b.Subjects.TimerFired(key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Timer{}, fmt.Errorf("bus: timer %s: %w", key, ErrNoTimer)
	}
	if err != nil {
		return Timer{}, fmt.Errorf("bus: timer %s: %w", key, err)
	}
	f, err := t.decode(key, m.Data)
	f.Seq = m.Sequence
	return f, err
}

// AckFloor returns the stream sequence up to which the durable consumer
// of StreamTimers has acknowledged every fired copy: a copy (Fired) whose
// Seq is above it may still be waiting to be handled; one at or below it
// was handled. 0 when the consumer does not exist yet (it will be handed
// every copy the stream keeps).
func (t *Timers) AckFloor(ctx context.Context, consumer string) (uint64, error) {
	c, err := t.b.js.Consumer(ctx, StreamTimers, consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("bus: consumer %s of %s: %w", consumer, StreamTimers, err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("bus: consumer %s of %s: %w", consumer, StreamTimers, err)
	}
	return ci.AckFloor.Stream, nil
}

// PendingKeys returns the keys with a pending timer among those under
// prefix (a key's first tokens: "cron" covers "cron.a" and "cron.a.retry"),
// read in one stream info request per page of subjects rather than one
// request per key. For a start-up check of many keys.
func (t *Timers) PendingKeys(ctx context.Context, prefix string) (map[string]bool, error) {
	if err := CheckTimerKey(prefix); err != nil {
		return nil, err
	}
	st, err := t.streamHandle(ctx)
	if err != nil {
		return nil, err
	}
	base := t.b.Subjects.p() + ".timer.pending."
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(base+prefix+".>"))
	if err != nil {
		return nil, fmt.Errorf("bus: pending timers under %s: %w", prefix, err)
	}
	keys := make(map[string]bool, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		rest := strings.TrimPrefix(subj, base)
		if i := strings.LastIndexByte(rest, '.'); i > 0 {
			keys[rest[:i]] = true
		}
	}
	return keys, nil
}

// pendingSubject is <prefix>.timer.pending.<key>.<id>. A key has a fixed
// number of tokens, so <key>.* matches its timers and no other key's.
func (t *Timers) pendingSubject(key, id string) string {
	return t.b.Subjects.p() + ".timer.pending." + key + "." + id
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
		// One message per subject: a pending timer has a subject of its
		// own, and a key keeps its newest fired copy, so the stream is
		// bounded by the number of keys.
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
