// Package triggers is the contract every trigger implements. A trigger
// turns something (a clock, a webhook call) into AgentWork requests on the
// bus; the shared agentwork.Runner runs them under the trigger's Policy.
// The triggers themselves live below this package (heartbeat, cron,
// webhook); the runtime wires a list of them, without knowing which.
//
// Beside the three methods of Trigger, a trigger may have capabilities,
// found by type assertion:
//
//   - Servicer: an admin API on NATS, served beside Run on every instance;
//   - api.Router: admin HTTP routes, mounted behind the admin token;
//   - api.PublicRouter: HTTP routes that authenticate their callers
//     themselves (the task webhook);
//   - api.Readier: readiness, asked by /readyz.
//
// The HTTP capabilities belong to package api, which serves them; api
// imports no trigger.
package triggers

import (
	"context"
	"fmt"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
)

// Trigger turns something into AgentWork requests on the bus.
type Trigger interface {
	// Sources are the sources of the requests it publishes, e.g.
	// bus.SourceCron: the runner runs their requests under Policy. No two
	// triggers of one runtime share a source.
	Sources() []string
	// Policy is how the runner treats the requests of those sources. It
	// is asked once, before Run, and does no I/O.
	Policy() agentwork.Policy
	// Run does the trigger's work (fires its schedule, or nothing when
	// its work happens in its routes) until ctx is done, then returns nil
	// promptly. It blocks; call it once. An error means the trigger
	// cannot go on, and the runtime stops. Sources, Policy and the
	// capabilities are safe to use while Run runs.
	Run(ctx context.Context) error
}

// Servicer is the capability of a trigger with an admin API on NATS (on
// <prefix>.api.<name>.<verb>). The runtime serves the Service
// (bus.Bus.StartService or Serve) beside Run, on every instance, until the
// triggers stop.
type Servicer interface {
	// Service describes the API. It is asked once and does no I/O; its
	// endpoints are called concurrently with Run.
	Service() bus.Service
}

// Policies maps each source of the triggers to its trigger's policy, for
// agentwork.Runner.Handle. A source claimed by two triggers is an error.
func Policies(ts ...Trigger) (map[string]agentwork.Policy, error) {
	out := map[string]agentwork.Policy{}
	owner := map[string]int{}
	for i, t := range ts {
		p := t.Policy()
		for _, src := range t.Sources() {
			if j, dup := owner[src]; dup && j != i {
				return nil, fmt.Errorf("triggers: source %q is published by two triggers (%T and %T)", src, ts[j], t)
			}
			owner[src] = i
			out[src] = p
		}
	}
	return out, nil
}
