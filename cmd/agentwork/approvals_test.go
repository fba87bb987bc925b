package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
)

// The approvals of a running server: asked on its bus, shown with their
// signed links by the console connector, answered through the CLI (a
// client of the HTTP API) and through a link.
func TestApprovalsCommands(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	addr := freeAddr(t)
	cfg := strings.Replace(testConfig, "listen: \"off\"", "listen: "+addr, 1)
	consoleOut, stop := startServe(t, writeConfig(t, dir, cfg), dataDir)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	b, err := bus.Dial(ctx, bus.Config{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// The asker signs its links as the server does (a workflow step or
	// the runner asks with the server's Service; so does this one).
	tok, err := api.ReadAdminToken(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	asker := approval.New(b, approval.Config{PublicURL: "http://" + addr, LinkKey: approval.LinkKey(tok)})
	ask := func(run string) approval.Approval {
		t.Helper()
		a, _, err := asker.Ask(ctx, approval.Request{
			ID: approval.ToolCallID(run, 0), Kind: approval.KindToolCall, Run: run, Source: "task", Name: "deploy",
			Question: "Run exec for " + run + "?", Tool: "exec", Args: `{"cmd":"make deploy"}`, Targets: []string{"console"}, Timeout: time.Hour,
		})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := ask("run-cli")
	apiFlag := "--api=" + addr
	cli := cliOf(ctx, t, dataDir)
	if out := cli("approvals", "list", "--state", "pending", apiFlag); !strings.Contains(out, a.ID) || !strings.Contains(out, "make deploy") {
		t.Errorf("approvals list printed %q, want the approval with its command", out)
	}
	if out := cli("approvals", "show", a.ID, apiFlag); !strings.Contains(out, "tool      exec") || !strings.Contains(out, "pending") {
		t.Errorf("approvals show printed %q", out)
	}
	if out := cli("approvals", "approve", a.ID, "--comment", "ok from the CLI", apiFlag); !strings.Contains(out, a.ID+" approved by admin") {
		t.Errorf("approvals approve printed %q", out)
	}
	var errOut bytes.Buffer
	err = run(ctx, []string{"approvals", "reject", a.ID, apiFlag, "--data-dir", dataDir}, io.Discard, &errOut)
	if err == nil || !strings.Contains(err.Error(), "already approved by admin") {
		t.Errorf("approvals reject after approve = %v, want a conflict naming the decider", err)
	}
	var got approval.Approval
	if err := json.Unmarshal([]byte(cli("approvals", "show", a.ID, "--json", apiFlag)), &got); err != nil || got.Decision == nil || got.Decision.Comment != "ok from the CLI" {
		t.Errorf("approvals show --json = %+v, %v", got, err)
	}

	// The console shows the question with its links, to this listener.
	b2 := ask("run-link")
	consoleOut.waitContains(t, "Run exec for run-link?", 10*time.Second)
	consoleOut.waitContains(t, "Reject: http://"+addr+"/approvals/"+b2.ID+"/reject?", 10*time.Second)
	link := regexp.MustCompile(`Approve: (http://\S+/approvals/` + b2.ID + `/approve\?\S+)`).FindStringSubmatch(consoleOut.String())
	if link == nil {
		t.Fatalf("no approve link for %s in the console output:\n%s", b2.ID, consoleOut.String())
	}
	resp, err := http.Get(link[1])
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET link = %d", resp.StatusCode)
	}
	resp, err = http.PostForm(link[1], url.Values{"comment": {"from the phone"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if out := cli("approvals", "show", b2.ID, apiFlag); resp.StatusCode != http.StatusOK || !strings.Contains(out, "approve by link") {
		t.Errorf("after the link's POST (%d): %s", resp.StatusCode, out)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
