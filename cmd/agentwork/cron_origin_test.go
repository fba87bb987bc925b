package main

import (
	"testing"

	"github.com/agentwork/agentwork/triggers/cron"
)

func TestCronOriginNamesTheWorkflow(t *testing.T) {
	t.Parallel()
	j := cron.Job{ID: "wf-nightly-0", Origin: cron.OriginWorkflow, Workflow: "nightly"}
	if got, want := cronOrigin(j), "workflow (nightly)"; got != want {
		t.Errorf("cronOrigin(%+v) = %q, want %q", j, got, want)
	}
}
