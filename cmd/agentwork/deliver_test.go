package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/telegram/telegramfake"
)

// deliveryLog follows the delivery events of a server from the start of
// its events stream.
type deliveryLog struct {
	mu     sync.Mutex
	events []deliveryEvent
	raw    bytes.Buffer // every event as stored, to search for secrets
}

type deliveryEvent struct {
	outcome string
	at      time.Time // when the test saw it
	res     connectors.Result
}

func followDeliveries(t *testing.T, ctx context.Context, b *bus.Bus) *deliveryLog {
	t.Helper()
	l := &deliveryLog{}
	oc, err := b.JetStream().OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := oc.Consume(func(m jetstream.Msg) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.raw.Write(m.Data())
		l.raw.WriteByte('\n')
		if !strings.HasPrefix(m.Subject(), b.Subjects.Event(bus.SourceDelivery, "")) {
			return
		}
		ev, err := bus.DecodeEvent(m.Data())
		var r connectors.Result
		if err == nil && ev.DecodeData(&r) == nil {
			l.events = append(l.events, deliveryEvent{outcome: m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:], at: time.Now(), res: r})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return l
}

// of returns the delivery events of connector name, in order.
func (l *deliveryLog) of(name string) []deliveryEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []deliveryEvent
	for _, e := range l.events {
		if e.res.Connector == name {
			out = append(out, e)
		}
	}
	return out
}

func (l *deliveryLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.raw.String()
}

// TestDeliveryToThreeChats is the delivery promise seen from outside: the
// real binary sends one notification to three chat APIs, one of which
// answers 429 twice and one 500 for ever. The healthy one gets it at once,
// the rate-limited one after its retry-after, the failing one ends as a
// failed delivery with a delivery.failed event, and `agentwork deliveries
// retry` delivers it once its API recovers. No token shows in the logs,
// the events or the metrics.
func TestDeliveryToThreeChats(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	const (
		tokenOK      = "111111:AAH-ok-token-SECRET-0123456789"
		tokenLimited = "222222:AAH-limited-token-SECRET-0123456789"
		tokenDown    = "333333:AAH-down-token-SECRET-0123456789"
		text         = "The nightly backup did not finish: check the backup host."
	)
	ok, limited, down := telegramfake.NewServer(tokenOK), telegramfake.NewServer(tokenLimited), telegramfake.NewServer(tokenDown)
	for _, s := range []*telegramfake.Server{ok, limited, down} {
		t.Cleanup(s.Close)
	}
	limited.RateLimit(2, time.Second)
	down.Fail(http.StatusInternalServerError)
	t.Setenv("TG_OK", tokenOK)
	t.Setenv("TG_LIMITED", tokenLimited)
	t.Setenv("TG_DOWN", tokenDown)
	httpAddr := freeAddr(t)
	srv := startCrashServer(t, fmt.Sprintf(`
bus:
  listen: 127.0.0.1:0
http:
  listen: %s
model:
  script:
    rules:
      - match: {source: task}
        text: "Checked the backups."
        notify: %q
connectors:
  ok:      {type: telegram, bot_token: "${TG_OK}", chat_id: "1001", base_url: %q}
  limited: {type: telegram, bot_token: "${TG_LIMITED}", chat_id: "1002", base_url: %q}
  down:    {type: telegram, bot_token: "${TG_DOWN}", chat_id: "1003", base_url: %q}
delivery:
  max_attempts: 3
  backoff: [300ms]
`, httpAddr, text, ok.URL, limited.URL, down.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	b := srv.dial(ctx)
	defer b.Close()
	log := followDeliveries(t, ctx, b)

	start := time.Now()
	pub, err := agentwork.Publish(ctx, b, agentwork.Request{Source: "task", Name: "backup", Prompt: "check the backups"}, agentwork.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "an outcome for every connector", func() bool {
		return len(log.of("ok")) > 0 && len(log.of("limited")) > 0 && len(log.of("down")) > 0
	}, srv.child)

	okEv, limEv, downEv := log.of("ok")[0], log.of("limited")[0], log.of("down")[0]
	if okEv.outcome != connectors.OutcomeDelivered || okEv.res.Attempts != 1 || okEv.res.Receipt == nil || len(okEv.res.Receipt.MessageIDs) != 1 {
		t.Errorf("ok: %s after %d attempts, receipt %+v; want delivered at the first attempt with the message id", okEv.outcome, okEv.res.Attempts, okEv.res.Receipt)
	}
	if okEv.res.Notification.RequestID != pub.ID {
		t.Errorf("ok: the event is for request %s, want %s", okEv.res.Notification.RequestID, pub.ID)
	}
	if limEv.outcome != connectors.OutcomeDelivered || limEv.res.Attempts != 3 {
		t.Errorf("limited: %s after %d attempts, want delivered at the third (after two 429s)", limEv.outcome, limEv.res.Attempts)
	}
	// Two retry-afters of 1 s: the backoff (300 ms) alone would be quicker.
	if gap := limEv.at.Sub(start); gap < 2*time.Second {
		t.Errorf("limited: delivered %s after the request, want at least the 2 s its two 429s asked for", gap)
	}
	if !okEv.at.Before(limEv.at) || !okEv.at.Before(downEv.at) {
		t.Errorf("ok was delivered at %s, after the others (%s, %s): a slow connector held it back", okEv.at.Sub(start), limEv.at.Sub(start), downEv.at.Sub(start))
	}
	if downEv.outcome != connectors.OutcomeFailed || downEv.res.Attempts != 3 || downEv.res.Permanent {
		t.Errorf("down: %s after %d attempts (permanent %v), want failed after the 3 attempts of max_attempts", downEv.outcome, downEv.res.Attempts, downEv.res.Permanent)
	}
	for _, c := range []struct {
		name string
		s    *telegramfake.Server
		chat string
		want int
	}{{"ok", ok, "1001", 1}, {"limited", limited, "1002", 1}, {"down", down, "1003", 0}} {
		if got := c.s.Texts(c.chat); len(got) != c.want || (c.want == 1 && !strings.Contains(got[0], text)) {
			t.Errorf("%s's chat holds %q, want the notification %d time(s)", c.name, got, c.want)
		}
	}

	// The failed one is listed; once the API is back, a retry delivers it.
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"deliveries", "list", "--data-dir", srv.dataDir}, &out, &errOut); err != nil {
		t.Fatalf("deliveries list: %v\n%s", err, errOut.String())
	}
	id := downEv.res.Notification.ID
	if !strings.Contains(out.String(), id) || strings.Contains(out.String(), okEv.res.Notification.ID) {
		t.Fatalf("deliveries list = %s\nwant the failed %s alone", out.String(), id)
	}
	down.Recover()
	out.Reset()
	if err := run(ctx, []string{"deliveries", "retry", id, "--data-dir", srv.dataDir}, &out, &errOut); err != nil {
		t.Fatalf("deliveries retry: %v\n%s", err, errOut.String())
	}
	waitFor(t, 20*time.Second, "the retried delivery", func() bool { return len(log.of("down")) > 1 }, srv.child)
	if ev := log.of("down")[1]; ev.outcome != connectors.OutcomeDelivered || ev.res.Notification.ID != id {
		t.Fatalf("down after the retry: %s for %s, want delivered for %s", ev.outcome, ev.res.Notification.ID, id)
	}
	if got := down.Texts("1003"); len(got) != 1 {
		t.Fatalf("down's chat holds %d messages after the retry, want 1", len(got))
	}
	out.Reset()
	if err := run(ctx, []string{"deliveries", "list", "--data-dir", srv.dataDir}, &out, &errOut); err != nil || !strings.Contains(out.String(), "no failed deliveries") {
		t.Fatalf("deliveries list after the retry = %q, %v; want none", out.String(), err)
	}

	// Nothing else arrived anywhere, and no token leaked.
	time.Sleep(500 * time.Millisecond)
	for name, s := range map[string]*telegramfake.Server{"ok": ok, "limited": limited} {
		if n := len(s.Requests()); name == "ok" && n != 1 || name == "limited" && n != 3 {
			t.Errorf("%s's API got %d requests", name, n)
		}
	}
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var metrics bytes.Buffer
	_, _ = metrics.ReadFrom(resp.Body)
	resp.Body.Close()
	for _, tok := range []string{tokenOK, tokenLimited, tokenDown} {
		for where, s := range map[string]string{"stdout": srv.child.stdout.String(), "stderr": srv.child.stderr.String(), "events": log.text(), "metrics": metrics.String()} {
			if secretIn(s, tok) {
				t.Errorf("a bot token appears in the server's %s", where)
			}
		}
	}
}

