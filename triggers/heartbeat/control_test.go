package heartbeat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/triggers/activehours"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

// TestControlSurface: status, wake and history over NATS (the CLI's
// client, from another connection) and HTTP.
func TestControlSurface(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(nextYear)
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	cfg := heartbeat.Config{Enabled: true, Every: 30 * time.Minute, Targets: []string{"console"},
		ActiveHours: activehours.Window{Start: "08:00", End: "20:00", Timezone: "Europe/Berlin", Days: []string{"mon-fri"}}}
	h := newHeartbeat(t, b, cfg, clk, dir)
	texts := []string{"the backup failed", "the backup failed again", "disk full"}
	var i atomic.Int64
	m := newModel(func(_ context.Context, req model.Request) (model.Reply, error) {
		if last := req.Messages[len(req.Messages)-1]; last.Role == model.RoleTool {
			return model.Reply{Text: "done"}, nil
		}
		return notifyReply(texts[int(i.Add(1)-1)%len(texts)]), nil
	})
	startRunner(t, b, m, h, clk)
	s := watch(t, b)
	runInBackground(t, "Heartbeat", h.Run)
	serveAPI(t, b, h)
	waitArmed(t, b)

	c := heartbeat.NewClient(bustest.Client(t, b), "default")
	st, err := c.Status(t.Context())
	if err != nil {
		t.Fatalf("Client.Status: %v", err)
	}
	if !st.Enabled || st.Every != "30m0s" || st.ActiveHours != "08:00-20:00 Europe/Berlin mon,tue,wed,thu,fri" || !st.ActiveNow ||
		!st.NextFire.Equal(time.Date(2027, 3, 8, 10, 30, 0, 0, time.UTC)) || st.LastRun != nil || st.Running != nil {
		t.Errorf("status = %+v", st)
	}
	if !strings.HasSuffix(st.Checklist, "HEARTBEAT.md") || st.OutputMode != "notify" || st.Overlap != "skip" {
		t.Errorf("status config = %+v", st)
	}

	// Three wakes, one at a time.
	var ids []string
	for n := 1; n <= 3; n++ {
		w, err := c.Wake(t.Context())
		if err != nil {
			t.Fatalf("Client.Wake: %v", err)
		}
		ids = append(ids, w.ID)
		s.wait(n)
		waitIdle(t, b)
	}
	waitFor(t, "the last run in the state", func() bool {
		st, err := c.Status(t.Context())
		return err == nil && st.LastRun != nil && st.LastRun.RequestID == ids[2]
	})
	st, _ = c.Status(t.Context())
	if st.LastRun.Outcome != bus.OutcomeDone || st.LastRun.Text != "disk full" || st.ConsecutiveErrors != 0 {
		t.Errorf("last run = %+v", st.LastRun)
	}

	runs, err := c.History(t.Context(), 2)
	if err != nil {
		t.Fatalf("Client.History: %v", err)
	}
	if len(runs) != 2 || runs[0].RequestID != ids[2] || runs[1].RequestID != ids[1] || runs[0].Result.Text != "disk full" || !runs[0].Result.Manual {
		t.Fatalf("History(2) = %+v, want the last two runs, newest first", runs)
	}

	// HTTP.
	mux := http.NewServeMux()
	h.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	get := func(path string, status int, v any) http.Header {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != status {
			t.Fatalf("GET %s = %d, want %d", path, resp.StatusCode, status)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp.Header
	}
	var hs heartbeat.Status
	get("/v1/heartbeat", http.StatusOK, &hs)
	if hs.Name != "default" || hs.LastRun == nil || hs.LastRun.RequestID != ids[2] {
		t.Errorf("GET /v1/heartbeat = %+v", hs)
	}
	var hist heartbeat.HistoryResult
	get("/v1/heartbeat/history?limit=10", http.StatusOK, &hist)
	if len(hist.Runs) != 3 || hist.Runs[2].RequestID != ids[0] {
		t.Errorf("GET /v1/heartbeat/history = %d runs, want 3, oldest last", len(hist.Runs))
	}
	var p struct {
		Type, Title, Detail string
		Status              int
	}
	hdr := get("/v1/heartbeat/history?limit=lots", http.StatusBadRequest, &p)
	if hdr.Get("Content-Type") != "application/problem+json" || p.Status != 400 || !strings.Contains(p.Detail, `"lots"`) {
		t.Errorf("bad limit: %s %+v", hdr.Get("Content-Type"), p)
	}
	resp, err := http.Post(srv.URL+"/v1/heartbeat/wake", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var wr heartbeat.WakeResult
	_ = json.NewDecoder(resp.Body).Decode(&wr)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || wr.ID == "" {
		t.Fatalf("POST /v1/heartbeat/wake = %d %+v, want 202 with an id", resp.StatusCode, wr)
	}
	if got := s.wait(4)[3]; got.Event.CausationID != wr.ID {
		t.Errorf("HTTP wake ran %v, want request %s", got, wr.ID)
	}
	resp, err = http.Get(srv.URL + "/v1/heartbeat/wake")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/heartbeat/wake = %d, want 405", resp.StatusCode)
	}
}

// TestClientErrors: a client names what is wrong when nobody answers.
func TestClientErrors(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := heartbeat.NewClient(b, "").Status(ctx)
	if !errors.Is(err, heartbeat.ErrNoHeartbeat) || !strings.Contains(err.Error(), "agentwork serve") {
		t.Errorf("Status with no heartbeat running = %v, want ErrNoHeartbeat telling to start agentwork serve", err)
	}

	// A running heartbeat with another name does not answer for "nightly".
	h := newHeartbeat(t, b, heartbeat.Config{}, clock.NewFake(monday), t.TempDir())
	runInBackground(t, "Heartbeat", h.Run)
	serveAPI(t, b, h)
	ctx, cancel = context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = heartbeat.NewClient(b, "nightly").Wake(ctx)
	if !errors.Is(err, heartbeat.ErrNoHeartbeat) || !strings.Contains(err.Error(), `"nightly"`) {
		t.Errorf("Wake(nightly) = %v, want ErrNoHeartbeat naming the heartbeat", err)
	}
	st, err := heartbeat.NewClient(b, "").Status(t.Context())
	if err != nil || st.Enabled || !st.NextFire.IsZero() || st.ActiveHours != "always" {
		t.Errorf("status of a disabled heartbeat = %+v, %v", st, err)
	}
}

// TestHistoryReadsBackwards: history finds the heartbeat's runs among many
// other events, newest first, across several read windows.
func TestHistoryReadsBackwards(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	emit := func(source, name string, n int) string {
		res := agentwork.Result{Source: source, Name: name, Outcome: bus.OutcomeSkip, Reason: fmt.Sprint(n)}
		ev, err := bus.NewEvent("agentwork/runner", bus.TypeOf(source, bus.OutcomeSkip), name, monday.Add(time.Duration(n)*time.Second), res)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Publish(t.Context(), b.Subjects.Event(source, bus.OutcomeSkip), ev, ""); err != nil {
			t.Fatal(err)
		}
		return ev.ID
	}
	if got, err := heartbeat.History(t.Context(), b, "default", 5); err != nil || len(got) != 0 {
		t.Fatalf("History on an empty stream = %v, %v; want none", got, err)
	}
	var ours []string
	for n := range 300 {
		switch {
		case n%50 == 0:
			ours = append(ours, emit("heartbeat", "default", n))
		case n%7 == 0:
			emit("heartbeat", "other", n)
		default:
			emit("cron", "job", n)
		}
	}
	got, err := heartbeat.History(t.Context(), b, "default", 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("History(4) = %d entries, want 4", len(got))
	}
	for i, e := range got {
		if want := ours[len(ours)-1-i]; e.ID != want || e.Result.Name != "default" {
			t.Errorf("entry %d = %s (%s), want %s", i, e.ID, e.Result.Name, want)
		}
	}
	all, err := heartbeat.History(t.Context(), b, "default", 100)
	if err != nil || len(all) != len(ours) {
		t.Fatalf("History(100) = %d entries, %v; want %d", len(all), err, len(ours))
	}
}

// TestStatusShowsTheRunningHeartbeat: while a heartbeat runs, status names
// its run, request and instance; once it ended, nothing runs.
func TestStatusShowsTheRunningHeartbeat(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(nextYear)
	dir := t.TempDir()
	writeChecklist(t, dir, checklistText)
	h := newHeartbeat(t, b, heartbeat.Config{Enabled: true}, clk, dir)
	started, release := make(chan struct{}, 1), make(chan struct{})
	m := newModel(func(ctx context.Context, req model.Request) (model.Reply, error) {
		if last := req.Messages[len(req.Messages)-1]; last.Role == model.RoleTool {
			return model.Reply{Text: "done"}, nil
		}
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return model.Reply{}, ctx.Err()
		}
		return notifyReply("the backup failed"), nil
	})
	startRunner(t, b, m, h, clk)
	s := watch(t, b)
	runInBackground(t, "Heartbeat", h.Run)
	serveAPI(t, b, h)
	waitArmed(t, b)
	w, err := h.Wake(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(waitTimeout):
		t.Fatal("the woken heartbeat never called the model")
	}
	st, err := heartbeat.NewClient(bustest.Client(t, b), "default").Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if r := st.Running; r == nil || r.RequestID != w.ID || r.RunID == "" || r.Owner != b.Instance() || r.Since.IsZero() || !r.Expires.After(time.Now()) {
		t.Fatalf("status running = %+v, want the run of request %s on %s", r, w.ID, b.Instance())
	}
	close(release)
	s.wait(1)
	waitIdle(t, b)
	if st, err := h.Status(t.Context()); err != nil || st.Running != nil {
		t.Fatalf("status running after the run = %+v, %v; want none", st.Running, err)
	}
}

// TestHTTPBusDown: with the bus gone the routes answer 503 problems a
// client may retry.
func TestHTTPBusDown(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	h := newHeartbeat(t, b, heartbeat.Config{}, clock.NewFake(monday), t.TempDir())
	mux := http.NewServeMux()
	h.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/heartbeat", "/v1/heartbeat/history"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var p problem.Details
		_ = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
			resp.Header.Get("Content-Type") != problem.ContentType || p.Type != problem.TypeUnavailable {
			t.Errorf("GET %s with the bus closed = %d %q %+v, want a 503 problem with Retry-After", path, resp.StatusCode, resp.Header.Get("Retry-After"), p)
		}
	}
}
