package connectortest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hook is a reference HTTP connector of the kind the chat connectors are:
// it POSTs {"text","urgency","id"} to <base>/bot<token>/send (the token in
// the path, as Telegram has it), splits texts longer than
// maxText at line breaks, and classifies the API's errors. broken selects a
// defect the suite must catch.
type hook struct {
	url     string
	client  *http.Client
	maxText int
	broken  string
}

var _ connectors.Connector = (*hook)(nil)

func (h *hook) Send(ctx context.Context, n connectors.Notification) (connectors.Receipt, error) {
	if h.broken == "truncates" && len([]rune(n.Text)) > h.maxText {
		n.Text = string([]rune(n.Text)[:h.maxText])
	}
	parts := connectors.Split(n.Text, h.maxText, connectors.Runes)
	if h.broken == "restarts-split" {
		n.SentParts = 0
	}
	rec := connectors.Receipt{Parts: min(n.SentParts, len(parts))}
	chat := n.Destination()
	if chat == "" || h.broken == "ignores-destination" {
		chat = "home"
	}
	for _, part := range parts[rec.Parts:] {
		urgency := n.Urgency
		if h.broken == "drops-urgency" {
			urgency = ""
		}
		id, err := h.post(ctx, map[string]string{"text": part, "urgency": urgency, "id": n.ID, "chat": chat})
		if err != nil {
			return rec, err
		}
		rec.Parts++
		rec.MessageIDs = append(rec.MessageIDs, id)
	}
	return rec, nil
}

