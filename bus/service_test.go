package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

var errMissing = &bus.ServiceError{Status: 404, Code: "not_found", Detail: "not found"}

type echoIn struct {
	Name string `json:"name"`
}

// echoService answers echo for requests naming it (or naming nobody), and
// fails on demand.
func echoService(name string) bus.Service {
	return bus.Service{
		Name: "echo", Description: "test service", QueueGroup: "agentwork-echo-" + name,
		Endpoints: []bus.Endpoint{
			{Verb: "echo", Handle: func(_ context.Context, body []byte) (any, error) {
				var in echoIn
				if len(body) > 0 {
					if err := json.Unmarshal(body, &in); err != nil {
						return nil, &bus.ServiceError{Status: 400, Code: "bad_request", Detail: err.Error()}
					}
				}
				if in.Name != "" && in.Name != name {
					return nil, bus.ErrNoReply
				}
				return map[string]string{"served_by": name}, nil
			}},
			{Verb: "missing", Handle: func(context.Context, []byte) (any, error) {
				return nil, fmt.Errorf("lookup: %w", &bus.ServiceError{Status: 404, Code: "not_found", Detail: "no such thing\n(list them first)"})
			}},
			{Verb: "broken", Handle: func(context.Context, []byte) (any, error) {
				return nil, errors.New("disk on fire")
			}},
		},
	}
}

func TestServiceCall(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	stop, err := b.StartService(echoService("a"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	c := bustest.Client(t, b) // a client elsewhere, as the CLI is
	ctx := t.Context()

	var out map[string]string
	if err := c.Call(ctx, "echo", "echo", echoIn{}, &out); err != nil || out["served_by"] != "a" {
		t.Fatalf("Call(echo) = %v, %v; want served by a", out, err)
	}
	err = c.Call(ctx, "echo", "missing", nil, &out)
	var se *bus.ServiceError
	if !errors.Is(err, errMissing) || !errors.As(err, &se) || se.Status != 404 || se.Detail != "no such thing\n(list them first)" {
		t.Fatalf("Call(missing) = %#v, want the handler's 404 not_found with its whole detail", err)
	}
	if err := c.Call(ctx, "echo", "broken", nil, nil); !errors.As(err, &se) || se.Status != 500 || se.Code != "internal" || se.Detail != "disk on fire" {
		t.Fatalf("Call(broken) = %#v, want a 500 internal error with the text", err)
	}
	if err := c.Call(ctx, "echo", "echo", json.RawMessage(`[1]`), nil); !errors.As(err, &se) || se.Status != 400 {
		t.Fatalf("Call(echo, not an object) = %v, want 400", err)
	}

	// A plain NATS client sees the error in the micro headers.
	m, err := c.Conn().RequestWithContext(ctx, b.Subjects.Service("echo", "missing"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, desc := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader); code != "404" || desc != "no such thing (list them first)" {
		t.Errorf("error headers = %q %q, want 404 and the detail on one line", code, desc)
	}

	// Discovery comes with micro: the service lists its subjects.
	ctl, err := micro.ControlSubject(micro.InfoVerb, "agentwork-echo", "")
	if err != nil {
		t.Fatal(err)
	}
	m, err = c.Conn().RequestWithContext(ctx, ctl, nil)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(m.Data, &info); err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, ep := range info.Endpoints {
		subjects = append(subjects, ep.Subject)
	}
	if got := strings.Join(subjects, " "); got != "agentwork.api.echo.echo agentwork.api.echo.missing agentwork.api.echo.broken" {
		t.Errorf("micro info subjects = %s", got)
	}

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "echo", "echo", nil, nil); !errors.Is(err, bus.ErrNoService) {
		t.Errorf("Call after stop = %v, want ErrNoService", err)
	}
}

// Instances serving different names in their own queue groups: only the
// one named answers.
func TestServiceNoReply(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	for _, name := range []string{"a", "b"} {
		stop, err := bustest.Client(t, b).StartService(echoService(name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = stop() })
	}
	for _, name := range []string{"a", "b", "b", "a"} {
		var out map[string]string
		if err := b.Call(t.Context(), "echo", "echo", echoIn{Name: name}, &out); err != nil || out["served_by"] != name {
			t.Errorf("Call(%s) = %v, %v; want served by %s", name, out, err, name)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := b.Call(ctx, "echo", "echo", echoIn{Name: "c"}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Call(c) = %v, want no answer until the deadline", err)
	}
}

// Serve answers until its context ends, then returns nil and answers no more.
func TestServe(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.Serve(ctx, echoService("a")) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		err := b.Call(t.Context(), "echo", "echo", nil, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, bus.ErrNoService) {
			t.Fatalf("Call = %v", err)
		}
		select { // not registered yet: ask again
		case <-tick.C:
		case <-deadline:
			t.Fatal("Serve never answered")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve = %v, want nil after cancel", err)
	}
	if err := b.Call(t.Context(), "echo", "echo", nil, nil); !errors.Is(err, bus.ErrNoService) {
		t.Errorf("Call after Serve returned = %v, want ErrNoService", err)
	}
}

func TestServiceRejectsBadNames(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	if _, err := b.StartService(bus.Service{Name: "Bad.Name"}); err == nil {
		t.Error("StartService(Bad.Name) = nil, want an error")
	}
	if _, err := b.StartService(bus.Service{Name: "ok", Endpoints: []bus.Endpoint{{Verb: "a.b"}}}); err == nil {
		t.Error("StartService(verb a.b) = nil, want an error")
	}
	if err := b.Call(t.Context(), "ok", "a", nil, nil); !errors.Is(err, bus.ErrNoService) {
		t.Errorf("a refused service was left registered: Call = %v", err)
	}
}

// A handler's json.RawMessage result is sent as it is (encoded by the
// handler); a nil one as null, like any nil result. A reply larger than
// the NATS server takes comes back at once as an error that says what to
// do, instead of the caller waiting out its timeout.
func TestServiceRawAndTooLargeResults(t *testing.T) {
	t.Parallel()
	b := bustest.External(t, 64<<10)
	stop, err := b.StartService(bus.Service{
		Name: "raw", Description: "test service", QueueGroup: "agentwork-raw",
		Endpoints: []bus.Endpoint{
			{Verb: "nil", Handle: func(context.Context, []byte) (any, error) { return json.RawMessage(nil), nil }},
			{Verb: "page", Handle: func(context.Context, []byte) (any, error) { return json.RawMessage(`{"jobs":[1,2],"more":false}`), nil }},
			{Verb: "huge", Handle: func(context.Context, []byte) (any, error) { return strings.Repeat("x", 100<<10), nil }},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var v any = "not decoded"
	if err := b.Call(ctx, "raw", "nil", nil, &v); err != nil || v != nil {
		t.Errorf("a nil json.RawMessage result: %v, %v; want null", v, err)
	}
	var page struct {
		Jobs []int `json:"jobs"`
		More bool  `json:"more"`
	}
	if err := b.Call(ctx, "raw", "page", nil, &page); err != nil || len(page.Jobs) != 2 {
		t.Errorf("a json.RawMessage result: %+v, %v; want it as sent", page, err)
	}
	err = b.Call(ctx, "raw", "huge", nil, &v)
	var se *bus.ServiceError
	if !errors.As(err, &se) || se.Code != "reply_too_large" || !strings.Contains(se.Detail, "max_payload") {
		t.Errorf("a reply past max_payload: %v; want a reply_too_large error that names max_payload, at once", err)
	}
}
