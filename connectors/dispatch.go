package connectors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
)

// Delivery outcomes, the last token of <prefix>.event.delivery.<outcome>.
const (
	OutcomeDelivered = "delivered"
	OutcomeFailed    = "failed"
)

// Result is the data of a delivery event.
type Result struct {
	Notification Notification `json:"notification"`
	Connector    string       `json:"connector"`
	Attempts     int          `json:"attempts"`
	Error        string       `json:"error,omitempty"`
	Permanent    bool         `json:"permanent,omitempty"`
}

// Enqueue queues n for its target connector. It returns once JetStream has
// stored it. n.ID is the Nats-Msg-Id, so queueing the same notification twice
// (a run redelivered after a crash) stores it once.
func Enqueue(ctx context.Context, b *bus.Bus, n Notification) error {
	if n.ID == "" || n.Target == "" {
		return errors.New("connectors: notification needs an id and a target")
	}
	ev, err := bus.NewEvent("agentwork/runner", bus.TypeOf("delivery", "queued"), n.Target, n.Time, n)
	if err != nil {
		return err
	}
	ev.RunID, ev.CausationID = n.RunID, n.RequestID
	_, err = b.Publish(ctx, b.Subjects.Delivery(n.Target), ev, n.ID)
	return err
}

// DispatcherConfig configures delivery retries, redelivery and shutdown.
type DispatcherConfig struct {
	// MaxAttempts per notification and connector. Default 8.
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts,omitempty"`
	// Backoff between attempts when the connector names no delay; the last
	// value repeats. Default 1s, 5s, 30s, 2m, 10m.
	Backoff []time.Duration `yaml:"backoff" json:"backoff,omitempty"`
	// SendTimeout bounds one Send. Default 30s.
	SendTimeout time.Duration `yaml:"send_timeout" json:"send_timeout,omitempty"`
	// AckWait is how long JetStream waits for an ack or a progress signal
	// before it gives a notification to another instance: the time a crashed
	// instance holds its notifications back. While a notification waits for
	// a free send slot and while it is sent, progress is signalled every
	// AckWait/3, so a slow send is never handed out twice. Default 30s, at
	// least 1s.
	AckWait time.Duration `yaml:"ack_wait" json:"ack_wait,omitempty"`
	// ShutdownGrace is how long sends in flight may finish once Run's ctx is
	// done. Sends still running then are cancelled and their notifications
	// put back for another instance (not reported failed). Default 10s.
	ShutdownGrace time.Duration `yaml:"shutdown_grace" json:"shutdown_grace,omitempty"`
}

func (c DispatcherConfig) withDefaults() DispatcherConfig {
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 8
	}
	if len(c.Backoff) == 0 {
		c.Backoff = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute}
	}
	if c.SendTimeout <= 0 {
		c.SendTimeout = 30 * time.Second
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	return c
}

// Validate checks c. Errors name the field under the delivery section.
func (c DispatcherConfig) Validate() error {
	var errs []error
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("delivery.max_attempts: %d: want 1 or more (0 for the default 8)", c.MaxAttempts))
	}
	for i, b := range c.Backoff {
		if b < 0 {
			errs = append(errs, fmt.Errorf("delivery.backoff[%d]: %s: want a positive duration", i, b))
		}
	}
	if c.SendTimeout < 0 {
		errs = append(errs, fmt.Errorf("delivery.send_timeout: %s: want a positive duration (0 for the default 30s)", c.SendTimeout))
	}
	if c.AckWait != 0 && c.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("delivery.ack_wait: %s: want at least 1s (0 for the default 30s)", c.AckWait))
	}
	if c.ShutdownGrace < 0 {
		errs = append(errs, fmt.Errorf("delivery.shutdown_grace: %s: want a positive duration (0 for the default 10s)", c.ShutdownGrace))
	}
	return errors.Join(errs...)
}

// Dispatcher delivers queued notifications: one durable consumer
// (deliver_<name>) per connector, shared by all instances.
type Dispatcher struct {
	bus *bus.Bus
	reg Registry
	cfg DispatcherConfig
	log *zap.Logger
	now func() time.Time
}