// secretIn reports whether s holds secret, or its part after the bot id
// (the part that is secret), in any of the usual encodings.
func secretIn(s, secret string) bool {
	_, key, _ := strings.Cut(secret, ":")
	for _, k := range []string{secret, key} {
		if k != "" && strings.Contains(s, k) {
			return true
		}
	}
	return false
}

// TestKilledBeforeDeliveryLosesNothing queues notifications that the chat
// API refuses for now, kills the server with SIGKILL, brings the API back
// and restarts the server: every notification arrives, once.
func TestKilledBeforeDeliveryLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	const token, tasks = "444444:AAH-kill-token-SECRET-0123456789", 10
	api := telegramfake.NewServer(token)
	t.Cleanup(api.Close)
	api.Fail(http.StatusBadGateway)
	t.Setenv("TG_TOKEN", token)
	srv := startCrashServer(t, fmt.Sprintf(`
bus:
  listen: 127.0.0.1:0
http:
  listen: "off"
model:
  script:
    rules:
      - match: {source: task}
        text: "{{prompt}}"
connectors:
  phone: {type: telegram, bot_token: "${TG_TOKEN}", chat_id: "1001", base_url: %q}
delivery:
  backoff: [2s]
`, api.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	b := srv.dial(ctx)
	for i := range tasks {
		if _, err := agentwork.Publish(ctx, b, agentwork.Request{Source: "task", Name: "kill", Prompt: fmt.Sprintf("report %d", i)}, agentwork.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Every run is done (its notification queued) and every notification
	// was tried and refused at least once.
	waitFor(t, 30*time.Second, "every notification queued and refused", func() bool {
		s, err := b.JetStream().Stream(ctx, bus.StreamDeliveries)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs == tasks && len(api.Requests()) >= tasks
	}, srv.child)
	b.Close()
	srv.kill9()
	if n := len(api.Texts("1001")); n != 0 {
		t.Fatalf("the chat holds %d messages before the restart, want 0", n)
	}

	api.Recover()
	srv.restart()
	waitFor(t, 60*time.Second, "every notification delivered after the restart", func() bool {
		return len(api.Texts("1001")) >= tasks
	}, srv.child)
	time.Sleep(time.Second) // a repeat, if any, would come now
	got := api.Texts("1001")
	seen := map[string]int{}
	for _, text := range got {
		seen[text]++
	}
	for i := range tasks {
		want := fmt.Sprintf("report %d", i)
		n := 0
		for text, c := range seen {
			if strings.Contains(text, want) {
				n += c
			}
		}
		if n != 1 {
			t.Errorf("%q arrived %d times, want once", want, n)
		}
	}
	if len(got) != tasks {
		t.Errorf("the chat holds %d messages, want %d", len(got), tasks)
	}
}
