// Package agentwork runs AgentWork: a request on the bus (from the heartbeat,
// a cron job or a webhook task) goes through one Runner that, in this order,
// applies the source's input gates, calls the model with the tools in the
// run's scope (runner.tools, or the source's, job's or task's own), passes
// the reply through output gates (notify_user inspection, dedup), queues the
// notification for each target connector, and emits exactly one done, skip
// or error event.
//
// Requests are JetStream messages on AGENTWORK_REQUESTS, consumed through one
// durable consumer shared by all instances. A run claim in KV keeps a
// redelivered request that already finished from running again; transient
// model errors are retried by redelivery with backoff, never by sleeping.
package agentwork