// NewDispatcher returns a dispatcher for the connectors in reg. It does no
// I/O.
func NewDispatcher(b *bus.Bus, reg Registry, cfg DispatcherConfig, log *zap.Logger) *Dispatcher {
	if log == nil {
		log = zap.NewNop()
	}
	return &Dispatcher{bus: b, reg: reg, cfg: cfg.withDefaults(), log: log, now: time.Now}
}

// ConsumerName is the durable consumer of connector name.
func ConsumerName(name string) string { return "deliver_" + name }

// flight is the state of one Run shared by its consumers: the sends in
// flight and whether Run is stopping.
type flight struct {
	sends    context.Context // the sends' parent; cancelled when the grace is over
	stopping chan struct{}   // closed when Run stops taking notifications

	mu      sync.Mutex
	stopped bool // set with stopping; guards wg.Add against wg.Wait
	wg      sync.WaitGroup
}

// start registers a send about to begin, unless Run is stopping.
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

// Run consumes until ctx is done. Then it stops taking notifications (those
// already pulled are put back at once for another instance), lets sends in
// flight finish within ShutdownGrace, cancels the rest and puts them back
// too, and returns.
func (d *Dispatcher) Run(ctx context.Context) error {
	for _, name := range d.reg.Names() {
		if err := bus.CheckToken("connectors: connector name", name); err != nil {
			return err
		}
	}
	sends, cancelSends := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSends()
	f := &flight{sends: sends, stopping: make(chan struct{})}
	var ccs []jetstream.ConsumeContext
	var startErr error
	for _, name := range d.reg.Names() {
		cc, err := d.consume(ctx, f, name, d.reg[name])
		if err != nil {
			startErr = err
			break
		}
		ccs = append(ccs, cc)
	}
	if startErr == nil {
		<-ctx.Done()
	}
	d.shutdown(f, ccs, cancelSends)
	if startErr != nil && ctx.Err() == nil {
		return startErr
	}
	return nil // also when stopped while starting: a clean stop, not a failure
}

// shutdown stops the consumers and waits for the sends in flight, at most
// ShutdownGrace before it cancels them.
func (d *Dispatcher) shutdown(f *flight, ccs []jetstream.ConsumeContext, cancelSends context.CancelFunc) {
	f.stop()
	grace := time.NewTimer(d.cfg.ShutdownGrace)
	defer grace.Stop()
	// Drain, not Stop: Stop drops the notifications already pulled into the
	// client's buffer, which JetStream then holds back for a whole AckWait.
	// Drained, they reach the callback, which naks them at once.
	for _, cc := range ccs {
		cc.Drain()
	}
	for _, cc := range ccs {
		select {
		case <-cc.Closed():
		case <-grace.C:
			d.log.Warn("delivery consumer did not drain in time", zap.Duration("grace", d.cfg.ShutdownGrace))
			grace.Reset(0)
		}
	}
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-grace.C:
		d.log.Warn("sends still in flight at shutdown; cancelling them and putting the notifications back", zap.Duration("grace", d.cfg.ShutdownGrace))
		cancelSends()
		<-done
	}
}

// consume starts the consumer of one connector. It pulls one notification
// at a time, so the only one this instance holds without sending it is the
// one waiting in the callback for a free slot, and that one signals
// progress too: while this instance lives and reaches the server, nothing
// it holds reaches its AckWait and is handed to another instance. (With
// PullMaxMessages(n), up to n-1 more would sit in the client's buffer,
// where no callback can signal for them.)
func (d *Dispatcher) consume(ctx context.Context, f *flight, name string, c Connector) (jetstream.ConsumeContext, error) {
	n := 1
	if cc, ok := c.(Concurrent); ok && cc.Concurrency() > 1 {
		n = cc.Concurrency()
	}
	cons, err := d.bus.JetStream().CreateOrUpdateConsumer(ctx, bus.StreamDeliveries, jetstream.ConsumerConfig{
		Durable:       ConsumerName(name),
		FilterSubject: d.bus.Subjects.Delivery(name),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.cfg.AckWait,
		MaxAckPending: n * 4,
	})
	if err != nil {
		return nil, fmt.Errorf("connectors: consumer for %s: %w", name, err)
	}
	log := d.log.With(zap.String("connector", name))
	sem := make(chan struct{}, n)
	return cons.Consume(func(m jetstream.Msg) {
		if !d.acquire(f, sem, m) {
			_ = m.Nak() // shutting down: another instance takes it now
			return
		}
		if !f.start() {
			<-sem
			_ = m.Nak()
			return
		}
		go func() {
			defer func() { <-sem; f.wg.Done() }()
			d.deliver(f.sends, log, name, c, m)
		}()
	}, jetstream.PullMaxMessages(1), jetstream.PullHeartbeat(time.Second), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !errors.Is(err, jetstream.ErrConsumerDeleted) {
			log.Debug("consume", zap.Error(err))
		}
	}))
}

