package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
)

// appendEnv makes the test binary a program that appends its arguments as
// a line to the file the variable names (see TestMain): the side effect
// of the gated exec calls.
const appendEnv = "AGENTWORK_TEST_APPEND"

func runAppend() int {
	f, err := os.OpenFile(os.Getenv(appendEnv), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, strings.Join(os.Args[1:], " ")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("appended")
	return 0
}

// A gated exec call in a heartbeat run, with the real binary: the run
// parks and `approvals list` shows the command and its arguments; killed
// -9 while parked, the server comes back with the run still parked;
// approved, the command runs once and the notify_user text is delivered;
// rejected, it never runs and the model is told by whom; approved and
// killed at once, the call is made at most once and the run finishes.
func TestGatedExecCallInAHeartbeat(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	files := t.TempDir()
	logFile := filepath.Join(files, "deploys.txt")
	if err := os.WriteFile(filepath.Join(files, "HEARTBEAT.md"), []byte("- deploy what is ready\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	rule := func(word string) string {
		return fmt.Sprintf(`      - match: {prompt: %s}
        notify: "%s deployed"
        tool_calls:
          - name: exec
            arguments: {argv: [%s, %s]}
`, word, word, exe, word)
	}
	cfg := fmt.Sprintf(`bus:
  listen: 127.0.0.1:0
http:
  listen: %s
heartbeat:
  checklist: %s
  tools: [exec]
  approval: [exec]
runner:
  approvals: {timeout: 1h}
tools:
  exec:
    allow: [[%s]]
    env: {%s: %s}
model:
  script:
    rules:
%s%s%s`, addr, filepath.Join(files, "HEARTBEAT.md"), exe, appendEnv, logFile, rule("alpha"), rule("beta"), rule("gamma"))
	srv := startCrashServer(t, cfg)
	// ready waits until the HTTP API answers /readyz with 200: the log
	// line comes before the API listens.
	ready := func() {
		t.Helper()
		srv.stderr.waitContains(t, "agentwork is running", 30*time.Second)
		waitFor(t, 30*time.Second, "the HTTP API", func() bool {
			resp, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, srv.child)
	}
	ready()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cli := cliOf(ctx, t, srv.dataDir)
	apiFlag := "--api=" + addr
	// listPending lists the pending approvals; ok is false while the API
	// refuses connections (a restart under way), to be polled again.
	listPending := func() (out string, ok bool) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		err := run(ctx, []string{"approvals", "list", "--state", "pending", apiFlag, "--data-dir", srv.dataDir}, &stdout, &stderr)
		if err != nil && (errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error()+stderr.String(), "connection refused")) {
			return "", false
		}
		if err != nil {
			t.Fatalf("agentwork approvals list: %v\n%s", err, stderr.String())
		}
		return stdout.String(), true
	}
	lines := func() []string {
		raw, err := os.ReadFile(logFile)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(string(raw)), "\n")
	}
	publish := func(word string) string {
		t.Helper()
		b := srv.dial(ctx)
		defer b.Close()
		pub, err := agentwork.Publish(ctx, b, agentwork.Request{Source: bus.SourceHeartbeat, Name: "default", Prompt: "deploy " + word, Manual: true}, agentwork.PublishOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pub.ID
	}
	idRe := regexp.MustCompile(`\b[0-9a-f]{32}\b`)
	// pending waits for the pending approval whose line names word, and
	// returns its id.
	pending := func(word string) string {
		t.Helper()
		var id string
		waitFor(t, 30*time.Second, "a pending approval of the exec call of "+word, func() bool {
			out, ok := listPending()
			if !ok {
				return false
			}
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "exec") && strings.Contains(l, exe) && strings.Contains(l, word) {
					id = idRe.FindString(l)
					return id != ""
				}
			}
			return false
		}, srv.child)
		return id
	}
	done := func(id string) agentwork.Result {
		t.Helper()
		b := srv.dial(ctx)
		defer b.Close()
		ev, res := runEvent(t, ctx, b, bus.SourceHeartbeat, id)
		if ev.Type != "agentwork.heartbeat.done" {
			t.Fatalf("run event = %s (%s %s), want done\nserver stderr:\n%s", ev.Type, res.Reason, res.Error, srv.stderr.String())
		}
		return res
	}

	// Parked: nothing ran. Killed -9 and started again: still parked.
	alpha := publish("alpha")
	ap := pending("alpha")
	if got := lines(); got != nil {
		t.Fatalf("the file holds %v while the call waits, want nothing", got)
	}
	srv.kill9()
	srv.restart()
	ready()
	if got := pending("alpha"); got != ap {
		t.Fatalf("after the restart the pending approval is %s, want %s", got, ap)
	}
	if out := cli("approvals", "approve", ap, apiFlag); !strings.Contains(out, "approved by admin") {
		t.Fatalf("approvals approve printed %q", out)
	}
	res := done(alpha)
	if got := callNames(res); !slices.Equal(got, []string{"notify_user:ok", "exec:ok"}) {
		t.Errorf("alpha's calls = %v, want notify_user:ok, exec:ok", got)
	}
	if len(res.Approvals) != 1 || res.Approvals[0].ID != ap || res.Approvals[0].By != "admin" || res.Approvals[0].Verdict != "approve" {
		t.Errorf("alpha's approvals = %+v, want %s approved by admin", res.Approvals, ap)
	}
	srv.stdout.waitContains(t, "alpha deployed", 10*time.Second)
	if got := lines(); !slices.Equal(got, []string{"alpha"}) {
		t.Errorf("the file holds %v, want alpha once", got)
	}

	// Rejected: never runs; the model reads who refused it.
	beta := publish("beta")
	bp := pending("beta")
	if out := cli("approvals", "reject", bp, "--comment", "not today", apiFlag); !strings.Contains(out, "rejected by admin") {
		t.Fatalf("approvals reject printed %q", out)
	}
	res = done(beta)
	if c := res.ToolCalls; len(c) != 2 || c[1].Outcome != "refused" || !strings.Contains(c[1].Error, "a person refused this call: rejected by admin") || !strings.Contains(c[1].Error, "not today") {
		t.Errorf("beta's calls = %+v, want exec refused, telling the model who rejected it and why", c)
	}
	if got := lines(); !slices.Equal(got, []string{"alpha"}) {
		t.Errorf("the file holds %v after the rejection, want alpha only", got)
	}

	// Approved and killed at once: at most once, and the run finishes.
	gamma := publish("gamma")
	gp := pending("gamma")
	cli("approvals", "approve", gp, apiFlag)
	srv.kill9()
	srv.restart()
	res = done(gamma)
	if got := lines(); len(got) > 2 || (len(got) == 2 && got[1] != "gamma") {
		t.Errorf("the file holds %v, want gamma at most once after alpha", got)
	}
	if c := res.ToolCalls; len(c) != 2 || (c[1].Outcome != "ok" && c[1].Outcome != "interrupted") {
		t.Errorf("gamma's calls = %+v, want exec ok or interrupted", c)
	}
}
