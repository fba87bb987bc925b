package bus_test

import (
	"context"
	"fmt"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
)

// A Worker consumes a stream with a handler that returns a verdict: here it
// handles three reminders, retrying one that is not due yet.
func ExampleWorker() {
	dir, err := os.MkdirTemp("", "worker-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{DataDir: dir, Listen: "off"})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	js := b.JetStream()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "REMINDERS", Subjects: []string{"reminders.>"}}); err != nil {
		panic(err)
	}
	for _, s := range []string{"water the plants", "not yet", "call mum"} {
		if _, err := js.Publish(ctx, "reminders.home", []byte(s)); err != nil {
			panic(err)
		}
	}
	handled := make(chan string)
	w, err := bus.NewWorker(js, bus.WorkerConfig{
		Stream:   "REMINDERS",
		Consumer: jetstream.ConsumerConfig{Durable: "reminders"},
	}, func(ctx context.Context, m jetstream.Msg) bus.Verdict {
		md, err := m.Metadata()
		if err != nil {
			return bus.Terminate() // not a JetStream message
		}
		if string(m.Data()) == "not yet" && md.NumDelivered == 1 {
			return bus.Retry(0) // comes back at once, as its second delivery
		}
		handled <- fmt.Sprintf("%s (delivery %d)", m.Data(), md.NumDelivered)
		return bus.Done()
	})
	if err != nil {
		panic(err)
	}
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	for range 3 {
		fmt.Println(<-handled)
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Unordered output:
	// water the plants (delivery 1)
	// not yet (delivery 2)
	// call mum (delivery 1)
}