// acquire takes a send slot for m, signalling progress while it waits and
// once more when it has the slot, so the send starts with a whole AckWait.
// It returns false when Run is stopping.
func (d *Dispatcher) acquire(f *flight, sem chan struct{}, m jetstream.Msg) bool {
	select {
	case <-f.stopping:
		return false
	default:
	}
	select {
	case sem <- struct{}{}:
		_ = m.InProgress()
		return true
	default:
	}
	t := time.NewTicker(d.progressEvery())
	defer t.Stop()
	for {
		select {
		case <-f.stopping:
			return false
		case sem <- struct{}{}:
			_ = m.InProgress()
			return true
		case <-t.C:
			_ = m.InProgress()
		}
	}
}

func (d *Dispatcher) progressEvery() time.Duration { return max(d.cfg.AckWait/3, 100*time.Millisecond) }

// progress signals progress on m every AckWait/3 until the returned stop is
// called; stop returns once the signalling goroutine has ended.
func (d *Dispatcher) progress(m jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(d.progressEvery())
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// sentKey is the agentwork_locks key that records that notification id was
// sent, and false when id cannot be part of a key (then nothing is
// recorded and a redelivery is sent again).
func sentKey(id string) (string, bool) {
	if id == "" || id[0] == '.' || id[len(id)-1] == '.' || strings.Contains(id, "..") {
		return "", false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-/_=.", r)) {
			return "", false
		}
	}
	return "sent." + id, true
}

// deliver sends m and settles it: acked when sent, nak'ed for a retry or
// when shutdown cancelled the send, terminated when it failed for good.
// sends is cancelled when the shutdown grace is over.
func (d *Dispatcher) deliver(sends context.Context, log *zap.Logger, name string, c Connector, m jetstream.Msg) {
	// Bookkeeping (markers, acks, events) outlives the sends' cancellation:
	// a send that finished must be recorded.
	ctx := context.WithoutCancel(sends)
	ev, err := bus.DecodeEvent(m.Data())
	var n Notification
	if err == nil {
		err = ev.DecodeData(&n)
	}
	if err != nil {
		log.Error("malformed delivery dropped", zap.Error(err))
		d.report(ctx, log, OutcomeFailed, Result{Notification: Notification{Target: name}, Connector: name, Error: "malformed delivery: " + err.Error(), Permanent: true})
		_ = m.Term()
		return
	}
	attempt := 1
	if md, err := m.Metadata(); err == nil {
		attempt = int(md.NumDelivered)
	}
	stopProgress := d.progress(m)
	key, guarded := sentKey(n.ID)
	if !guarded {
		log.Debug("notification id cannot be a key; a redelivery of it is sent again", zap.String("notification", n.ID))
	} else if _, err := d.bus.Locks.Get(ctx, key); err == nil {
		// Sent before, and the ack was lost (a crash between Send and ack)
		// or the same notification was queued again after the stream's
		// duplicate window. Report again (the event's Nats-Msg-Id makes
		// that a no-op within the events stream's duplicate window), in case
		// the crash came before the report.
		stopProgress()
		log.Info("notification was sent already; not sending it again", zap.String("notification", n.ID), zap.Int("attempt", attempt))
		d.delivered(ctx, log, name, m, n, attempt)
		return
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		log.Debug("sent marker lookup failed; sending", zap.String("notification", n.ID), zap.Error(err))
	}
	sctx, cancel := context.WithTimeout(sends, d.cfg.SendTimeout)
	err = safeSend(sctx, c, n)
	cancel()
	if err == nil {
		if guarded {
			if _, perr := d.bus.Locks.Put(ctx, key, []byte(name)); perr != nil {
				log.Warn("record sent marker; a redelivery would send it again", zap.String("notification", n.ID), zap.Error(perr))
			}
		}
		stopProgress()
		d.delivered(ctx, log, name, m, n, attempt)
		return
	}
	stopProgress()
	if sends.Err() != nil {
		// Cancelled by shutdown, not failed: another instance sends it.
		log.Info("send cancelled by shutdown; putting the notification back", zap.String("notification", n.ID), zap.Int("attempt", attempt), zap.Error(err))
		_ = m.Nak()
		return
	}
	perm := IsPermanent(err)
	if !perm && attempt < d.cfg.MaxAttempts {
		delay := RetryAfter(err)
		if delay <= 0 {
			delay = d.cfg.Backoff[min(attempt-1, len(d.cfg.Backoff)-1)]
		}
		log.Warn("delivery failed, will retry", zap.String("notification", n.ID), zap.Int("attempt", attempt), zap.Duration("retry_in", delay), zap.Error(err))
		_ = m.NakWithDelay(delay)
		return
	}
	log.Error("delivery failed", zap.String("notification", n.ID), zap.Int("attempts", attempt), zap.Bool("permanent", perm), zap.Error(err))
	_ = m.Term()
	d.releaseDedup(ctx, n)
	d.report(ctx, log, OutcomeFailed, Result{Notification: n, Connector: name, Attempts: attempt, Error: err.Error(), Permanent: perm})
}

