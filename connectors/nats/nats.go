// Package nats is the connector that republishes notifications on a NATS
// subject of the user's choice, as CloudEvents, for any NATS client to act
// on.
package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
)

// Options configures a Connector.
type Options struct {
	// Subject the notifications are published on, e.g. "alerts.agentwork".
	// Required; no wildcards, and not one of agentwork's own subjects or
	// the server's (see CheckOwn).
	Subject string
	// JetStream publishes with JetStream and waits for the stream's ack (a
	// stream must cover Subject). Default: core NATS publish and flush.
	JetStream bool
	// Now stamps notifications that carry no time. Default time.Now.
	Now func() time.Time
}

// Connector republishes notifications on a subject of the user's choice, each as
// a CloudEvents envelope (type agentwork.<source>.notification, id = the
// notification ID, data = the Notification), so any NATS client can act on
// them. The message carries Nats-Msg-Id = the notification ID: a stream that
// captures the subject stores a retried delivery once. Safe for concurrent
// use.
type Connector struct {
	bus     *bus.Bus
	name    string
	subject string
	js      bool
	now     func() time.Time
}

var _ connectors.Connector = (*Connector)(nil)

// New returns a connector named name that publishes on b's connection.
func New(b *bus.Bus, name string, opts Options) (*Connector, error) {
	if b == nil {
		return nil, errors.New("nats connector: no bus to publish on")
	}
	if err := CheckSubject(opts.Subject); err != nil {
		return nil, fmt.Errorf("nats connector: subject: %w", err)
	}
	if err := CheckOwn(b.Subjects, opts.Subject); err != nil {
		return nil, fmt.Errorf("nats connector: subject: %w", err)
	}
	c := &Connector{bus: b, name: name, subject: opts.Subject, js: opts.JetStream, now: opts.Now}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// Subject is the subject notifications are published on.
func (c *Connector) Subject() string { return c.subject }

// flushTimeout bounds a core publish's flush when ctx has no deadline.
const flushTimeout = 10 * time.Second

// Send publishes n and returns once the server has it: after the flush's
// round trip for core NATS, after the stream's ack with JetStream. Errors
// of a closed, draining or reconnecting connection and missing stream
// responders are *RetryableError. A target's destination is the subject
// to publish on instead of the configured one. The receipt's message id is
// <stream>:<sequence> with JetStream, the notification id without.
func (c *Connector) Send(ctx context.Context, n connectors.Notification) (connectors.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return connectors.Receipt{}, err
	}
	subject := c.subject
	if d := n.Destination(); d != "" {
		if err := errors.Join(CheckSubject(d), CheckOwn(c.bus.Subjects, d)); err != nil {
			return connectors.Receipt{}, connectors.Permanent(fmt.Errorf("nats connector: destination: %w", err))
		}
		subject = d
	}
	ev, err := c.event(n)
	if err != nil {
		return connectors.Receipt{}, connectors.Permanent(err)
	}
	if c.js {
		ack, err := c.bus.Publish(ctx, subject, ev, n.ID)
		if err != nil {
			return connectors.Receipt{}, c.classify(ctx, subject, err)
		}
		return connectors.Receipt{Parts: 1, MessageIDs: []string{fmt.Sprintf("%s:%d", ack.Stream, ack.Sequence)}}, nil
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return connectors.Receipt{}, connectors.Permanent(fmt.Errorf("nats connector: marshal: %w", err))
	}
	m := &natsio.Msg{Subject: subject, Data: data, Header: natsio.Header{}}
	m.Header.Set("Content-Type", bus.ContentType)
	m.Header.Set(jetstream.MsgIDHeader, n.ID)
	m.Header.Set("ce-type", ev.Type)
	nc := c.bus.Conn()
	if err := nc.PublishMsg(m); err != nil {
		return connectors.Receipt{}, c.classify(ctx, subject, fmt.Errorf("publish %s: %w", subject, err))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, flushTimeout)
		defer cancel()
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return connectors.Receipt{}, c.classify(ctx, subject, fmt.Errorf("flush %s: %w", subject, err))
	}
	return connectors.Receipt{Parts: 1, MessageIDs: []string{n.ID}}, nil
}

