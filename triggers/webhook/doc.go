// Package webhook is the task.requested trigger: POST /v1/tasks turns an
// authenticated HTTP request into an AgentWork request on the bus
// (agentwork.request.<source>.<name>, source "task" unless the credential
// allows others).
//
// Callers authenticate with a Standard Webhooks signature (webhook-id,
// webhook-timestamp within 5 minutes, webhook-signature "v1,<base64
// HMAC-SHA256 of id.timestamp.body>"; several secrets for rotation) or a
// bearer token. Each credential is limited to the sources and names it may
// request; heartbeat, cron and delivery can never be requested. webhook-id
// or Idempotency-Key deduplicate: the same key gives the same request id and
// one run, the same key with another body is 422. The answer is 202
// {"id": ...} only after JetStream stored the request; every refusal is an
// RFC 9457 problem and queues nothing.
//
// A Handler is a triggers.Trigger whose work happens in its route: the api
// server mounts it as a public route (PublicRoutes), where a caller with the
// server's admin token may post tasks too.
//
// See docs/webhooks.md for the body's JSON Schema and examples.
package webhook
