package workflow_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/workflow"
)

// TestCredentialRunHeldToGrant: the notify and approval targets a run of
// a webhook credential renders from its inputs are checked against the
// credential's grant as it is now; the operator's runs, and the targets
// the operator wrote in the workflow, are not. Its agent steps' requests
// carry the credential.
func TestCredentialRunHeldToGrant(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	w := watchEvents(t, b)
	set := defs(t, `
tell:
  inputs: {to: {type: string, default: console}}
  steps:
    - {id: n, notify: {text: hi, targets: ["${{ inputs.to }}", "slack:#ops"]}}
ask:
  inputs: {to: {type: string, default: console}}
  steps:
    - {id: a, approval: {message: "is it ok", targets: ["${{ inputs.to }}"]}}
think:
  steps:
    - {id: t, agent: {prompt: "hello"}}
`)
	var (
		mu    sync.Mutex
		asked []string
	)
	cfg := testConfig(set)
	cfg.Connectors = []string{"console", "mail", "slack"}
	cfg.Grants = func(cred string, targets []string) error {
		mu.Lock()
		asked = append(asked, cred+" "+strings.Join(targets, ","))
		mu.Unlock()
		for _, t := range targets {
			if cred != "ci" || t != "console" {
				return fmt.Errorf("its grant no longer allows the target %q (webhook.tokens[0].targets)", t)
			}
		}
		return nil
	}
	e := startEngine(t, b, cfg, nil)
	ci := workflow.Cause{Kind: workflow.CauseWebhook, ID: "ci", Credential: "ci"}
	startAs := func(name string, in map[string]any, c workflow.Cause) string {
		t.Helper()
		run, _, err := e.Start(t.Context(), name, in, workflow.StartOptions{Cause: c})
		if err != nil {
			t.Fatal(err)
		}
		return run.ID
	}

	// The credential's run, rendering a target outside its grant: refused.
	got := waitEnd(t, w, e, startAs("tell", map[string]any{"to": "mail:me@evil.example"}, ci))
	n := got.Steps["n"]
	if got.Status != workflow.RunFailed || n.Error == nil || n.Error.Kind != workflow.ErrPermanent ||
		!strings.Contains(n.Error.Message, `"mail:me@evil.example"`) || !strings.Contains(n.Error.Message, "targets") || !strings.Contains(n.Error.Message, `"ci"`) {
		t.Fatalf("credential run to mail:me@evil.example: %s, step error %+v; want failed, permanent, naming the target, the credential and the grant field", got.Status, n.Error)
	}
	// Within its grant (console), and the operator's literal slack:#ops: sent.
	got = waitEnd(t, w, e, startAs("tell", nil, ci))
	if got.Status != workflow.RunDone {
		t.Errorf("credential run to console: %s (%v), want done", got.Status, got.Error)
	}
	// The admin's run is the operator's: not checked.
	got = waitEnd(t, w, e, startAs("tell", map[string]any{"to": "mail:ops@corp.example"}, workflow.Cause{}))
	if got.Status != workflow.RunDone {
		t.Errorf("admin run to mail:ops@corp.example: %s (%v), want done", got.Status, got.Error)
	}
	mu.Lock()
	if slices.ContainsFunc(asked, func(s string) bool { return strings.Contains(s, "slack:#ops") || strings.Contains(s, "corp.example") }) {
		t.Errorf("grant checks %q; want none of the operator's targets or runs", asked)
	}
	mu.Unlock()
	// An approval's targets are held to the grant too.
	got = waitEnd(t, w, e, startAs("ask", map[string]any{"to": "mail:me@evil.example"}, ci))
	if a := got.Steps["a"]; got.Status != workflow.RunFailed || a.Error == nil || !strings.Contains(a.Error.Message, "approval.targets") || !strings.Contains(a.Error.Message, "mail:me@evil.example") {
		t.Errorf("credential approval to mail:me@evil.example: %s, step error %+v; want failed naming approval.targets and the target", got.Status, a.Error)
	}

	// An agent step's request carries the credential.
	cons, err := b.JetStream().OrderedConsumer(t.Context(), bus.StreamRequests, jetstream.OrderedConsumerConfig{FilterSubjects: []string{b.Subjects.Request(workflow.StepSource, "think")}})
	if err != nil {
		t.Fatal(err)
	}
	id := startAs("think", nil, ci)
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(waitTimeout))
		if err != nil {
			t.Fatalf("no request of the agent step: %v", err)
		}
		_, req, err := agentwork.DecodeRequest(b, m.Subject(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		if req.Metadata["workflow_run"] != id {
			continue
		}
		if req.Credential != "ci" {
			t.Errorf("agent step request credential %q, want ci", req.Credential)
		}
		break
	}
}
