package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/telegram"
	"github.com/agentwork/agentwork/connectors/telegram/telegramfake"
)

// TestKilledMidSplitTextSendsEachPartOnce kills the server with SIGKILL
// in the middle of a text Telegram takes as three messages: parts 1 and 2
// confirmed, part 3 on its way. After a restart on the same data dir the
// chat holds each part once: the parts confirmed were recorded as they
// were, and only part 3 is sent again.
func TestKilledMidSplitTextSendsEachPartOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	const token = "111111:AAH-split-token-0123456789"
	api := telegramfake.NewServer(token)
	t.Cleanup(api.Close)
	api.Inject(connectortest.Fault{Kind: connectortest.Stall, After: 2}) // part 3 hangs
	t.Setenv("TG_TOKEN", token)
	srv := startCrashServer(t, fmt.Sprintf(`
bus:
  listen: 127.0.0.1:0
http:
  listen: "off"
connectors:
  phone: {type: telegram, bot_token: "${TG_TOKEN}", chat_id: "1001", base_url: %q}
delivery:
  ack_wait: 1s
`, api.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	b := srv.dial(ctx)
	var text strings.Builder
	for _, w := range []string{"alpha ", "beta ", "gamma "} {
		text.WriteString(strings.Repeat(w, 4000/len(w)) + "\n\n")
	}
	n := connectors.Notification{
		ID: "run-split.phone", RunID: "run-split", Source: "task", Name: "split",
		Text: text.String() + "end.", Urgency: "info", Target: "phone", Time: time.Now(),
	}
	parts := telegram.Parts(n)
	if len(parts) != 3 {
		t.Fatalf("the text is %d parts, want 3", len(parts))
	}
	if err := connectors.Enqueue(ctx, b, n); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "part 3 sent after parts 1 and 2", func() bool { return api.Script.Requests() == 3 }, srv.child)
	b.Close()
	srv.kill9()

	srv.restart()
	b2 := srv.dial(ctx)
	defer b2.Close()
	log := followDeliveries(t, ctx, b2)
	waitFor(t, 30*time.Second, "the delivered event", func() bool { return len(log.of("phone")) > 0 }, srv.child)
	ev := log.of("phone")[0]
	if ev.outcome != connectors.OutcomeDelivered {
		t.Fatalf("delivery %s %+v, want delivered", ev.outcome, ev.res)
	}
	if got := api.Texts("1001"); !slices.Equal(got, parts) {
		t.Fatalf("the chat holds %d messages, want the 3 parts once each, in order", len(got))
	}
	if rec := ev.res.Receipt; rec == nil || rec.Parts != 3 || len(rec.MessageIDs) != 3 {
		t.Errorf("delivered receipt = %+v, want 3 parts with 3 message ids", rec)
	}
}
