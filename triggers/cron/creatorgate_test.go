package cron

import (
	"slices"
	"testing"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/schedule"
)

// A job a run creates with schedule_create keeps the gates its creator
// had (tasks.<name>.approval, say): its runs wait for the same approvals,
// and the job's own approval list can only add to them.
func TestAgentJobKeepsItsCreatorsGates(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, _ := startScheduler(t, b, Config{}, make(chan TickResult, 100), WithConnectors("console"))
	reg, ctx := toolsOf(t, s, tools.RunInfo{ID: "run-1", Source: "task", Name: "deploy", Approval: []string{"exec", "github__merge_*"}})
	c := reg.Call(ctx, "c1", schedule.CreateName, `{"name":"later","prompt":"deploy again","in":"20m"}`)
	if c.Outcome != tools.OutcomeOK {
		t.Fatalf("schedule_create = %s %q", c.Outcome, c.Error)
	}
	var l []schedule.Info
	eventually(t, func() bool {
		l, _ = s.Agent().List(ctx, schedule.Owner{Source: "task", Name: "deploy"})
		return len(l) == 1
	})
	st, err := s.Get(ctx, l[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	j := st.Job
	if j.Creator == nil || !slices.Equal(j.Creator.Approval, []string{"exec", "github__merge_*"}) {
		t.Fatalf("the job's creator = %+v, want the creating run's gates on record", j.Creator)
	}
	set, err := s.Policy().SettingsFor(ctx, bus.SourceCron, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"exec", "github__merge_*"} {
		if !slices.Contains(set.Approval, g) {
			t.Errorf("the job's runs are gated by %v, want %s among them (the creator's)", set.Approval, g)
		}
	}
}
