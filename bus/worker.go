package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// ErrConsumerLost is wrapped by the error Worker.Run returns when its
// consumer went away under it: deleted (or its stream), or Consume stopped
// by itself. Nothing would ever be handled again, so Run stops; whoever runs
// the worker should stop too, and a restart recreates the consumer.
var ErrConsumerLost = errors.New("bus: consumer lost")

// ErrNotConsuming is what Worker.Ready reports while the worker takes no
// messages.
var ErrNotConsuming = errors.New("bus: worker not consuming")

// VerdictKind says how a Worker settles a message; see Verdict.
type VerdictKind int

// The verdicts a Handler can return.
const (
	// VerdictDone acks the message (DoubleAck with WorkerConfig.DoubleAck).
	// The zero Verdict is done.
	VerdictDone VerdictKind = iota
	// VerdictRetry naks the message for redelivery after a delay: an
	// attempt was made and failed.
	VerdictRetry
	// VerdictDefer naks the message for redelivery after a delay without
	// an attempt: not now (a gate said later, the work is busy elsewhere,
	// shutdown).
	VerdictDefer
	// VerdictTerminate terminates the message: it is never redelivered.
	VerdictTerminate
	// VerdictLeave leaves the message unsettled: JetStream redelivers it
	// after its AckWait, unless someone else settles it first (another
	// instance took the work over).
	VerdictLeave
)

var verdictNames = [...]string{"done", "retry", "defer", "terminate", "leave"}

func (k VerdictKind) String() string {
	if k < 0 || int(k) >= len(verdictNames) {
		return fmt.Sprintf("VerdictKind(%d)", int(k))
	}
	return verdictNames[k]
}

// Verdict is what a Handler decided about its message. Make one with Done,
// Retry, Defer, Terminate or Leave.
type Verdict struct {
	kind  VerdictKind
	after time.Duration
}

// Done acks the message.
func Done() Verdict { return Verdict{kind: VerdictDone} }

// Retry naks the message to be redelivered after d: an attempt was spent.
// d <= 0 redelivers at once.
func Retry(d time.Duration) Verdict { return Verdict{kind: VerdictRetry, after: max(d, 0)} }

// Defer naks the message to be redelivered after d: nothing was attempted.
// d <= 0 redelivers at once.
func Defer(d time.Duration) Verdict { return Verdict{kind: VerdictDefer, after: max(d, 0)} }

// Terminate ends the message for good: it is not redelivered.
func Terminate() Verdict { return Verdict{kind: VerdictTerminate} }

// Leave leaves the message unsettled (see VerdictLeave).
func Leave() Verdict { return Verdict{kind: VerdictLeave} }

// Kind is the verdict's kind.
func (v Verdict) Kind() VerdictKind { return v.kind }

// After is the redelivery delay of a retry or deferral, else 0.
func (v Verdict) After() time.Duration { return v.after }

func (v Verdict) String() string {
	if v.kind == VerdictRetry || v.kind == VerdictDefer {
		return v.kind.String() + " after " + v.after.String()
	}
	return v.kind.String()
}

// Handler handles one message and returns its verdict; the Worker settles
// the message accordingly, so the handler must not ack, nak or terminate
// it. It may read the message (Metadata has NumDelivered) and call
// InProgress, though the worker signals progress for it anyway. ctx is
// cancelled when the shutdown grace is over: the handler should then stop
// and return (Defer(0) puts the message back at once). A panic is recovered
// and retried (see WorkerConfig.PanicDelay). Handlers run concurrently, up
// to WorkerConfig.Concurrency.
type Handler func(ctx context.Context, m jetstream.Msg) Verdict

