package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// ErrClosed is returned for operations on a closed bus.
var ErrClosed = errors.New("bus: closed")

// Bus is a connection to NATS with JetStream, the provisioned streams and
// buckets, and, in embedded mode, the server it owns. Safe for concurrent use.
type Bus struct {
	// resetHorizon: see redeliverOrphans.
	resetHorizon time.Duration
	cfg          Config
	log          *zap.Logger
	srv          *server.Server // nil unless embedded and owned
	lock         *dirLock
	nc           *nats.Conn
	js           jetstream.JetStream
	instance     string
	// boot identifies this Open in this process; Clients share it.
	boot string
	// exclusive: this process holds the embedded server's data-dir lock
	// (directly or as a Client of the Bus that does), so every process
	// that used the data dir under another boot is gone.
	exclusive bool
	pass      string // embedded server password
	// clientInfo is written to the data dir once the bus is provisioned,
	// so a client that finds it can use the bus at once.
	clientInfo *ClientInfo
	storeDir   string

	// Subjects names subjects under the configured prefix.
	Subjects Subjects
	// The KV buckets, provisioned at Open.
	Jobs  jetstream.KeyValue // agentwork_jobs: cron job definitions
	State jetstream.KeyValue // agentwork_state: trigger state
	Dedup jetstream.KeyValue // agentwork_dedup: notification dedup keys (per-key TTL)
	Locks jetstream.KeyValue // agentwork_locks: leases and run claims
	// DeadLetters is agentwork_deadletters: failed deliveries.
	DeadLetters jetstream.KeyValue
	// Usage is agentwork_usage: model tokens per day, source, name and model.
	Usage jetstream.KeyValue
	// Memory is agentwork_memory: the agent's memory documents.
	Memory jetstream.KeyValue
	// WorkflowRuns is agentwork_workflow_runs: the workflow runs.
	WorkflowRuns jetstream.KeyValue
	// Approvals is agentwork_approvals: the approvals.
	Approvals jetstream.KeyValue
	// ConsoleSessions is agentwork_console_sessions: the web console's
	// sessions.
	ConsoleSessions jetstream.KeyValue

	storeFull atomic.Bool // a write was refused for lack of space (NoteWrite)
	kvStreams sync.Map    // bucket name → its jetstream.Stream (keysNow)

	closeOnce sync.Once
	closeErr  error
}

// Option configures Open.
type Option func(*Bus)

// WithLogger sets the logger (default zap.NewNop()).
func WithLogger(l *zap.Logger) Option { return func(b *Bus) { b.log = l } }

