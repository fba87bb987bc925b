package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/mcp"
)

// GET /v1/tools lists the tools (of a source and name: those in their
// scope) and the MCP servers; POST /v1/tools/{tool}/call calls one by hand.
// Both need the admin token.
func TestToolRoutes(t *testing.T) {
	t.Parallel()
	echo := tools.Func("fs__echo", "Echo the text.", func(_ context.Context, a struct {
		Text string `json:"text"`
	}) (string, error) {
		return "echo: " + a.Text, nil
	})
	f := newFixture(t, func(_ *api.Config, d *api.Deps) {
		reg, err := tools.NewRegistry(tools.Notify(), echo)
		if err != nil {
			t.Fatal(err)
		}
		r := agentwork.NewRunner(d.Bus, model.ProviderFunc(nil), reg, agentwork.Config{})
		r.Handle("task", agentwork.Policy{Tools: []string{"fs__*"}})
		d.Tools = agentwork.NewToolAdmin(r, func() []mcp.Status {
			return []mcp.Status{{Name: "fs", Transport: mcp.TransportStdio, State: mcp.StateUp, Since: time.Unix(0, 0), Tools: []string{"fs__echo"}}}
		})
	})
	if got := f.do(t, "GET", "/v1/tools", "", ""); got.status != http.StatusUnauthorized {
		t.Fatalf("GET /v1/tools without the token = %d, want 401", got.status)
	}

	list := func(query string) agentwork.ToolList {
		t.Helper()
		got := f.do(t, "GET", "/v1/tools"+query, adminToken, "")
		var l agentwork.ToolList
		if got.status != http.StatusOK || json.Unmarshal(got.body, &l) != nil {
			t.Fatalf("GET /v1/tools%s = %d %s", query, got.status, got.body)
		}
		return l
	}
	names := func(l agentwork.ToolList) string {
		var out []string
		for _, ti := range l.Tools {
			out = append(out, ti.Name)
		}
		return strings.Join(out, ",")
	}
	all := list("")
	if names(all) != "fs__echo,notify_user" || len(all.Servers) != 1 || all.Servers[0].State != mcp.StateUp {
		t.Errorf("every tool = %s, servers %+v; want fs__echo,notify_user and fs up", names(all), all.Servers)
	}
	if !strings.Contains(string(all.Tools[0].Schema), `"text"`) {
		t.Errorf("fs__echo's schema = %s, want its arguments", all.Tools[0].Schema)
	}
	task := list("?source=task&name=report")
	if names(task) != "fs__echo,notify_user" || task.From != agentwork.ScopeSource || !task.Notify || strings.Join(task.Scope, ",") != "fs__*" {
		t.Errorf("tools of task report = %s (scope %v from %s, notify %v), want fs__echo and notify_user, scope fs__* from the source", names(task), task.Scope, task.From, task.Notify)
	}
	if got := f.do(t, "GET", "/v1/tools?source=nope", adminToken, ""); got.status != http.StatusBadRequest || !strings.Contains(got.problem(t).Detail, `unknown source "nope"`) {
		t.Errorf("GET /v1/tools?source=nope = %d %s, want 400 naming the source", got.status, got.body)
	}

	got := f.do(t, "POST", "/v1/tools/fs__echo/call", adminToken, `{"text":"hi"}`)
	var c tools.Call
	if got.status != http.StatusOK || json.Unmarshal(got.body, &c) != nil || c.Outcome != tools.OutcomeOK || c.Result != "echo: hi" {
		t.Errorf("POST /v1/tools/fs__echo/call = %d %s, want 200 and the result", got.status, got.body)
	}
	if got := f.do(t, "POST", "/v1/tools/fs__nope/call", adminToken, `{}`); got.status != http.StatusNotFound || !strings.Contains(got.problem(t).Detail, "fs__echo, notify_user") {
		t.Errorf("POST /v1/tools/fs__nope/call = %d %s, want 404 listing the tools", got.status, got.body)
	}
	if got := f.do(t, "POST", "/v1/tools/fs__echo/call", adminToken, `[1]`); got.status != http.StatusBadRequest {
		t.Errorf("POST with arguments that are not an object = %d %s, want 400", got.status, got.body)
	}
}