// WorkerConfig configures a Worker. Zero fields take the documented
// defaults.
type WorkerConfig struct {
	// Stream is the stream to consume. Required.
	Stream string
	// Consumer is the durable pull consumer, created (or updated) by Run
	// (see ReplayHorizon).
	// Durable is required and AckPolicy must be explicit (the zero value);
	// AckWait defaults to 30s. Progress is signalled every AckWait/3 for
	// every message the worker holds: the one waiting for a free slot and
	// those being handled.
	Consumer jetstream.ConsumerConfig
	// Concurrency is how many handlers run at once. Default 1.
	Concurrency int
	// PullMax is how many messages the client pulls ahead
	// (jetstream.PullMaxMessages). Default 1: then the only message the
	// worker holds without handling it is the one waiting for a slot, and
	// that one signals progress too, so nothing this worker holds reaches
	// its AckWait while it lives and reaches the server. With more, up to
	// PullMax-1 further messages wait in the client's buffer, where nothing
	// can signal for them: a long wait there gets them redelivered to
	// another instance meanwhile. More saves round trips for short handlers.
	PullMax int
	// PullHeartbeat is the idle heartbeat of the pull requests. Default 1s.
	// nats.go (v1.55) Consume can lose track of its outstanding pull under
	// CPU contention: it skips asking for more while a pull request is still
	// being sent, and if that request's messages all arrive in that window
	// no further message triggers a new pull. The server then holds no pull
	// request while the client believes it does, and only a missed heartbeat
	// (2 × heartbeat, 30s with nats.go's default) makes the client pull
	// again. A short heartbeat bounds that stall to about 2s.
	PullHeartbeat time.Duration
	// ShutdownGrace is how long handlers in flight may finish once Run's ctx
	// is done; then their ctx is cancelled and Run waits for them. Default
	// 10s.
	ShutdownGrace time.Duration
	// StartTimeout is how long Run retries creating the consumer: on a
	// cluster there may be no JetStream leader yet for a moment after
	// start. Default 1m.
	StartTimeout time.Duration
	// PanicDelay is when a message whose handler panicked is redelivered.
	// Default 2s.
	PanicDelay time.Duration
	// DoubleAck makes a done verdict wait for the server to confirm the ack
	// (jetstream.Msg.DoubleAck), so an ack lost on the way cannot make the
	// work run again.
	DoubleAck bool
	// ReplayHorizon bounds what a consumer Run has to create hands out:
	// when the durable consumer does not exist (first start, deleted by an
	// operator, lost with the server's state) and the stream holds messages
	// on its filter stored more than ReplayHorizon ago, it is created to
	// start at the first message younger than that (DeliverByStartTime),
	// and what it leaves out (the sequence range and count) is logged at
	// error level. For work whose "already done" record expires: handed out
	// again, such a message would be done again. 0: a new consumer starts
	// at the stream's first message, as does one on a stream with nothing
	// older than the horizon. A consumer that exists keeps where it is; Run
	// updates its other settings only.
	ReplayHorizon time.Duration
	// Now is the clock ReplayHorizon is measured with. Default time.Now.
	Now func() time.Time
	// Log is the worker's logger. Default zap.NewNop().
	Log *zap.Logger
	// Signal, if set, is called instead of m.InProgress to signal progress:
	// to count the signals, or in a test to hold them back and act out an
	// instance that stalls.
	Signal func(m jetstream.Msg) error
}

func (c WorkerConfig) withDefaults() WorkerConfig {
	if c.Consumer.AckWait <= 0 {
		c.Consumer.AckWait = 30 * time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 1
	}
	if c.PullMax <= 0 {
		c.PullMax = 1
	}
	if c.PullHeartbeat <= 0 {
		c.PullHeartbeat = time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = time.Minute
	}
	if c.PanicDelay <= 0 {
		c.PanicDelay = 2 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	if c.Signal == nil {
		c.Signal = jetstream.Msg.InProgress
	}
	return c
}

// Validate checks c.
func (c WorkerConfig) Validate() error {
	var errs []error
	if c.Stream == "" {
		errs = append(errs, errors.New("bus: worker: no stream"))
	}
	if c.Consumer.Durable == "" {
		errs = append(errs, errors.New("bus: worker: the consumer needs a durable name"))
	}
	if c.Consumer.AckPolicy != jetstream.AckExplicitPolicy {
		errs = append(errs, fmt.Errorf("bus: worker: consumer %s: ack policy %s: want explicit", c.Consumer.Durable, c.Consumer.AckPolicy))
	}
	if c.ReplayHorizon < 0 {
		errs = append(errs, fmt.Errorf("bus: worker: replay horizon %s: must not be negative (0: none)", c.ReplayHorizon))
	}
	if c.Concurrency < 0 || c.PullMax < 0 {
		errs = append(errs, fmt.Errorf("bus: worker: concurrency %d, pull max %d: must not be negative", c.Concurrency, c.PullMax))
	}
	return errors.Join(errs...)
}

// Worker consumes a stream through a durable pull consumer with a Handler:
// bounded concurrency, progress signals for every message it holds, each
// message settled by its handler's Verdict, panics recovered, and a
// draining shutdown. Several workers (in one process or many) may share the
// consumer: JetStream hands each message to one of them.
type Worker struct {
	js        jetstream.JetStream
	cfg       WorkerConfig
	handler   Handler
	log       *zap.Logger
	consuming atomic.Bool
	ran       atomic.Bool
}

// NewWorker returns a worker that runs h on the messages of cfg.Consumer.
// It does no I/O; Run does.
func NewWorker(js jetstream.JetStream, cfg WorkerConfig, h Handler) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("bus: worker: no handler")
	}
	cfg = cfg.withDefaults()
	log := cfg.Log.With(zap.String("stream", cfg.Stream), zap.String("consumer", cfg.Consumer.Durable))
	return &Worker{js: js, cfg: cfg, handler: h, log: log}, nil
}

