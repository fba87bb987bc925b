package agentwork_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
)

// quietWeekends is an input gate: no runs on Saturdays and Sundays. It
// reads the time from an injected clock, so it can be tested on any day.
type quietWeekends struct{ now func() time.Time }

var _ agentwork.InputGate = quietWeekends{}

func (g quietWeekends) Check(_ context.Context, run *agentwork.Run) error {
	switch g.now().Weekday() {
	case time.Saturday, time.Sunday:
		return agentwork.Skip("weekend", run.Request.Name+" resumes on Monday")
	}
	return nil
}

func ExampleInputGate() {
	saturday := time.Date(2026, 3, 7, 9, 0, 0, 0, time.UTC)
	gate := quietWeekends{now: func() time.Time { return saturday }}
	run := &agentwork.Run{Request: agentwork.Request{Source: "cron", Name: "sales-report"}}

	err := gate.Check(context.Background(), run)
	if s, ok := agentwork.AsSkip(err); ok {
		fmt.Printf("skip %s: %s\n", s.Reason, s.Detail)
	}
	// Output: skip weekend: sales-report resumes on Monday
}

// ackToken is an output gate for models told to answer HEARTBEAT_OK when
// nothing needs attention: such a reply is an acknowledgement, not news.
// Put it after ReplyGate, which has set run.Notice from the reply.
type ackToken struct{ token string }

var _ agentwork.OutputGate = ackToken{}

func (g ackToken) Inspect(_ context.Context, run *agentwork.Run, out agentwork.Output) error {
	if strings.Contains(out.Text, g.token) {
		run.Notice = nil
		return agentwork.Skip(agentwork.ReasonAck, "")
	}
	return nil
}

func ExampleOutputGate() {
	chain := []agentwork.OutputGate{agentwork.ReplyGate{}, ackToken{token: "HEARTBEAT_OK"}}
	for _, reply := range []string{"HEARTBEAT_OK", "The nightly backup failed twice."} {
		run := &agentwork.Run{Request: agentwork.Request{Source: "heartbeat", Name: "default"}}
		var err error
		for _, g := range chain {
			if err = g.Inspect(context.Background(), run, agentwork.Output{Text: reply}); err != nil {
				break
			}
		}
		if s, ok := agentwork.AsSkip(err); ok {
			fmt.Println("skip", s.Reason)
		} else {
			fmt.Println("deliver:", run.Notice.Text)
		}
	}
	// Output:
	// skip ack
	// deliver: The nightly backup failed twice.
}

// printer is a connector that prints what it is asked to send.
type printer struct{ sent chan<- string }

func (p printer) Send(_ context.Context, n connectors.Notification) (connectors.Receipt, error) {
	p.sent <- n.Target + ": " + n.Text
	return connectors.Receipt{Parts: 1}, nil
}

// A Policy says how the runner treats one source's requests. Here the
// heartbeat is fail-closed (only notify_user text is sent) and deduplicated
// for a day, on a real embedded bus with the script model.
func ExamplePolicy() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "agentwork-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	b, err := bus.Open(ctx, bus.Config{DataDir: dir, Listen: "off"})
	if err != nil {
		panic(err)
	}
	defer b.Close()

	provider, err := script.New(script.Config{Rules: []script.Rule{
		{Match: script.Match{Source: "heartbeat"}, Reply: script.Reply{Text: "Told the user.", Notify: "Disk 91% full on /var"}},
	}})
	if err != nil {
		panic(err)
	}
	reg, err := tools.NewRegistry(tools.Notify())
	if err != nil {
		panic(err)
	}
	outcomes := make(chan string)
	runner := agentwork.NewRunner(b, provider, reg, agentwork.Config{}, agentwork.WithConnectors("console"))
	runner.Handle("heartbeat", agentwork.Policy{
		Input:  []agentwork.InputGate{quietWeekends{now: func() time.Time { return time.Date(2026, 3, 9, 9, 0, 0, 0, time.UTC) }}},
		Output: []agentwork.OutputGate{agentwork.NotifyGate{}, &agentwork.DedupGate{KV: b.Dedup, Window: 24 * time.Hour}},
		Tools:  []string{tools.NotifyName},
		Observer: agentwork.ObserverFunc(func(run *agentwork.Run, outcome string) {
			outcomes <- outcome + " " + run.Result.Reason
		}),
	})
	sent := make(chan string, 1)
	dispatcher := connectors.NewDispatcher(b, connectors.Registry{"console": printer{sent}}, connectors.DispatcherConfig{}, nil)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { _ = runner.Run(runCtx); done <- struct{}{} }()
	go func() { _ = dispatcher.Run(runCtx); done <- struct{}{} }()

	for range 2 {
		if _, err := agentwork.Publish(ctx, b, agentwork.Request{Source: "heartbeat", Name: "default", Prompt: "Check HEARTBEAT.md"}, agentwork.PublishOptions{}); err != nil {
			panic(err)
		}
		fmt.Println(strings.TrimSpace(<-outcomes))
	}
	fmt.Println(<-sent)
	stop()
	<-done
	<-done
	// Output:
	// done
	// skip duplicate
	// console: Disk 91% full on /var
}
