package connectors

import (
	"context"
	"errors"
	"fmt"
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

// DispatcherConfig configures delivery retries.
type DispatcherConfig struct {
	// MaxAttempts per notification and connector. Default 8.
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts,omitempty"`
	// Backoff between attempts when the connector names no delay; the last
	// value repeats. Default 1s, 5s, 30s, 2m, 10m.
	Backoff []time.Duration `yaml:"backoff" json:"backoff,omitempty"`
	// SendTimeout bounds one Send. Default 30s.
	SendTimeout time.Duration `yaml:"send_timeout" json:"send_timeout,omitempty"`
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
	return c
}

// Dispatcher delivers queued notifications: one durable consumer
// (deliver_<name>) per connector, shared by all instances.
type Dispatcher struct {
	bus *bus.Bus
	reg Registry
	cfg DispatcherConfig
	log *zap.Logger
	now func() time.Time
	wg  sync.WaitGroup
}

// NewDispatcher returns a dispatcher for the connectors in reg.
func NewDispatcher(b *bus.Bus, reg Registry, cfg DispatcherConfig, log *zap.Logger) *Dispatcher {
	if log == nil {
		log = zap.NewNop()
	}
	return &Dispatcher{bus: b, reg: reg, cfg: cfg.withDefaults(), log: log, now: time.Now}
}

// ConsumerName is the durable consumer of connector name.
func ConsumerName(name string) string { return "deliver_" + name }

// Run consumes until ctx is done, then waits for sends in flight.
func (d *Dispatcher) Run(ctx context.Context) error {
	for _, name := range d.reg.Names() {
		if err := bus.CheckToken("connectors: connector name", name); err != nil {
			return err
		}
	}
	var ccs []jetstream.ConsumeContext
	for _, name := range d.reg.Names() {
		cc, err := d.consume(ctx, name, d.reg[name])
		if err != nil {
			for _, c := range ccs {
				c.Drain()
			}
			for _, c := range ccs {
				<-c.Closed()
			}
			d.wg.Wait() // sends already started by the consumers that did start
			if ctx.Err() != nil {
				return nil // stopped while starting: a clean stop, not a failure
			}
			return err
		}
		ccs = append(ccs, cc)
	}
	<-ctx.Done()
	for _, c := range ccs {
		c.Drain()
	}
	for _, c := range ccs {
		<-c.Closed()
	}
	d.wg.Wait()
	return nil
}

func (d *Dispatcher) consume(ctx context.Context, name string, c Connector) (jetstream.ConsumeContext, error) {
	n := 1
	if cc, ok := c.(Concurrent); ok && cc.Concurrency() > 1 {
		n = cc.Concurrency()
	}
	cons, err := d.bus.JetStream().CreateOrUpdateConsumer(ctx, bus.StreamDeliveries, jetstream.ConsumerConfig{
		Durable:       ConsumerName(name),
		FilterSubject: d.bus.Subjects.Delivery(name),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.cfg.SendTimeout + 30*time.Second,
		MaxAckPending: max(n, 1) * 4,
	})
	if err != nil {
		return nil, fmt.Errorf("connectors: consumer for %s: %w", name, err)
	}
	log := d.log.With(zap.String("connector", name))
	sem := make(chan struct{}, n)
	return cons.Consume(func(m jetstream.Msg) {
		sem <- struct{}{}
		d.wg.Add(1)
		go func() {
			defer func() { <-sem; d.wg.Done() }()
			d.deliver(context.WithoutCancel(ctx), log, name, c, m)
		}()
	}, jetstream.PullMaxMessages(n), jetstream.PullHeartbeat(time.Second), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !errors.Is(err, jetstream.ErrConsumerDeleted) {
			log.Debug("consume", zap.Error(err))
		}
	}))
}

func (d *Dispatcher) deliver(ctx context.Context, log *zap.Logger, name string, c Connector, m jetstream.Msg) {
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
	sctx, cancel := context.WithTimeout(ctx, d.cfg.SendTimeout)
	err = safeSend(sctx, c, n)
	cancel()
	if err == nil {
		_ = m.DoubleAck(ctx)
		if n.DedupKey != "" {
			_, _ = d.bus.Locks.Put(ctx, "delivered."+n.RunID, []byte(name))
		}
		d.report(ctx, log, OutcomeDelivered, Result{Notification: n, Connector: name, Attempts: attempt})
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
