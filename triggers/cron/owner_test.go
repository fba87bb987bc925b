package cron

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
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

// A credential's console session (not the admin's) creates jobs that act
// for it (origin console, its credential as creator: its runs keep to its
// grant and may not have their approvals decided by it), with the
// runner's tools only, and edits only its own jobs; it may still pause,
// resume and run the others, as console: write says.
func TestConsoleCredentialJobsActForIt(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, _ := startScheduler(t, b, Config{}, nil)
	mux := http.NewServeMux()
	s.Routes(mux)
	if _, err := s.Add(t.Context(), Job{ID: "admins", Schedule: "@daily", Prompt: "clean up", Tools: []string{"exec"}}); err != nil {
		t.Fatal(err)
	}
	oncall := api.Actor{Via: OriginConsole, Name: "oncall", Credential: "oncall"}
	do := func(method, path, body string) (int, string) {
		t.Helper()
		r := httptest.NewRequestWithContext(api.WithActor(t.Context(), oncall), method, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	if code, body := do("POST", "/v1/jobs", `{"id":"mine","schedule":"@daily","prompt":"hi","tools":["exec"]}`); code != http.StatusForbidden {
		t.Errorf("POST with tools from a credential's console = %d %s, want 403", code, body)
	}
	if code, body := do("POST", "/v1/jobs", `{"id":"mine","schedule":"@daily","prompt":"hi"}`); code != http.StatusCreated {
		t.Fatalf("POST from a credential's console = %d %s, want 201", code, body)
	}
	st, err := s.Get(t.Context(), "mine")
	if err != nil || st.Job.Origin != OriginConsole || st.Job.Creator == nil || st.Job.Creator.Credential != "oncall" {
		t.Fatalf("the console's job = %+v, %v; want origin console, creator oncall", st.Job, err)
	}
	if code, body := do("PATCH", "/v1/jobs/admins", `{"prompt":"exfiltrate"}`); code != http.StatusForbidden {
		t.Errorf("PATCH of the admin's job from a credential's console = %d %s, want 403", code, body)
	}
	if code, body := do("PATCH", "/v1/jobs/mine", `{"tools":["exec"]}`); code != http.StatusForbidden {
		t.Errorf("PATCH of tools from a credential's console = %d %s, want 403", code, body)
	}
	if code, body := do("PATCH", "/v1/jobs/mine", `{"prompt":"hello"}`); code != http.StatusOK {
		t.Errorf("PATCH of its own job's prompt = %d %s, want 200", code, body)
	}
	if code, body := do("POST", "/v1/jobs/admins/pause", `{}`); code/100 != 2 {
		t.Errorf("pause of the admin's job from the console = %d %s, want 2xx", code, body)
	}
	if st, _ := s.Get(t.Context(), "admins"); st.Job.Prompt != "clean up" {
		t.Errorf("the admin's job after the console's tries: prompt %q, want it unchanged", st.Job.Prompt)
	}
}
