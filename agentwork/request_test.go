package agentwork_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

func TestRequestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  agentwork.Request
		want string // substring of the error; "" = valid
	}{
		{name: "minimal", req: agentwork.Request{Source: "task", Name: "x"}},
		{name: "full", req: agentwork.Request{Source: "cron", Name: "daily-report", Prompt: "p", Deliver: agentwork.DeliverNotify, Targets: []string{"slack", "ntfy"}}},
		{name: "source with a dot", req: agentwork.Request{Source: "a.b", Name: "x"}, want: "source"},
		{name: "empty name", req: agentwork.Request{Source: "task"}, want: "name"},
		{name: "upper case", req: agentwork.Request{Source: "Task", Name: "x"}, want: "source"},
		{name: "bad deliver", req: agentwork.Request{Source: "task", Name: "x", Deliver: "fax"}, want: "deliver"},
		{name: "bad target", req: agentwork.Request{Source: "task", Name: "x", Targets: []string{"my slack"}}, want: "targets"},
	}
	for _, tt := range tests {
		err := tt.req.Validate()
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: Validate() = %v, want an error mentioning %q (\"\" = nil)", tt.name, err, tt.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  agentwork.Config
		ok   bool
	}{
		{"zero (defaults)", agentwork.Config{}, true},
		{"set", agentwork.Config{Concurrency: 8, MaxSteps: 4, AckWait: 10 * time.Second, Targets: []string{"slack"}}, true},
		{"too much concurrency", agentwork.Config{Concurrency: 5000}, false},
		{"negative steps", agentwork.Config{MaxSteps: -1}, false},
		{"ack wait under 1s", agentwork.Config{AckWait: 100 * time.Millisecond}, false},
		{"bad target", agentwork.Config{Targets: []string{"Slack!"}}, false},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestPublishAndDecode(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	ctx := t.Context()
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	req := agentwork.Request{Source: "cron", Name: "daily", Prompt: "sales", ScheduledAt: &at, Metadata: map[string]string{"k": "v"}}
	p1, err := agentwork.Publish(ctx, b, req, agentwork.PublishOptions{MsgID: "daily:2026-03-01T09:00"})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := agentwork.Publish(ctx, b, req, agentwork.PublishOptions{MsgID: "daily:2026-03-01T09:00"})
	if err != nil {
		t.Fatal(err)
	}
	if p1.Duplicate || !p2.Duplicate || p1.Sequence != p2.Sequence {
		t.Errorf("publish twice with one MsgID: %+v then %+v; want the second a duplicate of the first", p1, p2)
	}
	if _, err := agentwork.Publish(ctx, b, agentwork.Request{Source: "cron", Name: "a b"}, agentwork.PublishOptions{}); err == nil {
		t.Error("Publish of an invalid request succeeded, want an error")
	}

	st, err := b.JetStream().Stream(ctx, bus.StreamRequests)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, p1.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "agentwork.request.cron.daily" || m.Header.Get("Content-Type") != bus.ContentType {
		t.Errorf("stored on %s with Content-Type %q; want agentwork.request.cron.daily, %q", m.Subject, m.Header.Get("Content-Type"), bus.ContentType)
	}
	ev, got, err := agentwork.DecodeRequest(b, m.Subject, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != p1.ID || ev.ID != p1.ID || got.Prompt != "sales" || !got.ScheduledAt.Equal(at) || got.Metadata["k"] != "v" || ev.Type != "agentwork.cron.requested" {
		t.Errorf("DecodeRequest = %+v (envelope %+v), want the published request with id %s", got, ev, p1.ID)
	}
}

// The subject, not the body, says who asked: a body claiming another
// source cannot borrow that source's policy.
func TestDecodeRequestSubjectIsAuthoritative(t *testing.T) {
	t.Parallel()
	b := &bus.Bus{Subjects: bus.Subjects{Prefix: "agentwork"}}
	ev, err := bus.NewEvent("agentwork/webhook", "agentwork.heartbeat.requested", "x", time.Now(), map[string]string{"source": "heartbeat", "name": "default", "prompt": "p"})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte(`{"specversion":"1.0","id":"` + ev.ID + `","source":"x","type":"t","data":` + string(ev.Data) + `}`)
	_, req, err := agentwork.DecodeRequest(b, "agentwork.request.task.build", data)
	if err != nil {
		t.Fatal(err)
	}
	if req.Source != "task" || req.Name != "build" {
		t.Errorf("DecodeRequest source, name = %q, %q; want the subject's task, build", req.Source, req.Name)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add("agentwork.request.task.x", []byte(`{"specversion":"1.0","id":"1","source":"s","type":"t","data":{"prompt":"hi"}}`))
	f.Add("agentwork.request.task.x", []byte(`{"specversion":"1.0","id":"1","source":"s","type":"t","data":{"deliver":"fax","targets":["A"]}}`))
	f.Add("agentwork.request.a.b.c", []byte(`{}`))
	f.Add("agentwork.request.task.x", []byte(`not json`))
	f.Add("agentwork.request.task.x", []byte(`{"specversion":"1.0","id":"1","source":"s","type":"t","data":null}`))
	b := &bus.Bus{Subjects: bus.Subjects{Prefix: "agentwork"}}
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		ev, req, err := agentwork.DecodeRequest(b, subject, data)
		if err != nil {
			return
		}
		if req.ID != ev.ID || req.ID == "" {
			t.Errorf("request id %q, envelope id %q; want equal and set", req.ID, ev.ID)
		}
		if err := req.Validate(); err != nil {
			t.Errorf("DecodeRequest accepted a request that does not validate: %v", err)
		}
		if subject != b.Subjects.Request(req.Source, req.Name) {
			t.Errorf("request %s/%s decoded from subject %q", req.Source, req.Name, subject)
		}
	})
}
