package connectors_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/console"
	"github.com/agentwork/agentwork/connectors/nats"
)

// Build turns one entry of the connectors section into a connector.
func ExampleTypes_Build() {
	types := connectors.Types{console.Type, nats.Type}
	c, err := types.Build("console", console.Config{Format: console.FormatJSON}, connectors.BuildDeps{Stdout: os.Stdout})
	if err != nil {
		panic(err)
	}
	_, _ = c.Send(context.Background(), connectors.Notification{
		ID: "r1.console", RunID: "r1", Source: "cron", Name: "sales", Target: "console",
		Text: "Sales up 5% <week 47>", Urgency: "info", Time: time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC),
	})
	// Output:
	// {"id":"r1.console","run_id":"r1","source":"cron","name":"sales","text":"Sales up 5% <week 47>","urgency":"info","target":"console","time":"2026-11-23T09:00:00Z"}
}

// The wiring of serve: the connector types of the build, the configured
// connectors built with them, their names handed to the runner as targets,
// and one Dispatcher until shutdown.
func Example_wiring() {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	log := zap.NewNop()
	types := connectors.Types{console.Type, nats.Type}
	reg, err := types.BuildAll(connectors.Configs{
		"console": console.Config{},
		"alerts":  nats.Config{Subject: "alerts.agentwork"},
	}, connectors.BuildDeps{Stdout: os.Stdout, Bus: b, Logger: log})
	if err != nil {
		panic(err) // connectors.alerts: subject: ...
	}
	_ = reg.Names() // the runner's targets
	d := connectors.NewDispatcher(b, reg, connectors.DispatcherConfig{}, log.Named("connectors"))
	_ = d.Run(ctx) // until ctx is cancelled; in-flight sends finish first
}

// A connector type is a package with a config struct, a connector and a
// Type made by Define; a build offers it by listing it in its Types.
func ExampleDefine() {
	// In package shout (its config and connector are below): its Type.
	shoutType := connectors.Define(connectors.Spec[shoutConfig]{
		Name:     "shout",
		Defaults: shoutConfig{Prefix: "!"},
		New: func(_ string, c shoutConfig, deps connectors.BuildDeps) (connectors.Connector, error) {
			return shout{w: deps.Stdout, prefix: c.Prefix}, nil
		},
	})

	// In cmd: the types of the build, one line each.
	types := connectors.Types{console.Type, shoutType}

	var section yaml.Node
	_ = yaml.Unmarshal([]byte("loud: {type: shout, prefix: '>>'}\nplain: {type: shout}\nbad: {type: whisper}\n"), &section)
	if _, err := types.Decode(&section); err != nil {
		fmt.Println(err)
	}
	_ = yaml.Unmarshal([]byte("loud: {type: shout, prefix: '>>'}\nplain: {type: shout}\n"), &section)
	cs, _ := types.Decode(&section)
	reg, err := types.BuildAll(cs, connectors.BuildDeps{Stdout: os.Stdout})
	if err != nil {
		panic(err)
	}
	for _, name := range reg.Names() {
		_, _ = reg[name].Send(context.Background(), connectors.Notification{Text: "disk full"})
	}
	// Output:
	// line 3: connectors.bad.type: "whisper" is not a connector type of this build (known: console, shout)
	// >> disk full
	// ! disk full
}

// shoutConfig is a shout connector's entry: {type: shout, prefix: ">>"}.
type shoutConfig struct {
	// Prefix comes before every line. Default "!".
	Prefix string `yaml:"prefix"`
}

func (c shoutConfig) Validate() error {
	if c.Prefix == "" {
		return errors.New("prefix: must not be empty")
	}
	return nil
}

// shout writes each notification as one line, after its prefix.
type shout struct {
	w      io.Writer
	prefix string
}

func (s shout) Send(ctx context.Context, n connectors.Notification) (connectors.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return connectors.Receipt{}, err
	}
	if _, err := fmt.Fprintln(s.w, s.prefix, n.Text); err != nil {
		return connectors.Receipt{}, err
	}
	return connectors.Receipt{Parts: 1}, nil
}