// delivered acks m, marks n's run delivered for releaseDedup and reports
// n delivered.
func (d *Dispatcher) delivered(ctx context.Context, log *zap.Logger, name string, m jetstream.Msg, n Notification, attempt int) {
	_ = m.DoubleAck(ctx)
	if n.DedupKey != "" {
		_, _ = d.bus.Locks.Put(ctx, "delivered."+n.RunID, []byte(name))
	}
	d.report(ctx, log, OutcomeDelivered, Result{Notification: n, Connector: name, Attempts: attempt})
}

func safeSend(ctx context.Context, c Connector, n Notification) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = Permanent(fmt.Errorf("connector panicked: %v", r))
		}
	}()
	return c.Send(ctx, n)
}

// releaseDedup frees the dedup key of a notification no connector delivered,
// so the next identical notification is sent.
//
// With several targets the key is released only when every one of them has
// failed for good: each failing target records itself, then looks for the
// others, so the last one to fail (or both, if they fail at once) releases.
func (d *Dispatcher) releaseDedup(ctx context.Context, n Notification) {
	if n.DedupKey == "" {
		return
	}
	if len(n.Targets) > 1 {
		_, _ = d.bus.Locks.Put(ctx, "failed."+n.RunID+"."+n.Target, nil)
		for _, t := range n.Targets {
			if t == n.Target {
				continue
			}
			if _, err := d.bus.Locks.Get(ctx, "failed."+n.RunID+"."+t); err != nil {
				return // another target may still deliver it
			}
		}
	}
	if _, err := d.bus.Locks.Get(ctx, "delivered."+n.RunID); err == nil {
		return
	}
	e, err := d.bus.Dedup.Get(ctx, n.DedupKey)
	if err != nil || string(e.Value()) != n.RunID {
		return
	}
	_ = d.bus.Dedup.Delete(ctx, n.DedupKey, jetstream.LastRevision(e.Revision()))
}

func (d *Dispatcher) report(ctx context.Context, log *zap.Logger, outcome string, r Result) {
	ev, err := bus.NewEvent("agentwork/connectors/"+r.Connector, bus.TypeOf(bus.SourceDelivery, outcome), r.Notification.Target, d.now(), r)
	if err != nil {
		log.Error("build delivery event", zap.Error(err))
		return
	}
	ev.RunID, ev.CausationID = r.Notification.RunID, r.Notification.RequestID
	msgID := ""
	if r.Notification.ID != "" {
		msgID = r.Notification.ID + "." + outcome
	}
	if _, err := d.bus.Publish(ctx, d.bus.Subjects.Event(bus.SourceDelivery, outcome), ev, msgID); err != nil {
		log.Error("publish delivery event", zap.Error(err))
	}
}
