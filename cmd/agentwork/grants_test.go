package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus"
)

// TestTaskCredentialTargets: a task credential cannot publish on
// agentwork's own subjects through a nats connector (that paused the
// heartbeat: 400, whatever the grant), may name connectors bare but no
// destination unless its grant lists it (403 that names the field to
// change), and reaches what its grant lists.
func TestTaskCredentialTargets(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	addr := freeAddr(t)
	const ci, ops = "ci-token-0123456789abcdef", "ops-token-0123456789abcdef"
	cfg := writeConfig(t, dir, `
bus:
  listen: 127.0.0.1:0
http:
  listen: `+addr+`
connectors:
  console: {type: console}
  alerts: {type: nats, subject: alerts.agentwork}
webhook:
  tokens:
    - {name: ci, token: `+ci+`}
    - {name: ops, token: `+ops+`, targets: [console, "alerts:*"]}
model:
  script:
    rules: [{match: {source: task}, text: "ok"}]
`)
	_, stop := startServe(t, cfg, dataDir)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	post := func(token, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/tasks", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The notification the allowed task sends, to know it was delivered.
	c, err := bus.Dial(ctx, bus.Config{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Conn().SubscribeSync("team.x")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Conn().Flush(); err != nil {
		t.Fatal(err)
	}

	for _, token := range []string{ci, ops} {
		for _, dest := range []string{"agentwork.api.heartbeat.pause", "agentwork.api.heartbeat.resume", "agentwork.event.task.done", "AGENTWORK.api.heartbeat.wake", "$JS.API.STREAM.LIST", "_INBOX.x"} {
			code, body := post(token, `{"prompt":"hi","deliver":"reply","targets":["alerts:`+dest+`"]}`)
			if code != http.StatusBadRequest || !strings.Contains(body, "targets[0]") || !strings.Contains(body, "pick a subject of your own") {
				t.Errorf("POST /v1/tasks to alerts:%s = %d %s; want 400 that says the subject is not one to publish on", dest, code, body)
			}
		}
	}
	for _, tc := range []struct {
		token, targets string
		want           int
		says           []string
	}{
		{ci, `["alerts:team.x"]`, http.StatusForbidden, []string{`may not send to \"alerts:team.x\"`, "webhook.tokens[0].targets"}},
		{ci, `["console","alerts:team.x"]`, http.StatusForbidden, []string{`targets[1]`, "webhook.tokens[0].targets"}},
		{ops, `["alerts:team.x","console"]`, http.StatusAccepted, nil},
		{ops, `["alerts"]`, http.StatusForbidden, []string{`may not send to \"alerts\"`, "webhook.tokens[1].targets"}},
		{ci, `["console","alerts"]`, http.StatusAccepted, nil},
	} {
		code, body := post(tc.token, `{"prompt":"hi","deliver":"reply","targets":`+tc.targets+`}`)
		if code != tc.want {
			t.Errorf("POST /v1/tasks targets %s = %d %s; want %d", tc.targets, code, body, tc.want)
		}
		for _, s := range tc.says {
			if !strings.Contains(body, s) {
				t.Errorf("POST /v1/tasks targets %s = %s; want it to say %q", tc.targets, body, s)
			}
		}
	}
	if _, err := sub.NextMsg(30 * time.Second); err != nil {
		t.Fatalf("the task ops may send to alerts:team.x: %v", err)
	}
	cli := cliOf(ctx, t, dataDir)
	if out := cli("heartbeat", "status"); strings.Contains(out, "paused") {
		t.Errorf("heartbeat status =\n%s\nwant it running: no task may pause it", out)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
