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
