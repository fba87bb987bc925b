// Package wftrigger starts workflow runs from the triggers of the
// workflows' definitions (`on:`): cron and event. Webhook triggers are
// routes of the HTTP API, which calls workflow.Engine.Start itself.
//
// Cron triggers are jobs of the cron scheduler (package cron), origin
// workflow, id ID(workflow, index): CronJobs gives them to cron.New with
// cron.WithWorkflows(t.CronJobs(), t), and the Trigger is the Starter their
// ticks start runs with. Time zones and DST, catch-up, one fire per tick
// across instances, pause and resume and missed ticks are the
// scheduler's; each tick starts at most one run (its idempotency key is
// the tick's message id).
//
// Event triggers are served by Run: one durable consumer (ConsumerName)
// on the events stream, shared by every instance, that hands each new
// CloudEvent to the triggers whose type, subject and condition match.
// Each event starts at most one run per trigger (the run's idempotency
// key is the trigger's id and the event's id). A run started by an event
// of another workflow run is one deeper than that run; past
// workflow.MaxDepth no run starts and an agentwork.workflow.error event
// (source Producer) names the trigger and the chain of runs. The
// trigger's own events start no runs.
//
// The Trigger is a triggers.Trigger with no sources: it publishes no
// runner requests.
package wftrigger
