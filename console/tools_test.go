package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/mcp"
)

// The tools page shows the MCP servers with their state and tools, the
// built-ins, and which sources' scopes offer each, through GET /v1/tools;
// what a server or a tool says of itself is escaped.
func TestToolsPage(t *testing.T) {
	t.Parallel()
	const evil = `<script>alert(1)</script>`
	echo := tools.Func("fs__echo", "Echo the text. "+evil, func(_ context.Context, a struct {
		Text string `json:"text"`
	}) (string, error) {
		return a.Text, nil
	})
	clock := tools.Func("clock", "The time now.", func(context.Context, struct{}) (string, error) { return "now", nil })
	f := newFixture(t, func(d *api.Deps) {
		reg, err := tools.NewRegistry(tools.Notify(), echo, clock)
		if err != nil {
			t.Fatal(err)
		}
		r := agentwork.NewRunner(d.Bus, model.ProviderFunc(nil), reg, agentwork.Config{})
		r.Handle("task", agentwork.Policy{Tools: []string{"fs__*"}})
		r.Handle("cron", agentwork.Policy{Tools: []string{"clock"}})
		d.Tools = agentwork.NewToolAdmin(r, func() []mcp.Status {
			return []mcp.Status{
				{Name: "fs", Transport: mcp.TransportStdio, State: mcp.StateUp, Since: time.Unix(0, 0), Tools: []string{"fs__echo"}},
				{Name: "web", Transport: "http", State: mcp.StateDown, Since: time.Unix(0, 0), LastError: "dial: " + evil, Restarts: 3},
			}
		})
	})
	b := f.browser(t).login(viewerToken)
	got := b.do("GET", "/tools", nil)
	if got.status != 200 {
		t.Fatalf("GET /tools = %d:\n%s", got.status, got.body)
	}
	if strings.Contains(got.body, evil) || strings.Count(got.body, "&lt;script&gt;alert(1)&lt;/script&gt;") != 2 {
		t.Errorf("a tool's description or a server's error is not escaped:\n%s", got.body)
	}
	for _, want := range []string{
		`id="server-fs"`, `<span class="status up">up</span>`, `<code>fs__echo</code>`,
		`id="server-web"`, `<span class="status down">down</span>`, "<dt>Restarts</dt><dd>3</dd>",
		`<code>clock</code> <span class="muted">The time now.</span> <span class="badge">cron</span>`, // a built-in, offered to cron
		`<span class="badge">task</span>`, // fs__echo, offered to tasks
		`<td>task</td>`, `<td><code>fs__*</code> </td>`, `<td>cron</td>`,
	} {
		if !strings.Contains(got.body, want) {
			t.Errorf("the tools page lacks %q:\n%s", want, got.body)
		}
	}
	if strings.Contains(got.body, "<td>heartbeat</td>") {
		t.Error("the tools page shows a scope for heartbeat, which no trigger handles here")
	}
	one := b.do("GET", "/tools?source=nosuch&name=x", nil)
	if !strings.Contains(one.body, "no trigger handles it") {
		t.Errorf("asking about an unknown source does not say why:\n%s", one.body)
	}

	// Without a runner, the page says what to do.
	none := newFixture(t).browser(t).login(viewerToken).do("GET", "/tools", nil)
	if none.status != 200 || !strings.Contains(none.body, "This server runs no tools") {
		t.Errorf("GET /tools without tools = %d:\n%s", none.status, none.body)
	}
}
