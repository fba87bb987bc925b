package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/model/openai/openaifake"
	"github.com/agentwork/agentwork/triggers/cron"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of serve,
// that tells waiters about each write.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // closed and replaced on every write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written != nil {
		close(s.written)
		s.written = nil
	}
	return s.b.Write(p)
}

// waitContains waits for writes until the buffer holds want.
func (s *syncBuffer) waitContains(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		if strings.Contains(s.b.String(), want) {
			s.mu.Unlock()
			return
		}
		if s.written == nil {
			s.written = make(chan struct{})
		}
		ch := s.written
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("output %q never contained %q", s.String(), want)
		}
	}
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freeAddr returns a loopback address that was free a moment ago, for a
// listener the test configures by address.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// fakeModel starts an OpenAI-compatible fake and returns it with the
// model section of a config that points at it (its key in OPENAI_KEY).
func fakeModel(t *testing.T) (*openaifake.Server, string) {
	t.Helper()
	fake := openaifake.New(t)
	t.Setenv("OPENAI_KEY", openaifake.DefaultKey)
	return fake, "model:\n  provider: openai\n  base_url: " + fake.URL + "\n  model: gpt-fake\n  api_key: ${OPENAI_KEY}\n"
}

func writeConfig(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "agentwork.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startServe runs `agentwork serve` in-process until it says it is
// running (its NATS APIs answer from then on) and returns its stdout and a
// stop function that waits for a clean return.
func startServe(t *testing.T, cfg, dataDir string) (*syncBuffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve", "--config", cfg, "--data-dir", dataDir}, stdout, stderr) }()
	// Wait until the server wrote its credentials (it is then accepting
	// clients) or failed.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dataDir, "nats.json")); err == nil {
			break
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("serve exited early: %v\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("serve not ready after 20s\n%s", stderr.String())
		}
	}
	stderr.waitContains(t, "agentwork is running", 20*time.Second)
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(15 * time.Second):
				err = context.DeadlineExceeded
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stdout, stop
}

const testConfig = `
bus:
  listen: 127.0.0.1:0
http:
  listen: "off"
model:
  script:
    rules:
      - match: {source: task, prompt: "(?i)disk"}
        text: "Checked."
        notify: "Disk /var is 93% full"
      - match: {source: task}
        text: "Done: {{prompt}}"
`