// Ready reports nil while Run takes messages: after its consumer is set up
// and until shutdown begins. For readiness probes.
func (w *Worker) Ready() error {
	if !w.consuming.Load() {
		return ErrNotConsuming
	}
	return nil
}

// Run consumes until ctx is done, then shuts down: it stops taking
// messages and puts back at once those it holds without having started
// them; it lets the handlers in flight finish within ShutdownGrace, then
// cancels their ctx and waits for them. It returns nil after a shutdown
// (also when ctx ends while the consumer is being created), an error
// wrapping ErrConsumerLost when the consumer went away under it (after the
// same shutdown), or an error when the consumer could not be created within
// StartTimeout. Run may be called once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.ran.CompareAndSwap(false, true) {
		return errors.New("bus: Worker.Run called twice")
	}
	cons, err := w.consumer(ctx)
	if cons == nil {
		return err
	}
	handlers, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	f := &flight{w: w, handlers: handlers, stopping: make(chan struct{}), slots: make(chan struct{}, w.cfg.Concurrency), held: map[jetstream.Msg]struct{}{}}
	lost := make(chan error, 1)
	missed := make(chan struct{}, 1) // a pull heartbeat did not come
	cc, err := cons.Consume(f.receive,
		jetstream.PullMaxMessages(w.cfg.PullMax),
		jetstream.PullHeartbeat(w.cfg.PullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			switch {
			case errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound):
				select {
				case lost <- err:
				default:
				}
				return
			case errors.Is(err, jetstream.ErrNoHeartbeat):
				select {
				case missed <- struct{}{}:
				default:
				}
			}
			w.log.Debug("consume", zap.Error(err))
		}))
	if err != nil {
		return fmt.Errorf("bus: consume %s on %s: %w", w.cfg.Consumer.Durable, w.cfg.Stream, err)
	}
	stopSignals := f.signalProgress()
	defer stopSignals()
	w.consuming.Store(true)
	var runErr error
	for runErr == nil && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case err := <-lost:
			// Somebody deleted the durable consumer (or its stream).
			runErr = fmt.Errorf("consumer %s on %s: %w: %w", w.cfg.Consumer.Durable, w.cfg.Stream, ErrConsumerLost, err)
			w.log.Error("consumer lost; stopping", zap.Error(err))
		case <-missed:
			// The server tells waiting pull requests when their consumer is
			// deleted; one deleted while none was waiting (just before the
			// first pull, or while every slot was busy and the next message
			// waited for one) is found only by asking, once the pulls that
			// follow get no heartbeat.
			_, err := cons.Info(ctx)
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
				runErr = fmt.Errorf("consumer %s on %s: %w: %w", w.cfg.Consumer.Durable, w.cfg.Stream, ErrConsumerLost, err)
				w.log.Error("consumer lost; stopping", zap.Error(err))
			}
		case <-cc.Closed():
			// Consume stopped by itself (a bad request, a closed connection).
			runErr = fmt.Errorf("consumer %s on %s: %w: consume stopped by itself", w.cfg.Consumer.Durable, w.cfg.Stream, ErrConsumerLost)
			w.log.Error("consumer stopped unexpectedly; stopping")
		}
	}
	w.consuming.Store(false)
	f.stop()
	grace := time.NewTimer(w.cfg.ShutdownGrace)
	defer grace.Stop()
	// Drain, not Stop: Stop drops the messages already pulled into the
	// client's buffer, which JetStream then holds back for a whole AckWait.
	// Drained, they reach receive, which puts them back at once; once
	// Closed fires no receive runs any more.
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-grace.C:
		w.log.Warn("consumer did not drain in time", zap.Duration("grace", w.cfg.ShutdownGrace))
		grace.Reset(0)
	}
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-grace.C:
		w.log.Warn("handlers still in flight at shutdown; cancelling them", zap.Duration("grace", w.cfg.ShutdownGrace))
		cancelHandlers()
		<-done
	}
	return runErr
}

