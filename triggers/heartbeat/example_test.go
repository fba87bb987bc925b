package heartbeat_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

// Example wires a heartbeat into a runtime: its policy on the runner, Run
// beside the runner, and a wake.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, _ := os.MkdirTemp("", "heartbeat-example")
	defer os.RemoveAll(dir)
	_ = os.WriteFile(dir+"/HEARTBEAT.md", []byte("# Checks\n- [ ] Did the nightly backup finish?\n"), 0o644)

	b, err := bus.Open(ctx, bus.Config{DataDir: dir + "/data", Listen: "off"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	h, err := heartbeat.New(b, heartbeat.Config{Enabled: true, Every: 30 * time.Minute}, heartbeat.WithBaseDir(dir))
	if err != nil {
		fmt.Println(err)
		return
	}
	provider, _ := script.New(script.Config{Rules: []script.Rule{
		{Match: script.Match{Source: "heartbeat"}, Reply: script.Reply{Notify: "The nightly backup did not finish."}},
	}})
	reg, _ := tools.NewRegistry(tools.Notify())
	runner := agentwork.NewRunner(b, provider, reg, agentwork.Config{}, agentwork.WithConnectors("console"))
	runner.Handle(bus.SourceHeartbeat, h.Policy())

	outcomes := make(chan bus.Event, 1)
	sub, _ := b.Conn().Subscribe(b.Subjects.Event(bus.SourceHeartbeat, "*"), func(m *nats.Msg) {
		if ev, err := bus.DecodeEvent(m.Data); err == nil && ev.Subject == "default" {
			select {
			case outcomes <- ev:
			default: // a scheduled tick may also run; the example shows the first outcome
			}
		}
	})
	defer sub.Unsubscribe()

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { _ = runner.Run(runCtx); done <- struct{}{} }()
	go func() { _ = h.Run(runCtx); done <- struct{}{} }()
	defer func() { stop(); <-done; <-done }()

	if _, err := h.Wake(ctx); err != nil {
		fmt.Println(err)
		return
	}
	ev := <-outcomes
	var r agentwork.Result
	_ = ev.DecodeData(&r)
	fmt.Println(ev.Type, r.Text)
	// Output: agentwork.heartbeat.done The nightly backup did not finish.
}

func ExampleParseChecklist() {
	c := heartbeat.ParseChecklist([]byte("# Heartbeat\n<!-- nothing yet -->\n- [ ]\n"))
	fmt.Println(c.Empty())
	c = heartbeat.ParseChecklist([]byte("# Heartbeat\n- [ ] Is any disk more than 90% full?\n"))
	fmt.Println(c.Empty(), c.Items)
	// Output:
	// true
	// false 1
}

func ExampleIsOK() {
	fmt.Println(heartbeat.IsOK("All quiet. **HEARTBEAT_OK**"))
	fmt.Println(heartbeat.IsOK("Backup failed, so not HEARTBEAT_OK: check the host."))
	// Output:
	// true
	// false
}