func TestServeTaskSendWaitAndCleanShutdown(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	cfg := writeConfig(t, dir, testConfig)
	consoleOut, stop := startServe(t, cfg, dataDir)

	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := run(ctx, []string{"task", "send", "check the disk", "--deliver", "notify", "--wait", "--data-dir", dataDir}, &out, &errOut); err != nil {
		t.Fatalf("task send --wait: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "done") || !strings.Contains(out.String(), "Disk /var is 93% full") {
		t.Errorf("task send --wait printed %q, want a done outcome with the notify_user text", out.String())
	}

	// The console connector prints the notification once delivered.
	consoleOut.waitContains(t, "Disk /var is 93% full", 10*time.Second)

	// The same task notification with a dedup window: sent once, then held
	// back as a duplicate.
	for i, want := range []string{"done", "duplicate"} {
		out.Reset()
		if err := run(ctx, []string{"task", "send", "check the disk", "--name", "diskcheck", "--dedup-window", "1h", "--wait", "--data-dir", dataDir}, &out, &errOut); err != nil {
			t.Fatalf("task send %d with --dedup-window: %v\n%s", i, err, errOut.String())
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("task send %d with --dedup-window printed %q, want %s", i, out.String(), want)
		}
	}

	// A client reads only the bus section: a secret only the server uses
	// need not be set where the client runs.
	clientCfg := writeConfig(t, t.TempDir(), "bus:\n  prefix: agentwork\nmodel:\n  provider: openai\n  model: m\n  api_key: ${AGENTWORK_TEST_UNSET_KEY}\n")
	out.Reset()
	if err := run(ctx, []string{"task", "send", "hello", "--wait", "--config", clientCfg, "--data-dir", dataDir}, &out, &errOut); err != nil {
		t.Errorf("task send with a config whose server secrets are unset: %v\n%s", err, errOut.String())
	}

	// events tail takes lists, and shows the done run through them.
	tail := &syncBuffer{}
	tctx, tcancel := context.WithCancel(ctx)
	tailed := make(chan error, 1)
	go func() {
		tailed <- run(tctx, []string{"events", "tail", "--outcome", "skip,done", "--source", "heartbeat, task", "--since", "1h", "--data-dir", dataDir}, tail, &bytes.Buffer{})
	}()
	tail.waitContains(t, "Disk /var is 93% full", 10*time.Second)
	tcancel()
	if err := <-tailed; err != nil {
		t.Errorf("events tail stopped with %v, want nil on Ctrl-C", err)
	}
	if err := run(ctx, []string{"events", "tail", "--outcome", "done,bogus", "--data-dir", dataDir}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "delivered") {
		t.Errorf("events tail --outcome done,bogus = %v, want an error listing the outcomes", err)
	}

	// A second serve on the same data dir fails fast with a clear message.
	var e2 bytes.Buffer
	start := time.Now()
	err := run(ctx, []string{"serve", "--config", cfg, "--data-dir", dataDir}, &bytes.Buffer{}, &e2)
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second serve = %v, want a data dir in use error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("second serve took %s to fail, want fast", d)
	}

	begin := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("serve returned %v on shutdown, want nil", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("shutdown took %s, want a few seconds at most", d)
	}
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name, body string
		wantErr    string
	}{
		{"ok", testConfig, ""},
		{"unknown key", "model:\n  provider: script\n  modle: x\n", `:3: unknown key "model.modle"`},
		{"bad heartbeat hours", "heartbeat:\n  active_hours: {start: \"09:00\", end: \"25:00\"}\n", "heartbeat.active_hours.end"},
		{"bad cron", "cron:\n  jobs:\n    - id: a\n      schedule: \"61 * * * *\"\n      prompt: x\n", "cron.jobs[0].schedule"},
		{"unknown target", "heartbeat:\n  targets: [telegramm]\n", `heartbeat.targets[0]: "telegramm" is not a connector`},
		{"cron job target", "connectors:\n  ops: {type: console}\ncron:\n  jobs:\n    - id: a\n      schedule: \"@daily\"\n      prompt: x\n      targets: [console]\n", `cron.jobs[0].targets[0]: "console" is not a connector`},
		{"wildcard webhook source", "webhook:\n  tokens:\n    - name: ci\n      token: 0123456789abcdef0123\n      sources: [\"deploy-*\"]\n", "webhook.tokens[0].sources[0]"},
		{"bus on the network", "bus:\n  listen: 0.0.0.0:4222\n", "bus.allow_remote"},
		{"bad one-shot time", "cron:\n  jobs:\n    - id: a\n      at: not-a-time\n      prompt: x\n", `agentwork.yaml:4: cron.jobs[0].at: "not-a-time" is not a time in RFC 3339`},
		{"bad duration", "heartbeat:\n  every: 5 minutes\n", `agentwork.yaml:2: heartbeat.every: "5 minutes" is not a duration`},
		// What serve refuses, config check refuses too.
		{"anthropic temperature", "model:\n  provider: anthropic\n  model: claude-x\n  temperature: 1.5\n", "model.temperature: 1.5 is out of range for Anthropic"},
		{"header name with a space", "model:\n  provider: openai\n  model: m\n  headers: {\"X Team\": a}\n", `model.headers: "X Team" is not a header name`},
		{"unknown connector type", "connectors:\n  ops:\n    type: pigeon\n", `agentwork.yaml:3: connectors.ops.type: "pigeon" is not a connector type of this build (known: ` + strings.Join(connectorTypes().Names(), ", ") + ")"},
		{"unknown connector key", "connectors:\n  alerts:\n    type: nats\n    subject: a.b\n    format: json\n", `agentwork.yaml:5: unknown key "connectors.alerts.format" (known: jetstream, subject;`},
		{"bad connector value", "connectors:\n  alerts: {type: nats, subject: \"a.>\"}\n", "connectors.alerts.subject:"},
		{"unknown model", "cron:\n  jobs:\n    - id: a\n      schedule: \"@daily\"\n      prompt: x\n      model: strong\n", `cron.jobs[0].model: "strong": no such model (models: default)`},
		{"MCP server named like built-in tools", "mcp:\n  servers:\n    memory: {command: npx, args: [-y, \"@modelcontextprotocol/server-memory\"]}\nheartbeat:\n  tools: [memory_*]\n",
			`mcp.servers.memory: "memory" is taken by the built-in tools memory_read, memory_append, memory_replace, memory_list: rename the server, e.g. to memory-mcp`},
		{"unset secret", "model:\n  provider: openai\n  model: m\n  api_key: ${AGENTWORK_TEST_UNSET_KEY}\n", "AGENTWORK_TEST_UNSET_KEY is not set"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sub := filepath.Join(dir, string(rune('a'+i)))
			os.MkdirAll(sub, 0o700)
			p := writeConfig(t, sub, tt.body)
			var out, errOut bytes.Buffer
			err := run(t.Context(), []string{"config", "check", "--config", p}, &out, &errOut)
			if tt.wantErr == "" {
				if err != nil || !strings.Contains(out.String(), "ok") {
					t.Fatalf("config check = %v, %q; want ok", err, out.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("config check = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestServeRejectsBadConfigBeforeStarting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := writeConfig(t, dir, "bus:\n  data_dirr: x\n")
	err := run(t.Context(), []string{"serve", "--config", p, "--data-dir", filepath.Join(dir, "d")}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "agentwork.yaml:2") || !strings.Contains(err.Error(), "bus.data_dirr") {
		t.Fatalf("serve with a bad key = %v, want file:line and the key", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "d")); err == nil {
		t.Error("serve created its data dir despite the bad config")
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(t.Context(), []string{"bogus"}, &out, &out); err == nil {
		t.Fatal("unknown command: nil error")
	}
	if err := run(t.Context(), []string{"version"}, &out, &out); err != nil || !strings.Contains(out.String(), "agentwork") {
		t.Fatalf("version = %v, %q", err, out.String())
	}
	raw := &bytes.Buffer{}
	if err := run(t.Context(), []string{"config", "schema"}, raw, raw); err != nil || !strings.Contains(raw.String(), `"heartbeat"`) || !strings.Contains(raw.String(), `"jetstream"`) {
		t.Fatalf("config schema = %v", err)
	}
}

// The CLI's admin commands reach the heartbeat's and cron's APIs on NATS,
// as serve wires them from its list of triggers, and print their
// histories.
func TestAdminCommands(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	_, stop := startServe(t, writeConfig(t, dir, testConfig), dataDir)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cli := cliOf(ctx, t, dataDir)
	if out := cli("heartbeat", "status"); !strings.Contains(out, "default") || !strings.Contains(out, "HEARTBEAT.md") {
		t.Errorf("heartbeat status printed %q, want the default heartbeat and its checklist", out)
	}
	// No checklist: the woken heartbeat skips without calling the model.
	if out := cli("heartbeat", "wake", "--wait"); !strings.Contains(out, "skip") {
		t.Errorf("heartbeat wake --wait printed %q, want a skip", out)
	}
	if out := cli("heartbeat", "history"); !strings.Contains(out, "wake") || !strings.Contains(out, "no-checklist") {
		t.Errorf("heartbeat history printed %q, want the woken run skipped for no-checklist", out)
	}
	var hist struct {
		Runs []agentwork.Record `json:"runs"`
	}
	if err := json.Unmarshal([]byte(cli("heartbeat", "history", "--json")), &hist); err != nil || len(hist.Runs) != 1 ||
		hist.Runs[0].ID == "" || hist.Runs[0].Outcome != "skip" || !hist.Runs[0].Result.Manual || hist.Runs[0].Result.Reason != "no-checklist" {
		t.Errorf("heartbeat history --json = %+v, %v; want the one manual skip", hist, err)
	}

	if out := cli("cron", "add", "report", "--schedule", "@daily", "--prompt", "sum up the day"); !strings.Contains(out, "added job report") {
		t.Errorf("cron add printed %q", out)
	}
	if out := cli("cron", "list"); !strings.Contains(out, "report") {
		t.Errorf("cron list printed %q, want the job", out)
	}
	if out := cli("cron", "history", "report"); !strings.Contains(out, "no runs yet") {
		t.Errorf("cron history printed %q, want no runs yet", out)
	}
	err := run(ctx, []string{"cron", "show", "nope", "--data-dir", dataDir}, &bytes.Buffer{}, &bytes.Buffer{})
	if !errors.Is(err, cron.ErrNotFound) || !strings.Contains(err.Error(), "cron list") {
		t.Errorf("cron show nope = %v, want not found with a hint", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// cliOf runs the CLI against the server of dataDir: cli(args...) returns
// what it printed, and fails the test on an error.
func cliOf(ctx context.Context, t *testing.T, dataDir string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := run(ctx, append(args, "--data-dir", dataDir), &out, &errOut); err != nil {
			t.Fatalf("agentwork %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
		}
		return out.String()
	}
}

// /readyz answers 200 only once the runner takes requests (and the cron
// scheduler has loaded its jobs).
func TestReadyzCoversTheRunner(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	addr := freeAddr(t)
	cfg := writeConfig(t, dir, strings.Replace(testConfig, `http:
  listen: "off"`, "http:\n  listen: "+addr, 1))
	_, stop := startServe(t, cfg, dataDir)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz = %d %s, want 200 once serving", resp.StatusCode, body)
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("/readyz: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestRunDetail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   agentwork.Result
		want string
	}{
		{agentwork.Result{Outcome: "skip", Reason: "missed", Detail: "down"}, "missed: down"},
		{agentwork.Result{Outcome: "skip", Reason: "ack"}, "ack"},
		{agentwork.Result{Outcome: "error", Class: "permanent", Error: "401"}, "permanent: 401"},
		{agentwork.Result{Outcome: "done", Text: "disk full", Reply: "checked"}, "sent: disk full"},
		{agentwork.Result{Outcome: "done", Reply: "checked"}, "checked"},
	}
	for _, tt := range tests {
		if got := runDetail(tt.in); got != tt.want {
			t.Errorf("runDetail(%+v) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := oneLine("a\n  b "+strings.Repeat("x", 10), 5); got != "a b x…" {
		t.Errorf("oneLine = %q, want %q", got, "a b x…")
	}
}
