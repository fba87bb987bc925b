package connectors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

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
	// Receipt is what the platform confirmed: its message ids (on
	// delivered) or the parts it took before failing.
	Receipt   *Receipt `json:"receipt,omitempty"`
	Error     string   `json:"error,omitempty"`
	Permanent bool     `json:"permanent,omitempty"`
}

// Enqueue queues n for its target connector. It returns once JetStream has
// stored it. n.ID is the Nats-Msg-Id, so queueing the same notification twice
// (a run redelivered after a crash) stores it once.
func Enqueue(ctx context.Context, b *bus.Bus, n Notification) error {
	return enqueue(ctx, b, n, n.ID)
}

// enqueue queues n under the Nats-Msg-Id msgID.
func enqueue(ctx context.Context, b *bus.Bus, n Notification, msgID string) error {
	if n.ID == "" || n.Target == "" {
		return errors.New("connectors: notification needs an id and a target")
	}
	if err := CheckTarget("target", n.Target); err != nil {
		return fmt.Errorf("connectors: %w", err)
	}
	ev, err := bus.NewEvent("agentwork/runner", bus.TypeOf("delivery", "queued"), n.Target, n.Time, n)
	if err != nil {
		return err
	}
	ev.RunID, ev.CausationID = n.RunID, n.RequestID
	_, err = b.Publish(ctx, b.Subjects.Delivery(n.Connector()), ev, msgID)
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
	// AckWait/3, so a slow send is not handed out twice. It is also the
	// lease of a send claim (see Dispatcher): an instance that gets a
	// notification another one is still sending waits, and takes the send
	// over only when that one has not renewed its claim for AckWait.
	// Default 30s, at least 1s.
	AckWait time.Duration `yaml:"ack_wait" json:"ack_wait,omitempty"`
	// ShutdownGrace is how long sends in flight may finish once Run's ctx is
	// done. Sends still running then are cancelled and their notifications
	// put back for another instance (not reported failed). Default 10s.
	ShutdownGrace time.Duration `yaml:"shutdown_grace" json:"shutdown_grace,omitempty"`
	// Horizon bounds how long a platform's rate limit may hold a
	// notification back, from when it was queued (or sent again from the
	// failed deliveries). A rate limit (a 429 naming its retry-after) spends
	// no attempt: the notification is put back for the wait the platform
	// named, through JetStream like any retry, so the wait survives a
	// restart. When that wait would end more than Horizon after the
	// notification was queued, it fails ("rate limited for longer than
	// delivery.horizon") and waits in the failed deliveries for a retry.
	// Default 24h.
	Horizon time.Duration `yaml:"horizon" json:"horizon,omitempty"`
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
	if c.Horizon <= 0 {
		c.Horizon = 24 * time.Hour
	}
	return c
}

// RetryHorizon is the longest the delivery of a notification to one target
// may take from when it was queued to its last attempt, rounded up to a
// minute: the Horizon its rate limits may hold it back, the backoff before
// each of the MaxAttempts-1 retries, and for each attempt its SendTimeout
// and an AckWait (the wait before another instance takes over the send of
// one that died). With the defaults, 24h41m. A delay a connector names
// that is longer than the backoff stretches it.
func (c DispatcherConfig) RetryHorizon() time.Duration {
	c = c.withDefaults()
	h := c.Horizon
	for a := 1; a < c.MaxAttempts; a++ {
		h += c.Backoff[min(a, len(c.Backoff))-1]
	}
	h += time.Duration(c.MaxAttempts) * (c.SendTimeout + c.AckWait)
	return (h + time.Minute - 1).Truncate(time.Minute)
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
	if c.Horizon < 0 {
		errs = append(errs, fmt.Errorf("delivery.horizon: %s: want a positive duration (0 for the default 24h)", c.Horizon))
	}
	return errors.Join(errs...)
}