// consumer creates the consumer, retrying for StartTimeout. It returns nil
// and no error when ctx ends first.
func (w *Worker) consumer(ctx context.Context) (jetstream.Consumer, error) {
	deadline := time.Now().Add(w.cfg.StartTimeout)
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		cons, err := w.createOrUpdate(ctx)
		if err == nil {
			return cons, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		if time.Now().Add(delay).After(deadline) {
			return nil, fmt.Errorf("bus: consumer %s on %s: %w", w.cfg.Consumer.Durable, w.cfg.Stream, err)
		}
		w.log.Warn("consumer not ready; retrying", zap.Duration("retry_in", delay), zap.Error(err))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
	}
}

// createOrUpdate updates the consumer if it exists, keeping where it
// starts (the server refuses to change that, and it is the consumer's
// history), else creates it, leaving out what lies beyond ReplayHorizon.
func (w *Worker) createOrUpdate(ctx context.Context) (jetstream.Consumer, error) {
	cfg := w.cfg.Consumer
	cur, err := w.js.Consumer(ctx, w.cfg.Stream, cfg.Durable)
	if err == nil {
		old := cur.CachedInfo().Config
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = old.DeliverPolicy, old.OptStartSeq, old.OptStartTime
		return w.js.UpdateConsumer(ctx, w.cfg.Stream, cfg)
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, err
	}
	if w.cfg.ReplayHorizon <= 0 || cfg.DeliverPolicy != jetstream.DeliverAllPolicy {
		return w.js.CreateConsumer(ctx, w.cfg.Stream, cfg)
	}
	s, err := w.js.Stream(ctx, w.cfg.Stream)
	if err != nil {
		return nil, err
	}
	horizon := w.cfg.Now().Add(-w.cfg.ReplayHorizon)
	first, older, err := olderThan(ctx, s, filters(cfg), horizon)
	if err != nil {
		return nil, err
	}
	if older == 0 {
		return w.js.CreateConsumer(ctx, w.cfg.Stream, cfg)
	}
	cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &horizon
	cons, err := w.js.CreateConsumer(ctx, w.cfg.Stream, cfg)
	if err != nil {
		return nil, err // another instance created it meanwhile: the next try updates it
	}
	info := cons.CachedInfo()
	// older counted every message on the filter; those from the start on
	// are pending. A message published in between counts as pending only,
	// so the count may fall short by what was published meanwhile.
	skipped := older - min(older, info.NumPending)
	w.log.Error("consumer was missing and is created anew without the messages stored before its replay horizon: they are not handed out again; "+
		"those that were handled have their outcome in the events stream, any others must be sent again "+
		"(to hand them out after all, create the consumer yourself to start where it should before starting agentwork; see docs/configuration.md, Retention)",
		zap.Uint64("first_seq", first), zap.Uint64("last_seq", info.Delivered.Stream), zap.Uint64("messages", skipped),
		zap.Time("horizon", horizon), zap.Duration("replay_horizon", w.cfg.ReplayHorizon))
	return cons, nil
}

// filters returns the subjects cfg consumes.
func filters(cfg jetstream.ConsumerConfig) []string {
	switch {
	case cfg.FilterSubject != "":
		return []string{cfg.FilterSubject}
	case len(cfg.FilterSubjects) > 0:
		return cfg.FilterSubjects
	}
	return []string{">"}
}

// olderThan looks at the first message of s on the subjects: when one of
// them was stored before horizon it returns the lowest such sequence and
// the number of messages on the subjects (all of them, old or not); else
// zeros.
func olderThan(ctx context.Context, s jetstream.Stream, subjects []string, horizon time.Time) (first, count uint64, err error) {
	for _, subj := range subjects {
		m, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, 0, fmt.Errorf("bus: first message on %s: %w", subj, err)
		}
		if m.Time.Before(horizon) && (first == 0 || m.Sequence < first) {
			first = m.Sequence
		}
	}
	if first == 0 {
		return 0, 0, nil
	}
	// Filters of one consumer do not overlap, so their counts add up.
	for _, subj := range subjects {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			return 0, 0, fmt.Errorf("bus: messages on %s: %w", subj, err)
		}
		for _, n := range info.State.Subjects {
			count += n
		}
	}
	return first, count, nil
}