// post sends one message and returns the id the API gave it.
func (h *hook) post(ctx context.Context, body map[string]string) (string, error) {
	raw, _ := json.Marshal(body)
	if h.broken == "ignores-ctx" {
		ctx = context.Background()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(raw))
	if err != nil {
		return "", connectors.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		if h.broken == "leaks-secret" {
			return "", fmt.Errorf("hook: %w", err) // *url.Error quotes the URL, token and all
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("hook: %w", ctx.Err())
		}
		// *url.Error quotes the URL, whose path holds the token.
		return "", fmt.Errorf("hook: POST %s: %w", redacted, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	return resp.Header.Get("Message-Id"), h.classify(resp)
}

func (h *hook) classify(resp *http.Response) error {
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode == http.StatusTooManyRequests:
		secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		err := fmt.Errorf("hook: %s", resp.Status)
		switch h.broken {
		case "ignores-retry-after":
			return err
		case "rate-limit-spends-attempt":
			return connectors.Retry(err, time.Duration(secs)*time.Second)
		}
		return connectors.RateLimit(err, time.Duration(secs)*time.Second)
	case resp.StatusCode >= 500:
		if h.broken == "5xx-permanent" {
			return connectors.Permanent(fmt.Errorf("hook: %s", resp.Status))
		}
		return fmt.Errorf("hook: %s", resp.Status)
	default:
		if h.broken == "4xx-retryable" {
			return connectors.Retry(fmt.Errorf("hook: %s", resp.Status), 0)
		}
		return connectors.Permanent(fmt.Errorf("hook: %s", resp.Status))
	}
}

// chatAPI is the httptest fake of the chat API behind hook.
type chatAPI struct {
	connectortest.Recorder
	*connectortest.Script[connectortest.Fault]
	mu  sync.Mutex
	seq int
}

func (a *chatAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/bot"+token+"/send" {
		http.Error(w, `{"error":"not_found"}`, http.StatusNotFound)
		return
	}
	a.mu.Lock()
	a.seq++
	id := strconv.Itoa(a.seq)
	a.mu.Unlock()
	if f, ok := a.Next(); ok {
		switch f.Kind {
		case connectortest.Unavailable:
			http.Error(w, `{"error":"rollup_error"}`, http.StatusInternalServerError)
		case connectortest.RateLimited:
			w.Header().Set("Retry-After", strconv.Itoa(int(f.RetryAfter/time.Second)))
			http.Error(w, `{"error":"ratelimited"}`, http.StatusTooManyRequests)
		case connectortest.Unauthorized:
			http.Error(w, `{"error":"invalid_auth"}`, http.StatusUnauthorized)
		case connectortest.BadRequest:
			http.Error(w, `{"error":"invalid_payload"}`, http.StatusBadRequest)
		case connectortest.Stall:
			// Read the body first: only then does the server notice the
			// client hanging up and cancel r.Context().
			_, _ = io.Copy(io.Discard, r.Body)
			a.Stall(r.Context())
		}
		return
	}
	var body struct{ Text, Urgency, ID, Chat string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"error":"invalid_payload"}`, http.StatusBadRequest)
		return
	}
	a.Add(connectortest.Message{Text: body.Text, Urgency: body.Urgency, ID: body.ID, Destination: body.Chat})
	w.Header().Set("Message-Id", id)
	w.WriteHeader(http.StatusNoContent)
}

// token is the reference connector's credential.
const token = "123456:AAH-conformance-SECRET"

// redacted is how the reference connector names its endpoint in errors.
const redacted = "<base>/bot<redacted>/send"

func hookHarness(broken string) connectortest.Harness {
	const maxText = 1000
	return connectortest.Harness{
		New: func(t *testing.T) (connectors.Connector, connectortest.Observer) {
			api := &chatAPI{Script: connectortest.NewScript(func(f connectortest.Fault) connectortest.Fault { return f })}
			srv := httptest.NewServer(api)
			t.Cleanup(srv.Close)
			t.Cleanup(api.Release) // runs first: releases stalled requests
			client := &http.Client{Timeout: 30 * time.Second}
			if broken == "ignores-ctx" {
				client.Timeout = 4 * time.Second
			}
			t.Cleanup(client.CloseIdleConnections)
			return &hook{url: srv.URL + "/bot" + token + "/send", client: client, maxText: maxText, broken: broken}, api
		},
		Secret: token,
		Features: connectortest.Features{
			Concurrent: true, MaxText: maxText, KeepsID: true, MessageIDs: true, Destination: "team-b",
			Outages: true, RateLimits: true, AuthErrors: true, BadRequests: true, Stalls: true,
		},
	}
}

// TestSuite runs the suite against the reference connector with every
// feature on, so that every case runs somewhere.
func TestSuite(t *testing.T) {
	t.Parallel()
	connectortest.Run(t, hookHarness(""))
}

// TestSuiteCatchesDefects runs the suite against defective connectors in a
// child process and expects the case that covers each defect to fail.
func TestSuiteCatchesDefects(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs child processes")
	}
	for _, tc := range []struct{ broken, failing, says string }{
		{"drops-urgency", "Urgency", `urgency "important" arrived as`},
		{"truncates", "TextIntact", "white space folded"},
		{"ignores-retry-after", "RateLimited", "want a *connectors.RetryableError"},
		{"rate-limit-spends-attempt", "RateLimited", "want RateLimited set"},
		{"4xx-retryable", "Unauthorized", "want a *connectors.PermanentError"},
		{"4xx-retryable", "BadRequest", "want a *connectors.PermanentError"},
		{"5xx-permanent", "Outage", "a permanent error; want a retryable one"},
		{"ignores-ctx", "StallDeadline", "after ctx was done, want <"},
		{"leaks-secret", "StallCancelled", "contains a secret of the connector"},
		{"restarts-split", "SplitResumed", "want the"},
		{"ignores-destination", "Destination", "want \"team-b\""},
	} {
		t.Run(tc.broken+"/"+tc.failing, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBrokenConnector$/^"+tc.failing+"$", "-test.v")
			cmd.Env = append(os.Environ(), "CONNECTORTEST_BROKEN="+tc.broken)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("suite against a connector that %s: err = %v, want a failing run; output:\n%s", tc.broken, err, out)
			}
			for _, want := range []string{"--- FAIL: TestBrokenConnector/" + tc.failing, tc.says} {
				if !strings.Contains(string(out), want) {
					t.Fatalf("suite against a connector that %s (exit %v): output lacks %q:\n%s", tc.broken, err, want, out)
				}
			}
		})
	}
}

// TestBrokenConnector is run by TestSuiteCatchesDefects in a child process.
func TestBrokenConnector(t *testing.T) {
	broken := os.Getenv("CONNECTORTEST_BROKEN")
	if broken == "" {
		t.Skip("run by TestSuiteCatchesDefects")
	}
	connectortest.Run(t, hookHarness(broken))
}

func TestRecorder(t *testing.T) {
	t.Parallel()
	var r connectortest.Recorder
	got, err := r.Messages(t.Context(), 0)
	if err != nil || len(got) != 0 {
		t.Fatalf("Messages(0) on an empty recorder = %v, %v; want none, nil", got, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := r.Messages(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Messages(1) with nothing recorded = %v, want DeadlineExceeded", err)
	}
	done := make(chan []connectortest.Message)
	go func() {
		msgs, _ := r.Messages(t.Context(), 2)
		done <- msgs
	}()
	r.Add(connectortest.Message{Text: "a"})
	r.Add(connectortest.Message{Text: "b"})
	select {
	case msgs := <-done:
		if len(msgs) != 2 || msgs[0].Text != "a" || msgs[1].Text != "b" {
			t.Fatalf("Messages(2) = %v, want a, b", msgs)
		}
	case <-time.After(connectortest.Wait):
		t.Fatal("Messages(2) did not return after two Adds")
	}
}
