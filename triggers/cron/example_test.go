package cron_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/triggers/cron"
)

// How the runtime wires the cron trigger: the scheduler fires the ticks,
// its policy gates and observes the runs, its routes serve /v1/jobs.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{DataDir: "/tmp/agentwork-example", Listen: "off"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	s, err := cron.New(b, cron.Config{Jobs: []cron.Job{{
		ID: "sales-report", Schedule: "0 9 * * mon", Timezone: "Europe/Berlin",
		Prompt: "Analyse last week's sales data.", Targets: []string{"telegram"},
	}}})
	if err != nil {
		fmt.Println(err) // cron.jobs[0].<field>: what is wrong
		return
	}
	provider, _ := script.New(script.Config{})
	reg, _ := tools.NewRegistry(tools.Notify())
	runner := agentwork.NewRunner(b, provider, reg, agentwork.Config{})
	runner.Handle(bus.SourceCron, s.Policy())

	mux := http.NewServeMux()
	s.Routes(mux) // GET/POST /v1/jobs, ...

	go func() { _ = runner.Run(ctx) }()
	_ = s.Run(ctx) // until ctx ends
}

func ExampleParseSchedule() {
	ny, _ := time.LoadLocation("America/New_York")
	s, _ := cron.ParseSchedule("30 2 * * *", ny)
	// 02:30 does not exist on 2026-03-08 in New York: the job runs right
	// after the gap, once.
	next := s.Next(time.Date(2026, 3, 7, 12, 0, 0, 0, ny))
	fmt.Println(next.In(ny).Format(time.RFC3339))
	// Output: 2026-03-08T03:00:00-04:00
}