// Dispatcher delivers queued notifications: one durable consumer
// (deliver_<name>) per connector, shared by all instances.
//
// A notification is sent once across instances and redeliveries, with the
// exceptions below. Before Send, the dispatcher creates the send claim
// send.<notification id> in agentwork_locks (owner, lease of AckWait,
// attempts), renews it every AckWait/3 while Send runs, and records it sent
// once Send returned: one Create and one Put per notification, plus a
// renewal per AckWait/3 of a long send. A text split over several messages
// (SendParts) also renews the claim with the parts confirmed so far after
// each part but the last, before the next goes: an instance that takes
// over the send of one that died sends only the parts not on record.
//
// An instance that gets a notification whose claim is sent acks it and
// reports it delivered (again; the event's Nats-Msg-Id makes that a no-op);
// one whose claim is live (an instance that stalled or lost the server for
// longer than AckWait while its send goes on) puts it back until the claim
// ends; one whose claim has expired (its owner died) takes the send over.
// An instance that comes back to find its claim taken over cancels its own
// send.
//
// A notification can still reach the chat twice when the destination
// accepted it but the dispatcher could not record that: the instance died
// between the two (for a split text: the one part in flight), a shutdown
// cancelled the send after ShutdownGrace, or the instance lost the server
// for longer than AckWait in the middle of the send (then it can neither
// renew its claim nor tell its send to stop in time). Only the destination can drop such a repeat: see Connector for the
// idempotency key.
//
// Leases are in real time (time.Now), like the runner's claims, and
// compared across instances, so their clocks must agree to well within
// AckWait.
type Dispatcher struct {
	bus  *bus.Bus
	reg  Registry
	cfg  DispatcherConfig
	log  *zap.Logger
	now  func() time.Time
	dead *DeadLetters
	// stall is a test seam (export_test.go): set, the dispatcher acts like
	// an instance that stalls mid-send.
	stall struct{ signals, claims atomic.Bool }
	// states is each connector's state as this instance's last send saw
	// it (States).
	states sync.Map // connector name → string
}

// Connector states, as States reports them.
const (
	// StateUp: the last send through the connector was confirmed.
	StateUp = "up"
	// StateFailing: the last send failed (it is retried, or kept for
	// agentwork deliveries retry).
	StateFailing = "failing"
	// StateRateLimited: the platform asked the last send to wait.
	StateRateLimited = "rate limited"
	// StateUnknown: nothing was sent through it since this instance
	// started.
	StateUnknown = "unknown"
)

// States returns each connector's state as this instance's last send saw
// it: up, failing, rate limited, or unknown before the first send. It
// names no error (the reason is in the logs and the delivery events), so
// it may be shown where the errors may not.
func (d *Dispatcher) States() map[string]string {
	out := map[string]string{}
	for _, name := range d.reg.Names() {
		out[name] = StateUnknown
		if v, ok := d.states.Load(name); ok {
			out[name] = v.(string)
		}
	}
	return out
}

// saw records what a send through connector name came to.
func (d *Dispatcher) saw(name string, err error) {
	switch _, limited := rateLimited(err); {
	case err == nil:
		d.states.Store(name, StateUp)
	case limited:
		d.states.Store(name, StateRateLimited)
	default:
		d.states.Store(name, StateFailing)
	}
}

// NewDispatcher returns a dispatcher for the connectors in reg. It does no
// I/O.
func NewDispatcher(b *bus.Bus, reg Registry, cfg DispatcherConfig, log *zap.Logger) *Dispatcher {
	if log == nil {
		log = zap.NewNop()
	}
	return &Dispatcher{bus: b, reg: reg, cfg: cfg.withDefaults(), log: log, now: time.Now, dead: NewDeadLetters(b)}
}

// ConsumerName is the durable consumer of connector name.
func ConsumerName(name string) string { return "deliver_" + name }

