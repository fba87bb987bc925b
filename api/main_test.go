package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	adminToken = "admin-token-0123456789abcdef"
	taskToken  = "task-token-0123456789abcdef"
	waitFor    = 10 * time.Second
)

type fixture struct {
	b   *bus.Bus
	s   *api.Server
	url string
	c   *http.Client
}

func newFixture(t *testing.T, mod func(*api.Config, *api.Deps)) *fixture {
	t.Helper()
	b := bustest.New(t)
	cfg := api.Config{AdminToken: adminToken, KeepAlive: time.Hour}
	deps := api.Deps{Bus: b, PublicRoutes: []api.PublicRouter{tasks{}}}
	if mod != nil {
		mod(&cfg, &deps)
	}
	s := api.New(cfg, deps, api.WithVersion("v1.2.3-test"))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &fixture{b: b, s: s, url: srv.URL, c: srv.Client()}
}

// tasks is a PublicRouter as the task webhook is: it takes its own token,
// or the admin token, and says which it saw.
type tasks struct{}

func (tasks) PublicRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/tasks", func(w http.ResponseWriter, r *http.Request) {
		as := ""
		switch {
		case api.IsAdmin(r):
			as = "admin"
		case r.Header.Get("Authorization") == "Bearer "+taskToken:
			as = "ci"
		default:
			problem.Unauthorized(w, "agentwork", "send a task token")
			return
		}
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"as":%q}`, as)
	})
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (f *fixture) do(t *testing.T, method, path, token, body string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, f.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := f.c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

func (r reply) problem(t *testing.T) problem.Details {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("Content-Type = %q, want %s; body %s", ct, problem.ContentType, r.body)
	}
	var d problem.Details
	if err := json.Unmarshal(r.body, &d); err != nil || d.Status != r.status {
		t.Fatalf("problem %s: status %d, %v", r.body, r.status, err)
	}
	return d
}

// emit publishes a run event as the runner does and returns it.
func emit(t *testing.T, b *bus.Bus, source, outcome, name string) bus.Event {
	t.Helper()
	ev, err := bus.NewEvent("agentwork/runner", bus.TypeOf(source, outcome), name, time.Now(),
		agentwork.Result{Source: source, Name: name, Outcome: outcome})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(t.Context(), b.Subjects.Event(source, outcome), ev, ""); err != nil {
		t.Fatal(err)
	}
	return ev
}

// sse reads Server-Sent Events from a response body.
type sse struct {
	r    *bufio.Reader
	resp *http.Response
}

type sseEvent struct {
	id, event, data string
	comment         string
}

// openSSE connects to /v1/events and waits for the opening comment, after
// which the server's consumer exists.
func (f *fixture) openSSE(t *testing.T, query string, hdr ...string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url+"/v1/events"+query, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := f.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /v1/events%s = %d %s %s, want 200 text/event-stream", query, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	s := &sse{r: bufio.NewReader(resp.Body), resp: resp}
	if first := s.next(t); first.comment == "" {
		t.Fatalf("first SSE item = %+v, want the opening comment", first)
	}
	return s
}

// next reads one event or comment, failing after waitFor.
func (s *sse) next(t *testing.T) sseEvent {
	t.Helper()
	type result struct {
		ev  sseEvent
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var ev sseEvent
		for {
			line, err := s.r.ReadString('\n')
			if err != nil {
				ch <- result{ev, err}
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				ch <- result{ev, nil}
				return
			case strings.HasPrefix(line, ":"):
				ev.comment = strings.TrimSpace(line[1:])
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data += line[6:]
			}
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("reading the event stream: %v", r.err)
		}
		return r.ev
	case <-time.After(waitFor):
		s.resp.Body.Close() // ends the reader goroutine
		<-ch
		t.Fatalf("no event within %s", waitFor)
		return sseEvent{}
	}
}

// runServer runs s until the test ends; stop cancels and waits for Run.
func runServer(t *testing.T, s *api.Server) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
			case <-time.After(waitFor):
				t.Errorf("Run did not return within %s of cancel", waitFor)
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	select {
	case <-s.Started():
	case err := <-errc:
		t.Fatalf("Run = %v before listening", err)
	case <-time.After(waitFor):
		t.Fatal("Run did not start listening")
	}
	return stop
}

// openSSEWith is openSSE with another token.
func (f *fixture) openSSEWith(t *testing.T, token string) *sse {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, f.url+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := f.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/events = %d, want 200", resp.StatusCode)
	}
	s := &sse{r: bufio.NewReader(resp.Body), resp: resp}
	if first := s.next(t); first.comment == "" {
		t.Fatalf("first SSE item = %+v, want the opening comment", first)
	}
	return s
}
