package cron

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/schedule"
)

// TestAgentJobKeepsItsCredential: a job that a webhook credential's task
// creates with schedule_create remembers the credential, its fires act for
// it (the request carries it), and each fire checks the job's targets
// against the credential's grant as it is then: narrowed or removed, the
// run is skipped with the reason, and nothing is delivered.
func TestAgentJobKeepsItsCredential(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	var mu sync.Mutex
	allowed := map[string][]string{"ci": {"telegram:42"}} // credential → targets its grant allows now
	grants := func(credential string, targets []string) error {
		mu.Lock()
		defer mu.Unlock()
		ok, found := allowed[credential]
		if !found {
			return fmt.Errorf("credential %q is no longer configured", credential)
		}
		for _, t := range targets {
			if !slices.Contains(ok, t) {
				return fmt.Errorf("credential %q may no longer send to %q (webhook.tokens[0].targets)", credential, t)
			}
		}
		return nil
	}
	s, _ := startScheduler(t, b, Config{}, make(chan TickResult, 100), WithConnectors("console", "telegram"), WithGrants(grants))
	reg, ctx := toolsOf(t, s, tools.RunInfo{ID: "run-1", Source: "task", Name: "chat", Targets: []string{"telegram:42"}, Credential: "ci"})
	if c := reg.Call(ctx, "c1", schedule.CreateName, `{"name":"tea","prompt":"remind the user of the tea","in":"20m"}`); c.Outcome != tools.OutcomeOK {
		t.Fatalf("schedule_create = %s %q, want created", c.Outcome, c.Error)
	}
	var l []schedule.Info
	var err error
	eventually(t, func() bool {
		l, err = s.Agent().List(ctx, schedule.Owner{Source: "task", Name: "chat"})
		return err != nil || len(l) == 1
	})
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := s.readJob(ctx, l[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Creator == nil || j.Creator.Credential != "ci" {
		t.Fatalf("the job's creator = %+v, want one that remembers credential ci", j.Creator)
	}
	tick := time.Now().UTC()
	req := s.request(j, tick, false)
	if req.Credential != "ci" {
		t.Errorf("the fire's request credential = %q, want ci", req.Credential)
	}
	gate := s.Policy().Input[0]
	fire := func() string {
		return checkResult(gate.Check(ctx, &agentwork.Run{ID: "r", Request: req, Targets: req.Targets}))
	}
	if got := fire(); got != "go" {
		t.Fatalf("fire with the grant allowing telegram:42 = %s, want go", got)
	}
	mu.Lock()
	allowed["ci"] = []string{"telegram"}
	mu.Unlock()
	err = gate.Check(ctx, &agentwork.Run{ID: "r", Request: req, Targets: req.Targets})
	sk, ok := agentwork.AsSkip(err)
	if !ok || sk.Reason != ReasonForbidden || !strings.Contains(sk.Detail, `may no longer send to "telegram:42"`) || !strings.Contains(sk.Detail, "ci") {
		t.Errorf("fire with the grant narrowed = %v, want a skip %s that says which target and credential", err, ReasonForbidden)
	}
	mu.Lock()
	delete(allowed, "ci")
	mu.Unlock()
	if sk, ok := agentwork.AsSkip(gate.Check(ctx, &agentwork.Run{ID: "r", Request: req, Targets: req.Targets})); !ok || !strings.Contains(sk.Detail, "no longer configured") {
		t.Errorf("fire with the credential removed = %+v, want a skip that says so", sk)
	}
	// A job of the operator's own (no credential) is not asked about.
	if _, err := s.Add(ctx, Job{ID: "ops", Schedule: "@daily", Prompt: "p", Targets: []string{"telegram:-100123"}}); err != nil {
		t.Fatal(err)
	}
	ops, _, err := s.readJob(ctx, "ops")
	if err != nil {
		t.Fatal(err)
	}
	r := s.request(ops, tick, false)
	if got := checkResult(gate.Check(ctx, &agentwork.Run{ID: "r2", Request: r, Targets: r.Targets})); got != "go" || r.Credential != "" {
		t.Errorf("fire of an operator's job = %s (credential %q), want go with none", got, r.Credential)
	}
}
