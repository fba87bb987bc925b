package webhook_test

import (
	"fmt"

	"github.com/agentwork/agentwork/triggers/webhook"
)

// ParseTask applies the defaults and names every invalid field.
func ExampleParseTask() {
	task, errs := webhook.ParseTask([]byte(`{"prompt":"Summarise the open incidents","targets":["slack"]}`), nil)
	fmt.Println(task.Source, task.Name, task.Targets, len(errs))

	_, errs = webhook.ParseTask([]byte(`{"promt":"typo","deliver":"email"}`), nil)
	for _, e := range errs {
		fmt.Printf("%s: %s\n", e.Field, e.Detail)
	}
	// Output:
	// task default [slack] 0
	// promt: unknown field; want prompt, name, source, targets, deliver, dedup_window or metadata
	// prompt: required; want the work to do as a non-blank string
	// deliver: "email": want auto, reply, notify or none
}

// A credential's grant limits what it may request; heartbeat and cron are
// never allowed.
func ExampleGrant_Allows() {
	g := webhook.Grant{Sources: []string{"*"}, Names: []string{"report-*"}}
	fmt.Println(g.Allows("task", "report-daily"), g.Allows("task", "deploy"), g.Allows("cron", "report-daily"))
	// Output: true false false
}
