package nats_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/nats"
)

// natsDest observes a subject: a subscription on the server's own
// connection that decodes every envelope. The connector publishes on a
// connection of its own, which Inject(Unavailable) closes.
type natsDest struct {
	connectortest.Recorder
	conn *bus.Bus // the connector's connection
	t    *testing.T
}

var _ connectortest.FaultInjector = (*natsDest)(nil)

func (d *natsDest) Inject(f connectortest.Fault) {
	if f.Kind != connectortest.Unavailable {
		d.t.Fatalf("nats destination cannot %s", f.Kind)
	}
	_ = d.conn.Close()
}

var subjectSeq atomic.Int64

// client is bustest.Client, retried: under -race on two cores, dozens of
// parallel cases connecting at once can exceed nats.go's 2s connect timeout.
func client(t *testing.T, b *bus.Bus) *bus.Bus {
	t.Helper()
	var err error
	for range 3 {
		var c *bus.Bus
		if c, err = b.Client(t.Context()); err == nil {
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
	}
	t.Fatalf("bus.Client: %v", err)
	return nil
}

// natsHarness runs the nats connector against one embedded server; each
// case gets its own subject and its own connection.
func natsHarness(t *testing.T, js bool) connectortest.Harness {
	b := bustest.New(t)
	if js {
		if _, err := b.JetStream().CreateStream(t.Context(), jetstream.StreamConfig{Name: "CONFORMANCE", Subjects: []string{"conformance.>"}, Storage: jetstream.MemoryStorage}); err != nil {
			t.Fatalf("create stream: %v", err)
		}
	}
	return connectortest.Harness{
		New: func(t *testing.T) (connectors.Connector, connectortest.Observer) {
			subject := fmt.Sprintf("conformance.case%d", subjectSeq.Add(1))
			d := &natsDest{conn: client(t, b), t: t}
			sub, err := b.Conn().Subscribe(subject, func(m *natsio.Msg) {
				ev, err := bus.DecodeEvent(m.Data)
				var n connectors.Notification
				if err == nil {
					err = ev.DecodeData(&n)
				}
				if err != nil {
					t.Errorf("message on %s is not an envelope with a notification: %v", subject, err)
					return
				}
				d.Add(connectortest.Message{Text: n.Text, Urgency: n.Urgency, ID: n.ID})
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sub.Unsubscribe() })
			if err := b.Conn().Flush(); err != nil {
				t.Fatal(err)
			}
			c, err := nats.New(d.conn, "alerts", nats.Options{Subject: subject, JetStream: js})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			return c, d
		},
		Features: connectortest.Features{Concurrent: true, KeepsID: true, Outages: true},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, js := range []bool{false, true} {
		t.Run(fmt.Sprintf("jetstream=%v", js), func(t *testing.T) {
			t.Parallel()
			connectortest.Run(t, natsHarness(t, js))
		})
	}
}

// TestEnvelope: a subscriber reads a plain CloudEvents envelope with
// the notification as data, and the headers every agentwork message has.
func TestEnvelope(t *testing.T) {
	t.Parallel()
	for _, js := range []bool{false, true} {
		t.Run(fmt.Sprintf("jetstream=%v", js), func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			if js {
				if _, err := b.JetStream().CreateStream(t.Context(), jetstream.StreamConfig{Name: "ALERTS", Subjects: []string{"alerts.>"}}); err != nil {
					t.Fatal(err)
				}
			}
			sub, err := b.Conn().SubscribeSync("alerts.agentwork")
			if err != nil {
				t.Fatal(err)
			}
			c, err := nats.New(b, "alerts", nats.Options{Subject: "alerts.agentwork", JetStream: js})
			if err != nil {
				t.Fatal(err)
			}
			n := connectortest.Notification("Disk /var is 95% full")
			n.Urgency, n.Metadata = "important", map[string]string{"host": "web-1"}
			if _, err := c.Send(t.Context(), n); err != nil {
				t.Fatalf("Send = %v", err)
			}
			m, err := sub.NextMsg(connectortest.Wait)
			if err != nil {
				t.Fatalf("no message on alerts.agentwork: %v", err)
			}
			for k, want := range map[string]string{"Content-Type": bus.ContentType, "Nats-Msg-Id": n.ID, "ce-type": "agentwork.heartbeat.notification"} {
				if got := m.Header.Get(k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
			ev, err := bus.DecodeEvent(m.Data)
			if err != nil {
				t.Fatalf("DecodeEvent: %v", err)
			}
			if ev.ID != n.ID || ev.Type != "agentwork.heartbeat.notification" || ev.Source != "agentwork/connectors/alerts" ||
				ev.Subject != "default" || ev.RunID != n.RunID || ev.CausationID != n.RequestID || !ev.Time.Equal(n.Time) {
				t.Errorf("envelope = %+v; want id %s, type agentwork.heartbeat.notification, source agentwork/connectors/alerts, subject default, runid %s, causationid %s, time %s",
					ev, n.ID, n.RunID, n.RequestID, n.Time)
			}
			var got connectors.Notification
			if err := ev.DecodeData(&got); err != nil {
				t.Fatal(err)
			}
			got.Time = n.Time
			if !reflect.DeepEqual(got, n) {
				t.Errorf("data = %+v, want %+v", got, n)
			}
			if js {
				// A retried delivery (same notification ID) is stored once.
				if _, err := c.Send(t.Context(), n); err != nil {
					t.Fatalf("second Send = %v", err)
				}
				s, err := b.JetStream().Stream(t.Context(), "ALERTS")
				if err != nil {
					t.Fatal(err)
				}
				info, err := s.Info(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if info.State.Msgs != 1 {
					t.Errorf("stream holds %d messages after sending one notification twice, want 1", info.State.Msgs)
				}
			}
		})
	}
}

func TestNoStreamIsRetryable(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	c, err := nats.New(b, "alerts", nats.Options{Subject: "nostream.here", JetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Send(t.Context(), connectortest.Notification("x"))
	var re *connectors.RetryableError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "create a stream") {
		t.Fatalf("Send with no stream on the subject = %v, want a RetryableError that says to create a stream", err)
	}
}

func TestClosedConnectionIsRetryable(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	for _, js := range []bool{false, true} {
		cl := client(t, b)
		c, err := nats.New(cl, "alerts", nats.Options{Subject: "alerts.x", JetStream: js})
		if err != nil {
			t.Fatal(err)
		}
		_ = cl.Close()
		_, err = c.Send(t.Context(), connectortest.Notification("x"))
		var re *connectors.RetryableError
		if !errors.As(err, &re) || !errors.Is(err, natsio.ErrConnectionClosed) {
			t.Errorf("jetstream=%v: Send on a closed connection = %v, want a RetryableError wrapping natsio.ErrConnectionClosed", js, err)
		}
	}
}

func TestTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	c, err := nats.New(b, "alerts", nats.Options{Subject: "alerts.x"})
	if err != nil {
		t.Fatal(err)
	}
	n := connectortest.Notification(strings.Repeat("x", int(b.Conn().MaxPayload())+1))
	if _, err := c.Send(t.Context(), n); !connectors.IsPermanent(err) || !errors.Is(err, natsio.ErrMaxPayload) {
		t.Errorf("Send of a notification above max_payload = %v, want a PermanentError wrapping natsio.ErrMaxPayload", err)
	}
}

func TestNewSubject(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	for _, tc := range []struct {
		subject string
		want    string // "" for valid
	}{
		{"alerts", ""},
		{"alerts.agentwork", ""},
		{"agentworks.x", ""},
		{"x.agentwork.api", ""},
		{"inbox.x", ""},
		{"team.αλφα.ops", ""},
		{"", "empty"},
		{"alerts.*", "wildcard"},
		{"alerts.>", "wildcard"},
		{"a.b*", "wildcard"},
		{"alerts..x", "empty token"},
		{".alerts", "empty token"},
		{"alerts.", "empty token"},
		{"alerts x", "white space"},
		{"alerts\tx", "white space"},
		{"alerts\x7f", "control"},
		{strings.Repeat("a", 256), "at most 255"},
		{"agentwork.request.task.x", "agentwork's own"},
		{"agentwork.delivery.console", "agentwork's own"},
		// Everything under the prefix: the control services, the events,
		// the timers, and whatever comes later.
		{"agentwork", "agentwork's own"},
		{"agentwork.notifications", "agentwork's own"},
		{"agentwork.requests", "agentwork's own"},
		{"agentwork.api.heartbeat.pause", "agentwork's own"},
		{"agentwork.api.heartbeat.resume", "agentwork's own"},
		{"agentwork.event.task.done", "agentwork's own"},
		{"agentwork.timer.fired.cron.x", "agentwork's own"},
		{"AgentWork.API.heartbeat.pause", "agentwork's own"},
		{"AGENTWORK", "agentwork's own"},
		{"$JS.API.STREAM.LIST", "system subject"},
		{"$KV.agentwork_dedup.x", "system subject"},
		{"$SRV.PING", "system subject"},
		{"$", "system subject"},
		{"_INBOX.abc", "system subject"},
		{"_INBOX", "system subject"},
		{"_inbox.abc", "system subject"},
	} {
		_, err := nats.New(b, "alerts", nats.Options{Subject: tc.subject})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("New(subject %q) = %v, want nil", tc.subject, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("New(subject %q) = %v, want an error mentioning %q", tc.subject, err, tc.want)
		}
	}
}

// TestDestinationOwnSubject: a target's destination can never be a
// subject of agentwork's own, with the default or another prefix, whatever
// its case: the notification is refused for good, and nothing reaches the
// subject (agentwork.api.heartbeat.pause would pause the heartbeat).
func TestDestinationOwnSubject(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "aw-prod"} {
		b := bustest.New(t, func(c *bus.Config) { c.Prefix = prefix })
		p := b.Subjects.Service("heartbeat", "pause")
		own := strings.TrimSuffix(p, ".api.heartbeat.pause")
		sub, err := b.Conn().SubscribeSync(">")
		if err != nil {
			t.Fatal(err)
		}
		c, err := nats.New(b, "alerts", nats.Options{Subject: "alerts.agentwork"})
		if err != nil {
			t.Fatal(err)
		}
		for _, dest := range []string{p, own, own + ".event.task.done", own + ".timer.fired.cron.x", own + ".anything.later", strings.ToUpper(p), "$SYS.REQ.SERVER.PING", "_INBOX.x"} {
			n := connectortest.Notification("pause")
			n.Target = "alerts:" + dest
			if _, err := c.Send(t.Context(), n); !connectors.IsPermanent(err) {
				t.Errorf("prefix %q: Send to %q = %v, want a PermanentError", prefix, dest, err)
			}
		}
		if err := b.Conn().Flush(); err != nil {
			t.Fatal(err)
		}
		// The flush's round trip came after any message the server had
		// for the subscription.
		if n, _, _ := sub.Pending(); n > 0 {
			m, _ := sub.NextMsg(time.Second)
			t.Errorf("prefix %q: %d messages reached agentwork's subjects, the first on %s", prefix, n, m.Subject)
		}
	}
}

func FuzzCheckSubject(f *testing.F) {
	for _, s := range []string{"alerts", "a.b.c", "a.*", "a.>", "a..b", "a b", "ü.x", "\xff", "agentwork.api.heartbeat.pause", "AGENTWORK.x", "$JS.API", "_INBOX.x", "_inbox", "aw.x"} {
		f.Add(s)
	}
	own := bus.Subjects{Prefix: "aw"}
	f.Fuzz(func(t *testing.T, s string) {
		if nats.CheckSubject(s) != nil {
			return
		}
		// A subject that passes is one a subscriber can match literally.
		if strings.ContainsAny(s, "*> \t\r\n") || strings.Contains(s, "..") || strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || len(s) > 255 {
			t.Fatalf("CheckSubject(%q) = nil for a subject that is not a literal", s)
		}
		if nats.CheckOwn(own, s) != nil {
			return
		}
		// A subject that passes both is nobody's but the user's: not under
		// the prefix, not a system or inbox subject, in any case.
		first, _, _ := strings.Cut(strings.ToLower(s), ".")
		if first == "aw" || strings.HasPrefix(s, "$") || first == "_inbox" {
			t.Fatalf("CheckOwn(%q) = nil for a subject of agentwork's or the server's", s)
		}
	})
}
