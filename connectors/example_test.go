package connectors_test

import (
	"context"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
)

// Build turns one entry of the connectors section into a connector.
func ExampleBuild() {
	c, err := connectors.Build("console", connectors.Config{Type: connectors.TypeConsole, Format: connectors.FormatJSON},
		connectors.BuildDeps{Stdout: os.Stdout})
	if err != nil {
		panic(err)
	}
	_ = c.Send(context.Background(), connectors.Notification{
		ID: "r1.console", RunID: "r1", Source: "cron", Name: "sales", Target: "console",
		Text: "Sales up 5% <week 47>", Urgency: "info", Time: time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC),
	})
	// Output:
	// {"id":"r1.console","run_id":"r1","source":"cron","name":"sales","text":"Sales up 5% <week 47>","urgency":"info","target":"console","time":"2026-11-23T09:00:00Z"}
}

// The wiring of serve: build the configured connectors, hand their names to
// the runner as targets, and run one Dispatcher until shutdown.
func Example_wiring() {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	log := zap.NewNop()
	reg, err := connectors.BuildAll(connectors.Configs{
		"console": {Type: connectors.TypeConsole},
		"alerts":  {Type: connectors.TypeNATS, Subject: "alerts.agentwork"},
	}, connectors.BuildDeps{Stdout: os.Stdout, Bus: b, Logger: log})
	if err != nil {
		panic(err) // connectors.alerts.subject: ...
	}
	_ = reg.Names() // the runner's targets
	d := connectors.NewDispatcher(b, reg, connectors.DispatcherConfig{}, log.Named("connectors"))
	_ = d.Run(ctx) // until ctx is cancelled; in-flight sends finish first
}
