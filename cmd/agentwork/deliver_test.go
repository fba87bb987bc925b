package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/discord/discordfake"
	"github.com/agentwork/agentwork/connectors/slack/slackfake"
	"github.com/agentwork/agentwork/connectors/telegram/telegramfake"
	"github.com/agentwork/agentwork/connectors/webhook/webhookfake"
	"github.com/agentwork/agentwork/internal/secret"
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
// real binary sends one notification to Telegram, Slack and Discord, where
// Slack answers 429 twice and Discord 500 for ever. Telegram gets it at
// once, Slack after its Retry-After, Discord's ends as a failed delivery
// with a delivery.failed event, and `agentwork deliveries retry` delivers it
// once Discord recovers. No secret shows in the logs, events or metrics.
func TestDeliveryToThreeChats(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	const (
		tgToken = "111111:AAH-ok-token-SECRET-0123456789"
		text    = "The nightly backup did not finish: check the backup host."
	)
	tg := telegramfake.NewServer(tgToken)
	t.Cleanup(tg.Close)
	sl := slackfake.New(t)
	dc := discordfake.New(t)
	sl.RateLimit(2, time.Second)
	dc.Fail(connectortest.Unavailable)
	t.Setenv("TG_TOKEN", tgToken)
	t.Setenv("SLACK_TOKEN", sl.Token())
	t.Setenv("DISCORD_WEBHOOK", dc.WebhookURL())
	secrets := []string{tgToken, sl.Token(), dc.WebhookURL(), discordfake.DefaultToken}
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
  phone: {type: telegram, bot_token: "${TG_TOKEN}", chat_id: "1001", base_url: %q}
  team:  {type: slack, bot_token: "${SLACK_TOKEN}", channel: "#ops", base_url: %q}
  chat:  {type: discord, webhook_url: "${DISCORD_WEBHOOK}"}
delivery:
  max_attempts: 3
  backoff: [300ms]
`, httpAddr, text, tg.URL, sl.BaseURL()))
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
		return len(log.of("phone")) > 0 && len(log.of("team")) > 0 && len(log.of("chat")) > 0
	}, srv.child)

	tgEv, slEv, dcEv := log.of("phone")[0], log.of("team")[0], log.of("chat")[0]
	if tgEv.outcome != connectors.OutcomeDelivered || tgEv.res.Attempts != 1 || tgEv.res.Receipt == nil || len(tgEv.res.Receipt.MessageIDs) != 1 {
		t.Errorf("telegram: %s after %d attempts, receipt %+v; want delivered at the first attempt with the message id", tgEv.outcome, tgEv.res.Attempts, tgEv.res.Receipt)
	}
	if tgEv.res.Notification.RequestID != pub.ID {
		t.Errorf("telegram: the event is for request %s, want %s", tgEv.res.Notification.RequestID, pub.ID)
	}
	if slEv.outcome != connectors.OutcomeDelivered || slEv.res.Attempts != 1 || slEv.res.Receipt == nil || len(slEv.res.Receipt.MessageIDs) != 1 {
		t.Errorf("slack: %s after %d attempts, receipt %+v; want delivered at the first (its two 429s spend none) with its ts", slEv.outcome, slEv.res.Attempts, slEv.res.Receipt)
	}
	// Two Retry-Afters of 1 s: the backoff (300 ms) alone would be quicker.
	if gap := slEv.at.Sub(start); gap < 2*time.Second {
		t.Errorf("slack: delivered %s after the request, want at least the 2 s its two 429s asked for", gap)
	}
	if !tgEv.at.Before(slEv.at) || !tgEv.at.Before(dcEv.at) {
		t.Errorf("telegram was delivered at %s, after the others (%s, %s): a slow connector held it back", tgEv.at.Sub(start), slEv.at.Sub(start), dcEv.at.Sub(start))
	}
	if dcEv.outcome != connectors.OutcomeFailed || dcEv.res.Attempts != 3 || dcEv.res.Permanent {
		t.Errorf("discord: %s after %d attempts (permanent %v), want failed after the 3 attempts of max_attempts", dcEv.outcome, dcEv.res.Attempts, dcEv.res.Permanent)
	}
	if got := tg.Texts("1001"); len(got) != 1 || !strings.Contains(got[0], text) {
		t.Errorf("telegram's chat holds %q, want the notification once", got)
	}
	if got := sl.Posts(); len(got) != 1 || !strings.Contains(got[0].Text, text) {
		t.Errorf("slack's channel holds %+v, want the notification once", got)
	}
	if got := dc.Posts(); len(got) != 0 {
		t.Errorf("discord holds %d messages while it answers 500, want 0", len(got))
	}

	// The failed one is listed; once Discord is back, a retry delivers it.
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"deliveries", "list", "--data-dir", srv.dataDir}, &out, &errOut); err != nil {
		t.Fatalf("deliveries list: %v\n%s", err, errOut.String())
	}
	id := dcEv.res.Notification.ID
	if !strings.Contains(out.String(), id) || strings.Contains(out.String(), tgEv.res.Notification.ID) {
		t.Fatalf("deliveries list = %s\nwant the failed %s alone", out.String(), id)
	}
	dc.Recover()
	out.Reset()
	if err := run(ctx, []string{"deliveries", "retry", id, "--data-dir", srv.dataDir}, &out, &errOut); err != nil {
		t.Fatalf("deliveries retry: %v\n%s", err, errOut.String())
	}
	waitFor(t, 20*time.Second, "the retried delivery", func() bool { return len(log.of("chat")) > 1 }, srv.child)
	if ev := log.of("chat")[1]; ev.outcome != connectors.OutcomeDelivered || ev.res.Notification.ID != id {
		t.Fatalf("discord after the retry: %s for %s, want delivered for %s", ev.outcome, ev.res.Notification.ID, id)
	}
	if got := dc.Posts(); len(got) != 1 || !strings.Contains(got[0].Text, text) {
		t.Fatalf("discord holds %+v after the retry, want the notification once", got)
	}
	out.Reset()
	if err := run(ctx, []string{"deliveries", "list", "--data-dir", srv.dataDir}, &out, &errOut); err != nil || !strings.Contains(out.String(), "no failed deliveries") {
		t.Fatalf("deliveries list after the retry = %q, %v; want none", out.String(), err)
	}

	// Nothing else arrived anywhere (every connector's queue is settled),
	// and no secret leaked.
	deliveriesSettled(t, ctx, b, srv.child, "phone", "team", "chat")
	if n := len(tg.Requests()); n != 1 {
		t.Errorf("telegram got %d requests, want 1", n)
	}
	if n := sl.Requests(); n != 3 {
		t.Errorf("slack got %d requests, want 3 (two 429s and the post)", n)
	}
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var metrics bytes.Buffer
	_, _ = metrics.ReadFrom(resp.Body)
	resp.Body.Close()
	for _, secret := range secrets {
		for where, s := range map[string]string{"stdout": srv.child.stdout.String(), "stderr": srv.child.stderr.String(), "events": log.text(), "metrics": metrics.String()} {
			if secretIn(s, secret) {
				t.Errorf("a secret (%d bytes) appears in the server's %s", len(secret), where)
			}
		}
	}
}

// secretIn reports whether s holds secret, or for a bot token its part
// after the bot id (the part that is secret), in any encoding
// secret.Redact knows (as is, escaped, URL-encoded, base64).
func secretIn(s, secretValue string) bool {
	_, key, _ := strings.Cut(secretValue, ":")
	secrets := []string{secretValue}
	if len(key) >= 8 {
		secrets = append(secrets, key)
	}
	return secret.Redact(s, secrets) != s
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
	api.Fail(connectortest.Unavailable)
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
	// A repeat, if any, would be queued or in flight until the queue settles.
	b2 := srv.dial(ctx)
	defer b2.Close()
	deliveriesSettled(t, ctx, b2, srv.child, "phone")
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

// TestKilledAfterTheReceiverTookItShowsItOnce kills the server with
// SIGKILL after a webhook receiver stored the notifications and before its
// answers came back (the one window the send claim cannot close), and
// restarts it: the notifications are sent again with the same webhook-id,
// and the receiver, deduplicating on it as the spec asks, shows each once.
func TestKilledAfterTheReceiverTookItShowsItOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	const (
		signing = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		tasks   = 5
	)
	fake := webhookfake.New(t, webhookfake.Options{Secrets: []string{signing}})
	// The receiver stores each notification (the fake's handler runs),
	// then its answer is held until the server is dead.
	hold := make(chan struct{})
	var released sync.Once
	release := func() { released.Do(func() { close(hold) }) }
	t.Cleanup(release)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		fake.ServeHTTP(rec, r)
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(front.Close)
	t.Setenv("HOOK_SECRET", signing)
	t.Setenv("HOOK_URL", front.URL+"/hook?token=receiver-SECRET-0123456789")
	srv := startCrashServer(t, `
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
  hook: {type: webhook, url: "${HOOK_URL}", secrets: ["${HOOK_SECRET}"]}
delivery:
  ack_wait: 2s
`)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	b := srv.dial(ctx)
	for i := range tasks {
		if _, err := agentwork.Publish(ctx, b, agentwork.Request{Source: "task", Name: "hook", Prompt: fmt.Sprintf("report %d", i)}, agentwork.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The connector sends one notification at a time: the first one is
	// stored and waits for its answer. Kill the server then.
	waitFor(t, 30*time.Second, "the receiver storing a notification", func() bool { return len(fake.Events()) >= 1 }, srv.child)
	b.Close()
	first := srv.kill9()
	release()

	srv.restart()
	waitFor(t, 60*time.Second, "every notification at the receiver", func() bool { return len(fake.Events()) >= tasks }, srv.child)
	b2 := srv.dial(ctx)
	defer b2.Close()
	log := followDeliveries(t, ctx, b2)
	waitFor(t, 30*time.Second, "a delivered event for every notification", func() bool {
		ids := map[string]bool{}
		for _, e := range log.of("hook") {
			if e.outcome == connectors.OutcomeDelivered {
				ids[e.res.Notification.ID] = true
			}
		}
		return len(ids) == tasks
	}, srv.child)
	events := fake.Events()
	t.Logf("receiver: %d attempts, %d notifications, %d repeated webhook-ids", len(fake.Attempts()), len(events), fake.Duplicates())
	if len(events) != tasks {
		t.Fatalf("the receiver shows %d notifications, want %d (one each)", len(events), tasks)
	}
	if fake.Duplicates() < 1 {
		t.Fatalf("the receiver saw no repeated webhook-id: the kill did not fall between its storing and agentwork's record\nfirst server stderr:\n%s", first.stderr.String())
	}
	for _, out := range []string{first.stdout.String(), first.stderr.String(), srv.child.stdout.String(), srv.child.stderr.String(), log.text()} {
		if secretIn(out, "receiver-SECRET-0123456789") || secretIn(out, strings.TrimPrefix(signing, "whsec_")) {
			t.Fatal("the webhook URL's token or the signing secret appears in the server's output or events")
		}
	}
}

// deliveriesSettled waits until the delivery consumers of the connectors
// named have nothing pending or unacknowledged: whatever was queued has
// been sent, retried away or given up.
func deliveriesSettled(t *testing.T, ctx context.Context, b *bus.Bus, c *child, names ...string) {
	t.Helper()
	waitFor(t, 30*time.Second, "settled delivery queues", func() bool {
		for _, name := range names {
			cons, err := b.JetStream().Consumer(ctx, bus.StreamDeliveries, connectors.ConsumerName(name))
			if err != nil {
				return false
			}
			info, err := cons.Info(ctx)
			if err != nil || info.NumPending != 0 || info.NumAckPending != 0 {
				return false
			}
		}
		return true
	}, c)
}