// flight is one Run's messages: those held (waiting for a slot or being
// handled), the handlers in flight, and whether Run is stopping.
type flight struct {
	w        *Worker
	handlers context.Context // the handlers' ctx; cancelled when the grace is over
	stopping chan struct{}   // closed when Run stops taking messages
	slots    chan struct{}   // one per handler running

	mu      sync.Mutex
	stopped bool                       // set with stopping; guards wg.Add against wg.Wait
	held    map[jetstream.Msg]struct{} // signalled every AckWait/3
	wg      sync.WaitGroup
}

// receive is the Consume callback: it waits for a free slot (Consume calls
// it for one message at a time, so later messages wait in the client's
// buffer) and starts the handler. Once Run is stopping it puts the message
// back at once instead, for another instance.
func (f *flight) receive(m jetstream.Msg) {
	f.hold(m)
	if !f.acquire() {
		f.putBack(m)
		return
	}
	if !f.start() {
		<-f.slots
		f.putBack(m)
		return
	}
	// Signal as the handler starts, so that it starts with a whole AckWait.
	// The publish has a second use: it waits for the connection, which
	// Consume may be using right now to send its next pull request. A
	// callback that returns before Consume has noted that request as sent
	// makes it skip the next pull (the stall at PullHeartbeat); waiting
	// here narrows that window. Without this signal, the stall hit most
	// benchmark runs of the whole pipeline.
	_ = f.w.cfg.Signal(m)
	go func() {
		defer f.wg.Done()
		v := f.handle(m)
		f.release(m)
		f.settle(m, v)
		<-f.slots
	}()
}

func (f *flight) putBack(m jetstream.Msg) {
	f.release(m)
	if err := m.Nak(); err != nil {
		f.w.log.Debug("put back", zap.String("subject", m.Subject()), zap.Error(err))
	}
}

// acquire takes a slot, or reports false when Run is stopping.
func (f *flight) acquire() bool {
	select {
	case <-f.stopping:
		return false
	default:
	}
	select {
	case f.slots <- struct{}{}:
		return true
	case <-f.stopping:
		return false
	}
}

// start registers a handler about to begin, unless Run is stopping.
func (f *flight) start() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	f.wg.Add(1)
	return true
}

func (f *flight) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped {
		f.stopped = true
		close(f.stopping)
	}
}

func (f *flight) hold(m jetstream.Msg) {
	f.mu.Lock()
	f.held[m] = struct{}{}
	f.mu.Unlock()
}

func (f *flight) release(m jetstream.Msg) {
	f.mu.Lock()
	delete(f.held, m)
	f.mu.Unlock()
}

// signalProgress signals progress for every held message every AckWait/3,
// until the returned func is called.
func (f *flight) signalProgress() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(max(f.w.cfg.Consumer.AckWait/3, 100*time.Millisecond))
		defer t.Stop()
		var msgs []jetstream.Msg
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			f.mu.Lock()
			msgs = msgs[:0]
			for m := range f.held {
				msgs = append(msgs, m)
			}
			f.mu.Unlock()
			for _, m := range msgs {
				_ = f.w.cfg.Signal(m) // acked meanwhile: a no-op
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// handle runs the handler, turning a panic into a retry.
func (f *flight) handle(m jetstream.Msg) (v Verdict) {
	defer func() {
		if p := recover(); p != nil {
			f.w.log.Error("handler panicked; the message is retried", zap.String("subject", m.Subject()),
				zap.Any("panic", p), zap.Duration("retry_in", f.w.cfg.PanicDelay), zap.Stack("stack"))
			v = Retry(f.w.cfg.PanicDelay)
		}
	}()
	return f.w.handler(f.handlers, m)
}

// settle tells JetStream the verdict on m.
func (f *flight) settle(m jetstream.Msg, v Verdict) {
	var err error
	switch v.kind {
	case VerdictDone:
		if f.w.cfg.DoubleAck {
			err = m.DoubleAck(context.WithoutCancel(f.handlers))
		} else {
			err = m.Ack()
		}
	case VerdictRetry, VerdictDefer:
		err = m.NakWithDelay(v.after) // 0: a plain nak
	case VerdictTerminate:
		err = m.Term()
	case VerdictLeave:
	default:
		err = fmt.Errorf("unknown verdict %s; left for redelivery", v)
	}
	if err != nil {
		f.w.log.Warn("message not settled; JetStream redelivers it after its ack wait", zap.String("subject", m.Subject()), zap.Stringer("verdict", v), zap.Error(err))
	}
}