// Run consumes until ctx is done. Then it stops taking notifications (those
// already pulled are put back at once for another instance), lets sends in
// flight finish within ShutdownGrace, cancels the rest and puts them back
// too, and returns. It returns an error when a connector's consumer cannot
// be created or is lost (deleted) while running; the other connectors then
// shut down too.
func (d *Dispatcher) Run(ctx context.Context) error {
	var workers []*bus.Worker
	for _, name := range d.reg.Names() {
		if err := bus.CheckToken("connectors: connector name", name); err != nil {
			return err
		}
		w, err := d.worker(name, d.reg[name])
		if err != nil {
			return fmt.Errorf("connectors: %s: %w", name, err)
		}
		workers = append(workers, w)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, w := range workers {
		g.Go(func() error { return w.Run(gctx) })
	}
	if err := g.Wait(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("connectors: %w", err)
	}
	return nil // also when stopped while starting: a clean stop, not a failure
}

// worker returns the worker of one connector. It pulls one notification at
// a time (bus.WorkerConfig.PullMax), so the only one this instance holds
// without sending it is the one waiting for a free slot, and that one
// signals progress too: while this instance lives and reaches the server,
// nothing it holds reaches its AckWait and is handed to another instance.
func (d *Dispatcher) worker(name string, c Connector) (*bus.Worker, error) {
	n := 1
	if cc, ok := c.(Concurrent); ok && cc.Concurrency() > 1 {
		n = cc.Concurrency()
	}
	log := d.log.With(zap.String("connector", name))
	return bus.NewWorker(d.bus.JetStream(), bus.WorkerConfig{
		Stream: bus.StreamDeliveries,
		Consumer: jetstream.ConsumerConfig{
			Durable:       ConsumerName(name),
			FilterSubject: d.bus.Subjects.Delivery(name),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       d.cfg.AckWait,
			MaxAckPending: n * 4,
		},
		Concurrency: n,
		PullMax:     1,
		// A sent claim lasts bus.SettledTTL: a consumer created anew (lost,
		// deleted) must not send again the week of notifications the
		// stream keeps.
		ReplayHorizon: bus.ReplayHorizon,
		ShutdownGrace: d.cfg.ShutdownGrace,
		PanicDelay:    d.backoff(1),
		DoubleAck:     true,
		Log:           log,
		Signal:        d.signal,
	}, func(sends context.Context, m jetstream.Msg) bus.Verdict {
		return d.deliver(sends, log, name, c, m)
	})
}

func (d *Dispatcher) progressEvery() time.Duration { return max(d.cfg.AckWait/3, 100*time.Millisecond) }

// signal tells JetStream that m is still being worked on.
func (d *Dispatcher) signal(m jetstream.Msg) error {
	if d.stall.signals.Load() {
		return nil
	}
	return m.InProgress()
}

// waitFor is how long to put back a notification whose claim another
// instance holds for left more: until just after the claim would expire,
// when it is either settled, renewed or free to take over.
func (d *Dispatcher) waitFor(left time.Duration) time.Duration {
	return min(max(left, 0), d.cfg.AckWait) + d.cfg.AckWait/10
}

func (d *Dispatcher) backoff(attempt int) time.Duration {
	return d.cfg.Backoff[min(max(attempt, 1)-1, len(d.cfg.Backoff)-1)]
}

// deliver claims the send of m, sends it and settles its claim. Its
// verdict: done when sent (now or before), a retry when the send failed, a
// deferral when shutdown cancelled the send, the claim could not be taken
// or another instance holds it, terminate when it failed for good, leave
// when another instance took the claim over mid-send. sends is cancelled
// when the shutdown grace is over.
func (d *Dispatcher) deliver(sends context.Context, log *zap.Logger, name string, c Connector, m jetstream.Msg) bus.Verdict {
	// Bookkeeping (claims, acks, events) outlives the sends' cancellation:
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
		return bus.Terminate()
	}
	attempt, queued := 1, d.now()
	if md, err := m.Metadata(); err == nil {
		attempt = int(md.NumDelivered) // for an unclaimed send only
		queued = md.Timestamp
	}
	log = log.With(zap.String("notification", n.ID))
	var claim *sendClaim
	if key, ok := sendKey(n.ID); ok {
		t, err := d.takeSend(ctx, key)
		switch {
		case err != nil:
			// Sending unclaimed could send it twice; the bus is sick anyway.
			delay := d.backoff(attempt)
			log.Warn("send claim failed; putting the notification back", zap.Duration("retry_in", delay), zap.Error(err))
			return bus.Defer(delay)
		case t.sent:
			// Sent before, and the ack was lost (a crash between Send and
			// ack, or another instance's ack of a redelivery), or it was
			// queued again after the stream's duplicate window. Report again
			// (the event's Nats-Msg-Id makes that a no-op within the events
			// stream's duplicate window), in case the crash came before the
			// report.
			log.Info("notification was sent already; not sending it again", zap.Int("attempts", t.claim.Attempts))
			return d.delivered(ctx, log, name, n, t.claim.Attempts, Receipt{Parts: t.claim.Parts, MessageIDs: t.claim.MessageIDs})
		case !t.proceed:
			delay := d.waitFor(t.wait)
			log.Info("another instance is sending the notification; looking again when its claim ends",
				zap.String("owner", t.claim.Owner), zap.Duration("retry_in", delay))
			return bus.Defer(delay)
		}
		claim, attempt = &t.claim, t.claim.Attempts
		n.SentParts = max(n.SentParts, t.claim.Parts)
	} else {
		log.Debug("notification without an id; a redelivery of it is sent again")
	}
	if claim != nil && attempt > d.cfg.MaxAttempts {
		// Only takeovers get here: the last attempts' instances stopped
		// without an outcome.
		return d.fail(ctx, log, name, n, claim, attempt-1, fmt.Errorf("connectors: gave up after %d attempts; the last ended without an outcome (the instance sending it stopped)", attempt-1), false, Receipt{Parts: max(claim.Parts, n.SentParts), MessageIDs: claim.MessageIDs})
	}
	var before []string // the ids of the parts sent before
	if claim != nil {
		before = slices.Clone(claim.MessageIDs)
	}
	sctx, cancel := context.WithTimeout(sends, d.cfg.SendTimeout)
	sctx, release := d.hold(ctx, sctx, log, claim, cancel)
	rec, err := safeSend(sctx, c, n)
	lost := release()
	cancel()
	if sends.Err() == nil {
		d.saw(name, err)
	}
	if claim != nil {
		// The parts sent before, then this attempt's.
		rec.MessageIDs = append(before, rec.MessageIDs...)
	}
	// A Send that failed before it reached the platform reports no parts:
	// those sent before still count.
	rec.Parts = max(rec.Parts, n.SentParts)
	if err == nil {
		if claim != nil {
			if _, perr := d.settle(ctx, claim, sendSent, rec); perr != nil {
				log.Warn("record the send; a redelivery would send it again", zap.Error(perr))
			}
		}
		for _, note := range rec.Notes {
			log.Warn(note)
		}
		return d.delivered(ctx, log, name, n, attempt, rec)
	}
	if lost {
		log.Info("send abandoned to the instance that took it over", zap.Int("attempt", attempt), zap.Error(err))
		return bus.Leave()
	}
	if sends.Err() != nil {
		// Cancelled by shutdown, not failed: another instance sends it.
		log.Info("send cancelled by shutdown; putting the notification back", zap.Int("attempt", attempt), zap.Error(err))
		if claim != nil {
			if owned, serr := d.settle(ctx, claim, sendRetry, rec); !owned {
				return bus.Leave()
			} else if serr != nil {
				log.Warn("free the send claim; the next instance waits for its lease", zap.Error(serr))
			}
		}
		return bus.Defer(0)
	}
	perm := IsPermanent(err)
	if wait, ok := rateLimited(err); ok && !perm {
		if age := d.now().Sub(queued); age+wait > d.cfg.Horizon {
			err = fmt.Errorf("connectors: rate limited for longer than delivery.horizon (%s): queued %s ago, and the platform asks to wait %s more: %w",
				d.cfg.Horizon, age.Round(time.Second), wait, err)
			return d.fail(ctx, log, name, n, claim, attempt, err, false, rec)
		}
		// Not an attempt: the platform only asked to wait. The claim
		// keeps the attempts before this one (the next take counts it
		// again), and the wait is JetStream's, like any retry's.
		if claim != nil {
			claim.Attempts--
			if owned, serr := d.settle(ctx, claim, sendRetry, rec); !owned {
				log.Info("rate limited after another instance took the send over; leaving it to that one", zap.Error(err))
				return bus.Leave()
			} else if serr != nil {
				log.Warn("free the send claim; the retry waits for its lease", zap.Error(serr))
			}
		}
		log.Info("rate limited; sending again when the platform asked (no attempt spent)", zap.Int("attempt", attempt), zap.Duration("retry_in", wait), zap.Error(err))
		return bus.Defer(wait)
	}
	if !perm && attempt < d.cfg.MaxAttempts {
		delay := RetryAfter(err)
		if delay <= 0 {
			delay = d.backoff(attempt)
		}
		if claim != nil {
			if owned, serr := d.settle(ctx, claim, sendRetry, rec); !owned {
				log.Info("send failed after another instance took it over; leaving it to that one", zap.Int("attempt", attempt), zap.Error(err))
				return bus.Leave()
			} else if serr != nil {
				log.Warn("free the send claim; the retry waits for its lease", zap.Error(serr))
			}
		}
		log.Warn("delivery failed, will retry", zap.Int("attempt", attempt), zap.Duration("retry_in", delay), zap.Error(err))
		return bus.Retry(delay)
	}
	return d.fail(ctx, log, name, n, claim, attempt, err, perm, rec)
}

