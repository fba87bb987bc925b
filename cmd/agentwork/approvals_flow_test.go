package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors/telegram/telegramfake"
)

const (
	approvalsTGToken = "333333:AAH-approvals-SECRET-0123456789"
	tgChat           = "1001"
)

// The approver and someone else in the group.
var (
	approver = telegramfake.User{ID: 42, FirstName: "Ana"}
	stranger = telegramfake.User{ID: 7, FirstName: "Bob"}
)

// gateServer is `agentwork serve` (a child process) with a Telegram bot
// (the fake), the console, the HTTP API, and the workflow gate: a line
// before the approval step, the approval, a line after it when approved.
type gateServer struct {
	*crashServer
	dir, addr string
	tg        *telegramfake.Server
	ctx       context.Context
}

func startGate(t *testing.T, timeout, onTimeout string) *gateServer {
	t.Helper()
	tg := telegramfake.NewServer(approvalsTGToken)
	t.Cleanup(tg.Close)
	t.Setenv("TG_TOKEN", approvalsTGToken)
	dir := t.TempDir()
	script := "#!/bin/sh\nprintf '%s\\n' \"$1\" >> \"$(dirname \"$0\")/lines.txt\"\necho \"appended $1\"\n"
	if err := os.WriteFile(filepath.Join(dir, "append.sh"), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	appendSh := filepath.Join(dir, "append.sh")
	cfg := fmt.Sprintf(`
bus:
  listen: 127.0.0.1:0
http:
  listen: %s
connectors:
  phone: {type: telegram, bot_token: "${TG_TOKEN}", chat_id: %q, base_url: %q}
  console: {type: console}
tools:
  exec:
    allow:
      - [%s]
workflows:
  gate:
    inputs: {n: {type: string, required: true}}
    targets: [console]
    steps:
      - id: before
        tool: exec
        args: {argv: [%q, "before ${{ inputs.n }}"]}
      - id: ask
        approval:
          message: "Ship ${{ inputs.n }}?"
          targets: [phone, console]
          approvers: ["telegram:42", link]
          timeout: %s
          on_timeout: %s
      - id: after
        if: steps.ask.approved
        tool: exec
        args: {argv: [%q, "after ${{ inputs.n }} by ${{ steps.ask.decided_by }}"]}
`, addr, tgChat, tg.URL, appendSh, appendSh, timeout, onTimeout, appendSh)
	if err := run(t.Context(), []string{"config", "check", "--config", writeConfig(t, dir, cfg)}, io.Discard, io.Discard); err != nil {
		t.Fatalf("config check: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	t.Cleanup(cancel)
	g := &gateServer{crashServer: startCrashServer(t, cfg), dir: dir, addr: addr, tg: tg, ctx: ctx}
	g.ready()
	return g
}

// ready waits until the server's HTTP API answers /readyz with 200.
func (g *gateServer) ready() {
	g.t.Helper()
	g.stderr.waitContains(g.t, "agentwork is running", 30*time.Second)
	waitFor(g.t, 30*time.Second, "the HTTP API", func() bool {
		resp, err := http.Get("http://" + g.addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, g.child)
}

// restart starts the server again on its data dir and waits until its
// HTTP API is ready.
func (g *gateServer) restart() {
	g.t.Helper()
	g.crashServer.restart()
	g.ready()
}

// cli runs the CLI against the server; it fails the test on an error.
func (g *gateServer) cli(args ...string) string {
	g.t.Helper()
	out, err := g.try(args...)
	if err != nil {
		g.t.Fatalf("agentwork %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func (g *gateServer) try(args ...string) (string, error) {
	var out, errOut bytes.Buffer
	args = append(args, "--data-dir", g.dataDir)
	if args[0] == "approvals" {
		args = append(args, "--api="+g.addr)
	}
	err := run(g.ctx, args, &out, &errOut)
	if err != nil {
		err = fmt.Errorf("%w\n%s", err, errOut.String())
	}
	return out.String(), err
}

// start starts a run of gate and returns its id.
func (g *gateServer) start(n string) string {
	g.t.Helper()
	out := g.cli("workflow", "run", "gate", "--input", "n="+n)
	m := regexp.MustCompile(`started run ([0-9a-f]+) `).FindStringSubmatch(out)
	if m == nil {
		g.t.Fatalf("workflow run printed %q", out)
	}
	return m[1]
}

var approvalIDRE = regexp.MustCompile(`Approval ([0-9a-f]{32}):`)

// question waits for the Telegram message that asks "Ship <n>?" and
// returns it with its approval's id.
func (g *gateServer) question(n string) (telegramfake.Request, string) {
	g.t.Helper()
	for have := 0; ; have++ {
		for _, r := range g.tg.Requests() {
			if r.MessageID != 0 && strings.Contains(r.Text, "Ship "+n+"?") {
				m := approvalIDRE.FindStringSubmatch(r.Text)
				if m == nil {
					g.t.Fatalf("the question holds no approval id: %q", r.Text)
				}
				return r, m[1]
			}
		}
		if _, err := g.tg.Messages(g.ctx, have+1); err != nil {
			g.t.Fatalf("no question for %s in Telegram: %v\nserver stderr:\n%s", n, err, g.stderr.String())
		}
	}
}

// waitDone follows run to its end (the CLI's --wait) and fails unless it
// ends done.
func (g *gateServer) waitDone(run string) string {
	g.t.Helper()
	return g.cli("workflow", "status", run, "--wait", "--timeout", "30s")
}

// lines counts the lines the exec steps appended.
func (g *gateServer) lines() map[string]int {
	g.t.Helper()
	raw, err := os.ReadFile(filepath.Join(g.dir, "lines.txt"))
	if err != nil && !os.IsNotExist(err) {
		g.t.Fatal(err)
	}
	n := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if l != "" {
			n[l]++
		}
	}
	return n
}

// A workflow asks in Telegram with two buttons; a stranger's press
// changes nothing; the approver's resumes the run, the message shows the
// decision, the step after the gate runs once. The same gate answered by
// a signed link (GET then POST), the CLI and the API; two answers racing:
// one wins, the other learns it lost.
func TestWorkflowApprovalChannels(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	g := startGate(t, "1h", "reject")

	// Telegram.
	runA := g.start("a")
	q, idA := g.question("a")
	m, ok := g.tg.Message(tgChat, q.MessageID)
	if !ok || len(m.Buttons) != 1 || len(m.Buttons[0]) != 2 || m.Buttons[0][0].Text != "Approve" || m.Buttons[0][1].Text != "Reject" {
		t.Fatalf("the question's buttons = %+v, want Approve and Reject", m.Buttons)
	}
	if strings.Contains(m.Text, "/approvals/") {
		t.Errorf("the Telegram question shows the links beside its buttons: %q", m.Text)
	}
	if _, err := g.tg.PressButton(stranger, tgChat, q.MessageID, "Approve"); err != nil {
		t.Fatal(err)
	}
	answers, err := g.tg.WaitAnswers(g.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a := answers[0]; !a.ShowAlert || a.Text != replyNotAllowed || a.From != stranger.ID {
		t.Fatalf("the stranger's press was answered %+v, want the not-allowed alert", a)
	}
	if out := g.cli("approvals", "show", idA); !strings.Contains(out, "pending") {
		t.Fatalf("after the stranger's press: %s", out)
	}
	if _, err := g.tg.PressButton(approver, tgChat, q.MessageID, "Approve"); err != nil {
		t.Fatal(err)
	}
	if answers, err = g.tg.WaitAnswers(g.ctx, 2); err != nil || answers[1].Text != "Approved" || answers[1].ShowAlert {
		t.Fatalf("the approver's press was answered %+v (%v), want Approved", answers, err)
	}
	edits, err := g.tg.WaitEdits(g.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if e := edits[0]; e.MessageID != q.MessageID || !strings.Contains(e.Text, "✅ Approved by Ana at ") || len(e.Buttons) != 0 {
		t.Fatalf("the question was edited to %+v, want the decision and no buttons", e)
	}
	if out := g.waitDone(runA); !strings.Contains(out, ": done") {
		t.Fatalf("run a: %s", out)
	}
	if got := g.lines(); got["before a"] != 1 || got["after a by telegram:42"] != 1 {
		t.Fatalf("lines = %v; want before and after a once each", got)
	}

	// A signed link: GET shows the question and decides nothing, POST
	// decides.
	runB := g.start("b")
	_, idB := g.question("b")
	g.stdout.waitContains(t, "/approvals/"+idB+"/approve?", 20*time.Second)
	link := regexp.MustCompile(`Approve: (http://\S+/approvals/` + idB + `/approve\?\S+)`).FindStringSubmatch(g.stdout.String())
	if link == nil {
		t.Fatalf("no approve link for %s on the console:\n%s", idB, g.stdout.String())
	}
	resp, err := http.Get(link[1])
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "Ship b?") {
		t.Fatalf("GET link = %d %s", resp.StatusCode, page)
	}
	if out := g.cli("approvals", "show", idB); !strings.Contains(out, "pending") {
		t.Fatalf("a GET decided: %s", out)
	}
	resp, err = http.PostForm(link[1], url.Values{"comment": {"from the phone"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST link = %d", resp.StatusCode)
	}
	if out := g.waitDone(runB); !strings.Contains(out, ": done") {
		t.Fatalf("run b: %s", out)
	}

	// The CLI.
	runC := g.start("c")
	_, idC := g.question("c")
	if out := g.cli("approvals", "approve", idC, "--comment", "ok"); !strings.Contains(out, idC+" approved by admin") {
		t.Fatalf("approvals approve printed %q", out)
	}
	g.waitDone(runC)

	// The API.
	tok, err := api.ReadAdminToken(g.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	post := func(id, verb string) (int, string) {
		req, _ := http.NewRequestWithContext(g.ctx, http.MethodPost, "http://"+g.addr+"/v1/approvals/"+id+"/"+verb, strings.NewReader(`{"comment":"via the API"}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	runD := g.start("d")
	_, idD := g.question("d")
	if code, body := post(idD, "approve"); code != http.StatusOK {
		t.Fatalf("POST approve = %d %s", code, body)
	}
	g.waitDone(runD)

	// Two answers at once: the API rejects, the approver presses Approve.
	runE := g.start("e")
	qE, idE := g.question("e")
	var wg sync.WaitGroup
	var code int
	var body string
	wg.Go(func() { code, body = post(idE, "reject") })
	if _, err := g.tg.PressButton(approver, tgChat, qE.MessageID, "Approve"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	answers, err = g.tg.WaitAnswers(g.ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	press := answers[2]
	switch {
	case code == http.StatusOK: // the API won: the press learns it lost
		if !press.ShowAlert || !strings.Contains(press.Text, "Already rejected by admin") {
			t.Fatalf("the API won; the press was answered %+v", press)
		}
	case code == http.StatusConflict: // the press won: the API says who
		if press.Text != "Approved" || !strings.Contains(body, "already approved by telegram:42") {
			t.Fatalf("the press won (%+v); the API answered %d %s", press, code, body)
		}
	default:
		t.Fatalf("POST reject = %d %s", code, body)
	}
	g.waitDone(runE)
	lines := g.lines()
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		if lines["before "+n] != 1 {
			t.Errorf("before %s ran %d times, want 1", n, lines["before "+n])
		}
	}
	for _, l := range []string{"after b by link", "after c by admin", "after d by admin"} {
		if lines[l] != 1 {
			t.Errorf("%q ran %d times, want 1 (lines %v)", l, lines[l], lines)
		}
	}
	if afterE := lines["after e by telegram:42"]; (code == http.StatusOK) != (afterE == 0) || afterE > 1 {
		t.Errorf("after e ran %d times with the API answering %d", afterE, code)
	}
}

// eventCount counts the events on subject in the events stream.
func eventCount(t *testing.T, ctx context.Context, b *bus.Bus, subject string) uint64 {
	t.Helper()
	st, err := b.JetStream().Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}

// timeout: 3s with the binary stopped across the deadline: at the next
// start the approval expires once, on_timeout (approve) is followed, and
// the people asked are told once.
func TestWorkflowApprovalExpiresWhileStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	g := startGate(t, "3s", "approve")
	runX := g.start("x")
	_, id := g.question("x")
	var a approval.Approval
	if err := json.Unmarshal([]byte(g.cli("approvals", "show", id, "--json")), &a); err != nil || a.State != approval.Pending {
		t.Fatalf("approval = %+v, %v", a, err)
	}
	g.kill9()
	// Nothing runs across the deadline.
	time.Sleep(time.Until(a.Deadline.Add(100 * time.Millisecond)))
	g.restart()
	if out := g.waitDone(runX); !strings.Contains(out, ": done") {
		t.Fatalf("run x: %s", out)
	}
	if err := json.Unmarshal([]byte(g.cli("approvals", "show", id, "--json")), &a); err != nil || a.State != approval.Expired || a.Decision.By != approval.ByTimeout || a.Decision.Verdict != approval.Approve {
		t.Fatalf("approval after the restart = %+v, %v; want expired, approved by timeout", a, err)
	}
	if got := g.lines(); got["before x"] != 1 || got["after x by timeout"] != 1 {
		t.Fatalf("lines = %v; want before once and after once, by timeout", got)
	}
	b := g.dial(g.ctx)
	defer b.Close()
	if n := eventCount(t, g.ctx, b, b.Subjects.Event(approval.Source, "expired")); n != 1 {
		t.Errorf("%d expired events, want 1", n)
	}
	// The Telegram chat is told once (the delivery may lag the run).
	for have := len(g.tg.Texts(tgChat)); ; have++ {
		told := 0
		for _, text := range g.tg.Texts(tgChat) {
			if strings.Contains(text, "Expired: approved automatically") && strings.Contains(text, "Ship x?") {
				told++
			}
		}
		if told == 1 {
			break
		}
		if told > 1 {
			t.Fatalf("told %d times of the expiry", told)
		}
		if _, err := g.tg.Messages(g.ctx, have+1); err != nil {
			t.Fatalf("nobody was told of the expiry: %v (chat %q)", err, g.tg.Texts(tgChat))
		}
	}
}

// kill -9 while 20 runs wait for approval: after the restart all 20 are
// still pending, each resumes once when answered, and nothing before the
// gate runs again.
func TestWorkflowApprovalsSurviveKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	const runs = 20
	g := startGate(t, "1h", "reject")
	ids := map[string]string{} // approval id → run
	for i := range runs {
		ids[fmt.Sprintf("n%02d", i)] = g.start(fmt.Sprintf("n%02d", i))
	}
	if _, err := g.tg.Messages(g.ctx, runs); err != nil {
		t.Fatalf("the %d questions did not arrive: %v", runs, err)
	}
	g.kill9()
	g.restart()
	var pending []approval.Approval
	if err := json.Unmarshal([]byte(g.cli("approvals", "list", "--state", "pending", "--json")), &pending); err != nil {
		var wrapped struct{ Approvals []approval.Approval }
		if err2 := json.Unmarshal([]byte(g.cli("approvals", "list", "--state", "pending", "--json")), &wrapped); err2 != nil {
			t.Fatal(err, err2)
		}
		pending = wrapped.Approvals
	}
	if len(pending) != runs {
		t.Fatalf("%d approvals pending after the restart, want %d", len(pending), runs)
	}
	for _, a := range pending {
		g.cli("approvals", "approve", a.ID)
	}
	for n, run := range ids {
		if out := g.waitDone(run); !strings.Contains(out, ": done") {
			t.Fatalf("run %s: %s", n, out)
		}
	}
	lines := g.lines()
	for n := range ids {
		if lines["before "+n] != 1 || lines["after "+n+" by admin"] != 1 {
			t.Errorf("%s: before %d, after %d; want once each", n, lines["before "+n], lines["after "+n+" by admin"])
		}
	}
}