func (c *Connector) event(n connectors.Notification) (bus.Event, error) {
	at := n.Time
	if at.IsZero() {
		at = c.now()
	}
	source := n.Source
	if !bus.ValidToken(source) {
		source = bus.Token(source)
	}
	ev, err := bus.NewEvent("agentwork/connectors/"+c.name, bus.TypeOf(source, "notification"), n.Name, at, n)
	if err != nil {
		return ev, err
	}
	if n.ID != "" {
		ev.ID = n.ID
	}
	ev.RunID, ev.CausationID = n.RunID, n.RequestID
	return ev, nil
}

// classify marks what may work on a later attempt as retryable and what
// never will as permanent; ctx's own errors are returned as they are.
func (c *Connector) classify(ctx context.Context, subject string, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return fmt.Errorf("nats connector: %w", err)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, natsio.ErrNoResponders):
		return connectors.Retry(fmt.Errorf("nats connector: no stream answered on %s (create a stream that captures it, or set jetstream: false): %w", subject, err), 0)
	case errors.Is(err, natsio.ErrConnectionClosed), errors.Is(err, natsio.ErrConnectionDraining),
		errors.Is(err, natsio.ErrConnectionReconnecting), errors.Is(err, natsio.ErrDisconnected),
		errors.Is(err, natsio.ErrNoServers), errors.Is(err, natsio.ErrStaleConnection),
		errors.Is(err, natsio.ErrTimeout), errors.Is(err, bus.ErrClosed):
		return connectors.Retry(fmt.Errorf("nats connector: connection: %w", err), 0)
	case errors.Is(err, natsio.ErrMaxPayload), errors.Is(err, natsio.ErrBadSubject):
		return connectors.Permanent(fmt.Errorf("nats connector: %w", err))
	}
	return fmt.Errorf("nats connector: %w", err)
}

// CheckSubject reports whether s can be published on: dot-separated
// non-empty tokens of printable characters without white space, and no
// wildcards (* or >).
func CheckSubject(s string) error {
	if s == "" {
		return errors.New("subject is empty")
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" {
			return fmt.Errorf("%q has an empty token (leading, trailing or double dot)", s)
		}
	}
	for _, r := range s {
		switch {
		case r == '*' || r == '>':
			return fmt.Errorf("%q has a wildcard (%c): publish needs a literal subject", s, r)
		case r <= ' ' || r == 0x7f || r == 0xfffd:
			return fmt.Errorf("%q has white space or a control character", s)
		}
	}
	if len(s) > 255 {
		return fmt.Errorf("%q is %d bytes, want at most 255", s, len(s))
	}
	return nil
}

// CheckOwn refuses the subjects a notification must never be published
// on: every subject under agentwork's prefix (the prefix itself and
// <prefix>.>: requests would start runs, deliveries loop, the control
// services at <prefix>.api.> pause, resume or wake the heartbeat, events
// and timers would be forged, and whatever is added there later), and the
// NATS system, JetStream, KV and service subjects ($...) and reply
// inboxes (_INBOX...). Case is ignored, so that no spelling of these gets
// through. s is taken to have passed CheckSubject.
func CheckOwn(sub bus.Subjects, s string) error {
	prefix := sub.Prefix
	if prefix == "" {
		prefix = bus.DefaultPrefix
	}
	first, _, _ := strings.Cut(s, ".")
	switch {
	case strings.EqualFold(first, prefix):
		return fmt.Errorf("%q is under %s, agentwork's own subjects (its requests, events, timers, deliveries and control services such as %s): pick a subject of your own", s, prefix+".>", sub.Service("heartbeat", "pause"))
	case strings.HasPrefix(s, "$"), strings.EqualFold(first, "_INBOX"):
		return fmt.Errorf("%q is a NATS system subject ($... or _INBOX...): pick a subject of your own", s)
	}
	return nil
}