// rateLimited returns the wait a rate limit (RateLimit) asks for, and
// whether err is one.
func rateLimited(err error) (time.Duration, bool) {
	var r *RetryableError
	if errors.As(err, &r) && r.RateLimited && r.After > 0 {
		return r.After, true
	}
	return 0, false
}

// fail gives n up: its claim deleted, the dedup key released, a failed
// event, and the notification terminated. When another instance took the
// claim over meanwhile, the notification is that one's: it is left alone.
func (d *Dispatcher) fail(ctx context.Context, log *zap.Logger, name string, n Notification, claim *sendClaim, attempts int, err error, perm bool, rec Receipt) bus.Verdict {
	// The failed delivery is recorded first: a notification is given up
	// only once a user can find it and send it again.
	if perr := d.dead.record(ctx, DeadLetter{
		Notification: n, Connector: name, Attempts: attempts, Error: err.Error(), Permanent: perm,
		Receipt: receipt(rec), FailedAt: d.now(), FailedRetry: n.Retry,
	}); perr != nil {
		delay := d.backoff(attempts)
		log.Warn("delivery failed, and recording it for a retry failed too; trying the delivery again", zap.Duration("retry_in", delay), zap.Error(err), zap.NamedError("record_error", perr))
		if claim != nil {
			if owned, _ := d.settle(ctx, claim, sendRetry, rec); !owned {
				return bus.Leave()
			}
		}
		return bus.Retry(delay)
	}
	if claim != nil {
		if owned, serr := d.settle(ctx, claim, "", Receipt{}); !owned {
			log.Info("send failed after another instance took it over; leaving it to that one", zap.Error(err))
			return bus.Leave()
		} else if serr != nil {
			log.Warn("delete the send claim", zap.Error(serr))
		}
	}
	log.Error("delivery failed; kept for a retry (agentwork deliveries retry)", zap.Int("attempts", attempts), zap.Bool("permanent", perm), zap.Error(err))
	d.releaseDedup(ctx, n)
	d.report(ctx, log, OutcomeFailed, Result{Notification: n, Connector: name, Attempts: attempts, Error: err.Error(), Permanent: perm, Receipt: receipt(rec)})
	return bus.Terminate()
}

