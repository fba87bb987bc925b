package telegram_test

import (
	"context"
	"fmt"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/telegram"
	"github.com/agentwork/agentwork/connectors/telegram/telegramfake"
)

// A connector sends to a chat, or to a topic a target names; the fake
// Bot API shows what arrived.
func ExampleNew() {
	api := telegramfake.NewServer(telegramfake.DefaultToken)
	defer api.Close()
	c, err := telegram.New("ops", telegram.Config{
		BotToken: telegramfake.DefaultToken, // ${TELEGRAM_BOT_TOKEN} in agentwork.yaml
		ChatID:   "-1001234567890",
		BaseURL:  api.URL, // default https://api.telegram.org
	}, telegram.Options{})
	if err != nil {
		panic(err)
	}
	defer c.CloseIdleConnections()
	ctx := context.Background()
	for _, n := range []connectors.Notification{
		{ID: "r1.ops", Target: "ops", Text: "Disk /var is 95% full", Urgency: "important"},
		{ID: "r2.ops", Target: "ops:/42", Text: "Sales up 5% <week 47>", Urgency: "info"},
	} {
		rec, err := c.Send(ctx, n)
		fmt.Println(rec.MessageIDs, err)
	}
	msgs, _ := api.Messages(ctx, 2)
	for _, m := range msgs {
		fmt.Printf("%s (%s): %s\n", m.Destination, m.Urgency, m.Text)
	}
	// Output:
	// [-1001234567890:1] <nil>
	// [-1001234567890:2] <nil>
	// -1001234567890 (important): ⚠️ Disk /var is 95% full
	// -1001234567890/42 (info): Sales up 5% <week 47>
}

// A question with buttons; Answer hands each press to the decider, answers
// it, and shows the decision on the question.
func ExampleConnector_Answer() {
	api := telegramfake.NewServer(telegramfake.DefaultToken)
	defer api.Close()
	c, err := telegram.New("ops", telegram.Config{BotToken: telegramfake.DefaultToken, ChatID: "-1001234567890", BaseURL: api.URL}, telegram.Options{})
	if err != nil {
		panic(err)
	}
	defer c.CloseIdleConnections()
	ctx, stop := context.WithCancel(context.Background())
	_, _ = c.Send(ctx, connectors.Notification{ID: "ap1.ops", Target: "ops", Text: "Revert abc123?", Approval: &connectors.Prompt{
		ID: "ap1", Actions: []connectors.Action{{Verb: "approve", Label: "Approve"}, {Verb: "reject", Label: "Reject"}},
	}})

	decide := func(_ context.Context, a connectors.Answer) (connectors.Reply, error) {
		// The approval package decides here (a compare-and-set on its record).
		fmt.Println(a.ApprovalID, a.Verb, a.By)
		return connectors.Reply{Text: "Approved", Decided: true, Summary: "✅ Approved by " + a.ByName}, nil
	}
	done := make(chan error, 1)
	go func() { done <- c.Answer(ctx, decide) }()

	_, _ = api.PressButton(telegramfake.User{ID: 7, FirstName: "Ana"}, "-1001234567890", 1, "Approve")
	_, _ = api.WaitEdits(ctx, 1)
	stop()
	fmt.Println(<-done)
	m, _ := api.Message("-1001234567890", 1)
	fmt.Printf("%q, %d rows of buttons\n", m.Text, len(m.Buttons))
	// Output:
	// ap1 approve telegram:7
	// <nil>
	// "Revert abc123?\n\n✅ Approved by Ana", 0 rows of buttons
}
