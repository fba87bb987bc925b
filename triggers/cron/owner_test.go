package cron

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/tools/schedule"
)

// A webhook credential acting through the MCP server changes and runs
// only the jobs it created: a token limited to notify_user could
// otherwise patch an admin's job that runs exec and run it. The admin
// (through MCP too) and the console change any job; a patch keeps the
// job's creator.
func TestMCPTokenChangesOnlyItsJobs(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, _ := startScheduler(t, b, Config{}, nil)
	ctx := t.Context()
	admins := Job{ID: "admins", Schedule: "@daily", Prompt: "clean up", Tools: []string{"exec"}}
	if _, err := s.Add(ctx, admins); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddMCP(ctx, Job{ID: "mine", Schedule: "@daily", Prompt: "say hi"}, schedule.Owner{Name: "ops", Credential: "ops"}); err != nil {
		t.Fatal(err)
	}
	ops := api.WithActor(ctx, api.Actor{Via: OriginMCP, Name: "ops", Credential: "ops"})
	other := api.WithActor(ctx, api.Actor{Via: OriginMCP, Name: "viewer", Credential: "viewer"})
	changes := map[string]func(ctx context.Context, id string) error{
		"update": func(ctx context.Context, id string) error {
			_, err := s.Update(ctx, id, json.RawMessage(`{"prompt":"changed"}`))
			return err
		},
		"pause":  func(ctx context.Context, id string) error { _, err := s.Pause(ctx, id, "x"); return err },
		"resume": func(ctx context.Context, id string) error { _, err := s.Resume(ctx, id); return err },
		"run":    func(ctx context.Context, id string) error { _, err := s.RunNowKey(ctx, id, ""); return err },
		"delete": func(ctx context.Context, id string) error { return s.Delete(ctx, id) },
	}
	for name, change := range changes {
		if err := change(ops, "admins"); !errors.Is(err, ErrForbidden) {
			t.Errorf("%s of the admin's job by an MCP token = %v, want ErrForbidden", name, err)
		}
		if name != "delete" {
			if err := change(other, "mine"); !errors.Is(err, ErrForbidden) {
				t.Errorf("%s of ops's job by another MCP token = %v, want ErrForbidden", name, err)
			}
			if err := change(ops, "mine"); err != nil {
				t.Errorf("%s of its own job by ops = %v, want nil", name, err)
			}
		}
	}
	st, err := s.Get(ctx, "admins")
	if err != nil || st.Job.Prompt != "clean up" {
		t.Errorf("the admin's job after the token's tries: %+v, %v, want it unchanged", st.Job, err)
	}
	st, err = s.Get(ctx, "mine")
	if err != nil || st.Job.Prompt != "changed" || st.Job.Origin != OriginMCP || st.Job.Creator == nil || st.Job.Creator.Credential != "ops" {
		t.Errorf("ops's job after its update: %+v, %v, want the new prompt, origin mcp, creator ops", st.Job, err)
	}
	// The admin through MCP and a console user change any job.
	if _, err := s.Update(api.WithActor(ctx, api.Actor{Via: OriginMCP, Name: "admin"}), "admins", json.RawMessage(`{"prompt":"by the admin"}`)); err != nil {
		t.Errorf("update of a job by the admin through MCP = %v", err)
	}
	if _, err := s.Pause(api.WithActor(ctx, api.Actor{Via: "console", Name: "oncall", Credential: "oncall"}), "admins", "x"); err != nil {
		t.Errorf("pause of a job in the console = %v", err)
	}
	if err := changes["delete"](ops, "mine"); err != nil {
		t.Errorf("delete of its own job by ops = %v", err)
	}
}
