package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/openai/openaifake"
	"github.com/agentwork/agentwork/tools"
)

// mcpServerEnv, set in the test binary's environment, makes it a stdio MCP
// server with a filesystem's tools (see TestMain and runMCPServer).
const mcpServerEnv = "AGENTWORK_TEST_MCP_SERVER"

type pathArgs struct {
	Path string `json:"path"`
}

type writeArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

type appendArgs struct {
	Path string `json:"path"`
	Line string `json:"line"`
}

// runMCPServer is the test binary as a stdio MCP server, built with the
// SDK agentwork uses: read_text_file, write_file and append_line, on paths
// relative to its working directory.
func runMCPServer() int {
	s := sdk.NewServer(&sdk.Implementation{Name: "fs-test", Version: "1"}, nil)
	text := func(s string) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
	}
	sdk.AddTool(s, &sdk.Tool{Name: "read_text_file", Description: "Read a text file."},
		func(_ context.Context, _ *sdk.CallToolRequest, a pathArgs) (*sdk.CallToolResult, any, error) {
			b, err := os.ReadFile(a.Path)
			if err != nil {
				return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: err.Error()}}}, nil, nil
			}
			return text(string(b)), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "write_file", Description: "Write a file."},
		func(_ context.Context, _ *sdk.CallToolRequest, a writeArgs) (*sdk.CallToolResult, any, error) {
			if err := os.WriteFile(a.Path, []byte(a.Content), 0o600); err != nil {
				return nil, nil, err
			}
			return text("written"), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "append_line", Description: "Append a line to a file."},
		func(_ context.Context, _ *sdk.CallToolRequest, a appendArgs) (*sdk.CallToolResult, any, error) {
			f, err := os.OpenFile(a.Path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				return nil, nil, err
			}
			defer f.Close()
			if _, err := f.WriteString(a.Line + "\n"); err != nil {
				return nil, nil, err
			}
			return text("appended"), nil, f.Sync()
		})
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "test mcp server:", err)
		return 1
	}
	return 0
}

// offered returns the names of the tools a model request offered.
func offered(r openaifake.Request) []string {
	var out []string
	for _, t := range r.Conversation.Tools {
		out = append(out, t.Name)
	}
	slices.Sort(out)
	return out
}

// wantOffered checks a request offers exactly names.
func wantOffered(names ...string) func(openaifake.Request) error {
	return func(r openaifake.Request) error {
		if got := offered(r); !slices.Equal(got, names) {
			return fmt.Errorf("the model was offered %v, want %v", got, names)
		}
		return nil
	}
}

// lastToolResult checks the request's last message is a tool result that
// contains want.
func lastToolResult(want string) func(openaifake.Request) error {
	return func(r openaifake.Request) error {
		msgs := r.Conversation.Messages
		last := msgs[len(msgs)-1]
		if last.Role != model.RoleTool || !strings.Contains(last.Content, want) {
			return fmt.Errorf("last message = %+v, want a tool result containing %q", last, want)
		}
		return nil
	}
}

// runEvent returns the run event caused by request id, from the events
// stream: it follows the stream until that event is stored.
func runEvent(t *testing.T, ctx context.Context, b *bus.Bus, source, id string) (bus.Event, agentwork.Result) {
	t.Helper()
	oc, err := b.JetStream().OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{b.Subjects.Event(source, "*")}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		m, err := oc.Next(jetstream.FetchMaxWait(time.Until(deadline)))
		if err != nil {
			break
		}
		ev, err := bus.DecodeEvent(m.Data())
		if err == nil && ev.CausationID == id {
			var r agentwork.Result
			if err := ev.DecodeData(&r); err != nil {
				t.Fatal(err)
			}
			return ev, r
		}
	}
	t.Fatalf("no %s event for request %s", source, id)
	return bus.Event{}, agentwork.Result{}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

func callNames(r agentwork.Result) []string {
	var out []string
	for _, c := range r.ToolCalls {
		out = append(out, c.Name+":"+c.Outcome)
	}
	return out
}

