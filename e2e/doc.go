// Package e2e holds end-to-end tests of agentwork: a real embedded bus, the
// real runner, triggers and delivery dispatcher, and the model clients
// talking HTTP to fakes that speak the OpenAI and Anthropic wire formats. It
// has no code of its own; run it with go test ./e2e/.
package e2e
