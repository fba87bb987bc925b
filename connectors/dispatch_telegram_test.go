package connectors_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/telegram"
	"github.com/agentwork/agentwork/connectors/telegram/telegramfake"
)

// telegramPair returns a Telegram connector named tg sending to a fake Bot
// API, and the fake.
func telegramPair(t *testing.T) (*telegram.Connector, *telegramfake.Server) {
	t.Helper()
	api := telegramfake.New(t)
	c, err := telegram.New("tg", telegram.Config{BotToken: api.Token, ChatID: tgChat, BaseURL: api.URL}, telegram.Options{})
	if err != nil {
		t.Fatalf("telegram.New = %v", err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c, api
}

const tgChat = "-1001234567890"

// threeParts is a text Telegram takes as three messages.
func threeParts(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, w := range []string{"alpha ", "beta ", "gamma "} {
		b.WriteString(strings.Repeat(w, 4000/len(w)) + "\n\n")
	}
	text := b.String() + "end."
	if n := len(telegram.Parts(connectors.Notification{Text: text})); n != 3 {
		t.Fatalf("the text is %d parts, want 3", n)
	}
	return text
}

// TestDispatcherSplitCrashResendsNoPart: an instance stops for good in
// the middle of a split text, after Telegram confirmed parts 1 and 2 and
// while part 3 is on its way (the process froze or died: no progress
// signal, no claim renewal). The instance that takes the send over once
// the claim lapsed sends part 3 alone: each part reaches the chat once,
// because each part is recorded in the send claim as it is confirmed, not
// when the whole send returns.
func TestDispatcherSplitCrashResendsNoPart(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	b2 := client(t, b)
	events := watch(t, b)
	cfg := fastRetries
	cfg.AckWait, cfg.ShutdownGrace, cfg.SendTimeout = time.Second, time.Minute, time.Minute
	tg, api := telegramPair(t)
	api.Inject(connectortest.Fault{Kind: connectortest.Stall, After: 2}) // part 3 hangs
	n := note("1", "tg", threeParts(t))
	want := telegram.Parts(n)
	enqueue(t, b, n)

	dead := connectors.NewDispatcher(b, connectors.Registry{"tg": tg}, cfg, nil)
	stopDead := start(t, dead)
	eventually(t, "part 3 sent after parts 1 and 2 were confirmed", func() bool { return api.Script.Requests() == 3 })
	// The instance dies here: it neither signals nor renews any more, and
	// takes nothing more (its consumer closed); its part 3 hangs.
	resume := connectors.Stall(dead, true)
	deadReturned := make(chan error, 1)
	go func() { deadReturned <- stopDead() }()

	stop := run(t, b2, connectors.Registry{"tg": tg}, cfg)
	d := next(t, events)
	if d.outcome != connectors.OutcomeDelivered || d.res.Attempts != 2 {
		t.Fatalf("event %s %+v, want delivered at attempt 2 by the other instance", d.outcome, d.res)
	}
	if got := api.Texts(tgChat); !slices.Equal(got, want) {
		t.Fatalf("the chat holds %d messages, want the %d parts once each, in order (parts %s)", len(got), len(want), partsSeen(got, want))
	}
	if rec := d.res.Receipt; rec == nil || rec.Parts != 3 || !slices.Equal(rec.MessageIDs, []string{tgChat + ":1", tgChat + ":2", tgChat + ":3"}) {
		t.Errorf("delivered receipt = %+v, want 3 parts with the ids of messages 1, 2, 3", rec)
	}

	// The dead instance, back, finds its claim taken and drops its send.
	resume()
	select {
	case err := <-deadReturned:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("the stopped instance's Run did not return")
	}
	stopped(t, stop)
	if got := api.Texts(tgChat); len(got) != len(want) {
		t.Errorf("the chat holds %d messages at the end, want %d", len(got), len(want))
	}
}

// partsSeen names, for each message, which part of want it is.
func partsSeen(got, want []string) string {
	var s []string
	for _, g := range got {
		i := slices.Index(want, g)
		s = append(s, string(rune('1'+i)))
	}
	return strings.Join(s, ",")
}

// TestDispatcherRateLimitSpendsNoAttempt: Telegram answers 429 with
// retry_after 1 twice; with max_attempts 2 the notification is still
// delivered, on the third try: waiting as the platform asked is not a
// failed attempt. The delivered event counts the one attempt.
func TestDispatcherRateLimitSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	tg, api := telegramPair(t)
	api.RateLimit(2, time.Second)
	n := note("1", "tg", "Disk /var is 95% full")
	enqueue(t, b, n)
	cfg := fastRetries
	cfg.MaxAttempts = 2
	stop := run(t, b, connectors.Registry{"tg": tg}, cfg)
	d := next(t, events)
	stopped(t, stop)
	if d.outcome != connectors.OutcomeDelivered || d.res.Attempts != 1 {
		t.Fatalf("event %s %+v, want delivered at attempt 1 (the 429s spend none)", d.outcome, d.res)
	}
	if got := api.Script.Requests(); got != 3 {
		t.Errorf("Telegram got %d requests, want 3 (two 429s, then the message)", got)
	}
	if got := api.Texts(tgChat); !slices.Equal(got, []string{n.Text}) {
		t.Errorf("the chat holds %q, want the text once", got)
	}
}

// TestDispatcherRateLimitHorizon: a platform that keeps asking to wait
// holds a notification at most delivery.horizon after it was queued; then
// it fails, saying so, and waits in the failed deliveries for a retry.
func TestDispatcherRateLimitHorizon(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watch(t, b)
	tg, api := telegramPair(t)
	api.RateLimit(-1, time.Second)
	n := note("1", "tg", "Disk /var is 95% full")
	enqueue(t, b, n)
	cfg := fastRetries
	cfg.Horizon = 1500 * time.Millisecond // the second 429 would wait past it
	stop := run(t, b, connectors.Registry{"tg": tg}, cfg)
	d := next(t, events)
	stopped(t, stop)
	if d.outcome != connectors.OutcomeFailed || d.res.Permanent {
		t.Fatalf("event %s %+v, want failed, not permanent", d.outcome, d.res)
	}
	if want := "rate limited for longer than delivery.horizon (1.5s)"; !strings.Contains(d.res.Error, want) || !strings.Contains(d.res.Error, "429") {
		t.Errorf("error = %q, want it to say %q and quote the 429", d.res.Error, want)
	}
	if got := api.Script.Requests(); got != 2 {
		t.Errorf("Telegram got %d requests, want 2 (the first 429 waited, the second would wait past the horizon)", got)
	}
	if _, err := connectors.NewDeadLetters(b).Get(t.Context(), n.ID); err != nil {
		t.Errorf("failed delivery %s: %v, want it kept for a retry", n.ID, err)
	}
}