// TestHeartbeatReadsAFileThroughMCP is issue 11's promise end to end, with
// the real binary, a stdio MCP server the test builds and the
// OpenAI-compatible fake: a heartbeat whose checklist asks to read a file
// calls fs__read_text_file, the content comes back to the model, the
// notify_user text built from it reaches the console, and the done event
// lists the calls. A task whose scope lacks the file tools is not offered
// them, and a forced call to one is refused without running. A server
// that cannot start stops nothing. The CLI and /v1/tools show and call the
// tools; /metrics counts the calls; no secret reaches an event.
func TestHeartbeatReadsAFileThroughMCP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	const (
		fsToken = "fs-token-SECRET-0123456789"
		report  = "nightly backup FAILED on host-7 (token " + fsToken + ")"
		notice  = "The nightly backup failed on host-7."
	)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fake, modelYAML := fakeModel(t)
	t.Setenv("FS_TOKEN", fsToken)
	dir := t.TempDir()
	files := filepath.Join(dir, "files")
	if err := os.MkdirAll(files, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(files, "report.txt"), []byte(report), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "HEARTBEAT.md"), []byte("- Read report.txt and tell me if the backup failed.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	httpAddr := freeAddr(t)
	srv := &crashServer{t: t, dataDir: filepath.Join(dir, "data")}
	srv.args = []string{"serve", "--config", writeConfig(t, dir, fmt.Sprintf(`
bus:
  listen: 127.0.0.1:0
http:
  listen: %s
runner:
  max_attempts: 1
heartbeat:
  tools: [fs__read_text_file]
tasks:
  lookup:
    tools: [notify_user]
mcp:
  servers:
    fs:
      command: %s
      env:
        %s: serve
        FS_TOKEN: ${FS_TOKEN}
      cwd: files
    broken:
      command: %s
`, httpAddr, exe, mcpServerEnv, filepath.Join(dir, "no-such-server"))+modelYAML), "--data-dir", srv.dataDir}
	srv.child = startChild(t, srv.dataDir, srv.args...)
	srv.stderr.waitContains(t, "agentwork is running", 30*time.Second)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	b := srv.dial(ctx)
	defer b.Close()
	cli := func(args ...string) (string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := run(ctx, append(args, "--data-dir", srv.dataDir), &out, &errOut)
		return out.String() + errOut.String(), err
	}

	// The operator's view: the heartbeat's tools, one server up and the
	// one that cannot start down (serve runs all the same); a call by hand.
	out, err := cli("tools", "list", "--source", "heartbeat")
	if err != nil || !strings.Contains(out, "fs__read_text_file") || strings.Contains(out, "fs__write_file") ||
		!strings.Contains(out, "heartbeat.tools") || !regexpMatch(`fs\s+stdio\s+up`, out) || !regexpMatch(`broken\s+stdio\s+down.*no-such-server`, out) {
		t.Fatalf("tools list --source heartbeat = %v:\n%s\nwant fs__read_text_file only, from heartbeat.tools, fs up and broken down", err, out)
	}
	out, err = cli("tools", "call", "fs__read_text_file", "--args", `{"path":"report.txt"}`)
	if err != nil || !strings.Contains(out, "nightly backup FAILED on host-7 (token [redacted])") || !strings.Contains(out, "fs__read_text_file: ok in") {
		t.Fatalf("tools call fs__read_text_file = %v:\n%s\nwant the file's content, the token redacted", err, out)
	}

	// The heartbeat: read the file, notify from its content.
	fake.Enqueue(
		openaifake.Response{Check: wantOffered("fs__read_text_file", "notify_user"),
			Reply: model.Reply{ToolCalls: []model.ToolCall{{ID: "r1", Name: "fs__read_text_file", Arguments: `{"path":"report.txt"}`}}}},
		openaifake.Response{Check: lastToolResult("nightly backup FAILED on host-7 (token [redacted])"),
			Reply: model.Reply{ToolCalls: []model.ToolCall{{ID: "n1", Name: "notify_user", Arguments: fmt.Sprintf(`{"text":%q,"urgency":"important"}`, notice)}}}},
		openaifake.Text("Notified the user."),
	)
	out, err = cli("heartbeat", "wake", "--json")
	var woke struct{ ID string }
	if err != nil || json.Unmarshal([]byte(out), &woke) != nil {
		t.Fatalf("heartbeat wake: %v\n%s", err, out)
	}
	_, hb := runEvent(t, ctx, b, bus.SourceHeartbeat, woke.ID)
	srv.stdout.waitContains(t, notice, 20*time.Second)
	if hb.Outcome != bus.OutcomeDone || hb.Text != notice {
		t.Fatalf("heartbeat event = %s %q (%s), want done with the notice", hb.Outcome, hb.Text, hb.Error)
	}
	if got := callNames(hb); !slices.Equal(got, []string{"fs__read_text_file:ok", "notify_user:ok"}) {
		t.Errorf("the done event lists %v, want fs__read_text_file:ok, notify_user:ok", got)
	}
	// The server's env value is cut out before the model reads the result,
	// so the size on record is that of the redacted text.
	const redacted = "nightly backup FAILED on host-7 (token [redacted])"
	if read := hb.ToolCalls[0]; read.Result != redacted || read.ResultBytes != len(redacted) || read.DurationMS <= 0 {
		t.Errorf("fs__read_text_file on record = %+v, want the content redacted, its size and a duration", read)
	}

	// A task whose scope lacks the file tools: not offered, and a forced
	// call is refused without running.
	fake.Enqueue(
		openaifake.Response{Check: wantOffered("notify_user"),
			Reply: model.Reply{ToolCalls: []model.ToolCall{{ID: "w1", Name: "fs__write_file", Arguments: `{"path":"pwned.txt","content":"x"}`}}}},
		openaifake.Response{Check: lastToolResult(`"fs__write_file" is not a tool of this run`), Reply: model.Reply{Text: "I cannot write files here."}},
	)
	pub, err := agentwork.Publish(ctx, b, agentwork.Request{Source: bus.SourceTask, Name: "lookup", Prompt: "write pwned.txt", Deliver: agentwork.DeliverReply}, agentwork.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, task := runEvent(t, ctx, b, bus.SourceTask, pub.ID)
	if got := callNames(task); !slices.Equal(got, []string{"fs__write_file:refused"}) {
		t.Errorf("the task's event lists %v (%s %s), want fs__write_file:refused", got, task.Outcome, task.Error)
	}
	if _, err := os.Stat(filepath.Join(files, "pwned.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pwned.txt: %v; the refused call ran", err)
	}
	if n := fake.Pending(); n != 0 {
		t.Errorf("%d scripted model replies unused", n)
	}

	// The same over HTTP, and the metrics.
	token, err := os.ReadFile(filepath.Join(srv.dataDir, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	get := func(method, path, body string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+httpAddr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s = %d %s", method, path, resp.StatusCode, b)
		}
		return string(b)
	}
	var l agentwork.ToolList
	if err := json.Unmarshal([]byte(get("GET", "/v1/tools?source=task&name=lookup", "")), &l); err != nil || len(l.Tools) != 1 || l.Tools[0].Name != tools.NotifyName {
		t.Errorf("GET /v1/tools?source=task&name=lookup = %+v, %v; want notify_user alone", l, err)
	}
	var c tools.Call
	if err := json.Unmarshal([]byte(get("POST", "/v1/tools/fs__read_text_file/call", `{"path":"missing.txt"}`)), &c); err != nil || c.Outcome != tools.OutcomeError {
		t.Errorf("POST /v1/tools/fs__read_text_file/call (missing file) = %+v, %v; want an error outcome", c, err)
	}
	if ready := get("GET", "/readyz", ""); !strings.Contains(ready, `"mcp.broken":"down"`) || !strings.Contains(ready, `"mcp.fs":"up"`) {
		t.Errorf("/readyz = %s, want ready, with fs up and broken down in its details", ready)
	}
	metrics := get("GET", "/metrics", "")
	for _, want := range []string{
		`agentwork_tool_calls_total{tool="fs__read_text_file",outcome="ok"} 1`,
		`agentwork_tool_calls_total{tool="fs__write_file",outcome="refused"} 1`,
		`agentwork_tool_call_duration_seconds_count{tool="fs__read_text_file"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// No event holds the server's secret.
	oc, err := b.JetStream().OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := oc.FetchNoWait(1000)
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if bytes.Contains(m.Data(), []byte(fsToken)) {
			t.Errorf("an event on %s holds the MCP server's secret: %s", m.Subject(), m.Data())
		}
	}
}