// delivered marks n's run delivered for releaseDedup and reports n
// delivered; the notification is then acked.
func (d *Dispatcher) delivered(ctx context.Context, log *zap.Logger, name string, n Notification, attempt int, rec Receipt) bus.Verdict {
	if n.DedupKey != "" {
		_, _ = d.bus.PutExpiring(ctx, d.bus.Locks, "delivered."+n.RunID, []byte(name), d.cfg.RetryHorizon())
	}
	if n.Retry > 0 {
		if err := d.dead.remove(ctx, n.ID); err != nil {
			log.Warn("remove the failed delivery now delivered; it stays listed", zap.Error(err))
		}
	}
	d.report(ctx, log, OutcomeDelivered, Result{Notification: n, Connector: name, Attempts: attempt, Receipt: receipt(rec)})
	return bus.Done()
}

// receipt returns rec for an event, nil when it holds nothing.
func receipt(rec Receipt) *Receipt {
	if rec.Parts == 0 && len(rec.MessageIDs) == 0 && len(rec.Notes) == 0 {
		return nil
	}
	return &rec
}

func safeSend(ctx context.Context, c Connector, n Notification) (rec Receipt, err error) {
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
//
// The markers (delivered.<run>, failed.<run>.<target>) last the retry
// horizon (DispatcherConfig.RetryHorizon), not the bucket's 7 days: the
// targets of one notification are queued together, so the last of them
// ends within that of the first. A target whose queue lags the others by
// more than that may find a marker gone: a failed one keeps the key held
// until its dedup window ends, a delivered one lets the key go although a
// target delivered the text.
func (d *Dispatcher) releaseDedup(ctx context.Context, n Notification) {
	if n.DedupKey == "" {
		return
	}
	if len(n.Targets) > 1 {
		_, _ = d.bus.PutExpiring(ctx, d.bus.Locks, "failed."+n.RunID+"."+targetKey(n.Target), nil, d.cfg.RetryHorizon())
		for _, t := range n.Targets {
			if t == n.Target {
				continue
			}
			if _, err := d.bus.Locks.Get(ctx, "failed."+n.RunID+"."+targetKey(t)); err != nil {
				return // another target may still deliver it
			}
		}
	}
	if _, err := d.bus.Locks.Get(ctx, "delivered."+n.RunID); err == nil {
		return
	}
	_ = bus.ReleaseValue(ctx, d.bus.Dedup, n.DedupKey, n.RunID) // else it expires with its window
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
		if r.Notification.Retry > 0 {
			msgID = fmt.Sprintf("%s.retry.%d.%s", r.Notification.ID, r.Notification.Retry, outcome)
		}
	}
	if _, err := d.bus.Publish(ctx, d.bus.Subjects.Event(bus.SourceDelivery, outcome), ev, msgID); err != nil {
		log.Error("publish delivery event", zap.Error(err))
	}
}