// Open starts the embedded server (or connects to cfg.URL), waits until
// JetStream is ready and provisions the streams and buckets. ctx bounds
// start-up. Close releases everything.
//
// On the embedded server, the requests and notifications that an earlier
// process on the data dir had in flight when it stopped (killed, crashed)
// are handed out again at once, and the leases it held are free (see
// Lease): work resumes within seconds of a restart.
func Open(ctx context.Context, cfg Config, opts ...Option) (*Bus, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	boot := newBootID()
	b := &Bus{cfg: cfg, log: zap.NewNop(), Subjects: Subjects{Prefix: cfg.Prefix}, boot: boot, instance: newInstanceID(boot), resetHorizon: ReplayHorizon}
	for _, o := range opts {
		o(b)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	var err error
	if cfg.External() {
		err = b.connectExternal(ctx)
	} else {
		err = b.startEmbedded(ctx)
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	if err := b.provision(ctx); err != nil {
		b.Close()
		return nil, err
	}
	if b.exclusive {
		if err := b.redeliverOrphans(ctx); err != nil {
			// They come again after their ack wait instead.
			b.log.Warn("in-flight messages of a stopped process wait for their ack wait", zap.Error(err))
		}
	}
	if b.clientInfo != nil {
		if err := writeCredentials(b.storeDir, *b.clientInfo); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// Client returns a second Bus on the same server with a connection of its
// own, as another agentwork instance would have. It does not own the server:
// closing it closes only its connection. Used to run several runners on one
// embedded server (tests, benchmarks).
func (b *Bus) Client(ctx context.Context) (*Bus, error) {
	c := &Bus{cfg: b.cfg, log: b.log, Subjects: b.Subjects, boot: b.boot, exclusive: b.exclusive, instance: newInstanceID(b.boot)}
	var err error
	timeout := nats.Timeout(nats.DefaultTimeout)
	if dl, ok := ctx.Deadline(); ok {
		timeout = nats.Timeout(max(time.Until(dl), time.Millisecond))
	}
	if b.srv != nil {
		c.nc, err = nats.Connect("", nats.InProcessServer(b.srv), nats.UserInfo(embeddedUser, b.pass), nats.Name("agentwork-"+c.instance), timeout)
	} else {
		c.nc, err = nats.Connect(b.cfg.URL, append(b.natsOptions(), timeout)...)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: connect: %w", err)
	}
	if c.js, err = jetstream.New(c.nc); err != nil {
		c.nc.Close()
		return nil, err
	}
	if err := c.bindBuckets(ctx); err != nil {
		c.nc.Close()
		return nil, err
	}
	return c, nil
}

// Conn is the NATS connection.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// HalfPayload is n, or half the largest message the NATS server takes
// if that is less: room for a value of up to n bytes beside what travels
// with it (a run's claim, a page's other jobs).
func (b *Bus) HalfPayload(n int) int {
	if b == nil || b.nc == nil {
		return n
	}
	if half := int(b.nc.MaxPayload() / 2); half > 0 && half < n {
		return half
	}
	return n
}

// JetStream is the JetStream context.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Instance names this bus connection as the owner of leases and claims:
// <host>-<boot>-<connection>. The boot part is shared by the Bus that Open
// returned and its Clients, and differs for every Open: on the embedded
// server, leases of another boot belong to a process that is gone (see
// Lease).
func (b *Bus) Instance() string { return b.instance }

// Config is the effective configuration.
func (b *Bus) Config() Config { return b.cfg }

// Server is the embedded server, or nil on an external cluster.
func (b *Bus) Server() *server.Server { return b.srv }

// Ready reports nil when the connection is up and JetStream answers, and
// ErrStoreFull while the store has no space for new work (see NoteWrite).
func (b *Bus) Ready(ctx context.Context) error {
	if b.nc == nil || b.nc.IsClosed() {
		return ErrClosed
	}
	if !b.nc.IsConnected() {
		return fmt.Errorf("bus: not connected (status %s)", b.nc.Status())
	}
	if _, err := b.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("bus: jetstream not ready: %w", err)
	}
	if b.storeFull.Load() {
		return b.probeStore(ctx)
	}
	return nil
}

// Publish publishes ev on subject and waits for JetStream's ack. The message
// carries the CloudEvents content type and Nats-Msg-Id = msgID (ev.ID when
// msgID is empty), so a repeat within the stream's duplicate window is
// acknowledged as a duplicate and stored once.
func (b *Bus) Publish(ctx context.Context, subject string, ev Event, msgID string) (*jetstream.PubAck, error) {
	if err := ev.Validate(); err != nil {
		return nil, err
	}
	data, err := jsonMarshal(ev)
	if err != nil {
		return nil, err
	}
	if msgID == "" {
		msgID = ev.ID
	}
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	m.Header.Set("Content-Type", ContentType)
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	m.Header.Set("ce-type", ev.Type)
	ack, err := b.js.PublishMsg(ctx, m)
	if strings.HasPrefix(subject, b.Subjects.Prefix+".") {
		b.NoteWrite(err) // not a user's own stream (the nats connector's)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: publish %s: %w", subject, err)
	}
	return ack, nil
}

// Close drains the connection and, in embedded mode, shuts the server down
// and releases the data-dir lock. Safe to call more than once.
func (b *Bus) Close() error {
	b.closeOnce.Do(func() {
		if b.nc != nil && !b.nc.IsClosed() {
			closed := make(chan struct{})
			b.nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
			if err := b.nc.Drain(); err != nil {
				b.nc.Close()
			} else {
				select {
				case <-closed:
				case <-time.After(5 * time.Second):
					b.nc.Close()
				}
			}
		}
		if b.srv != nil {
			b.srv.Shutdown()
			b.srv.WaitForShutdown()
		}
		if b.lock != nil {
			b.closeErr = b.lock.release()
		}
	})
	return b.closeErr
}

func newInstanceID(boot string) string {
	host, _ := os.Hostname()
	return Token(host) + "-" + boot + "-" + randomHex(4)
}

func newBootID() string { return randomHex(4) }

func randomHex(n int) string {
	r := make([]byte, n)
	_, _ = rand.Read(r)
	return hex.EncodeToString(r)
}

func nopLogger() *zap.Logger { return zap.NewNop() }
