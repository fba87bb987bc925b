package api_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
)

// page is a Console that answers every path with the caller Authenticate
// finds for the token in ?token=, and the status of the API's GET /v1/runs
// called in-process through Local.
type page struct{}

func (page) Handler(s *api.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who := "nobody"
		if c, err := s.Authenticate(r, r.URL.Query().Get("token")); err == nil {
			who = fmt.Sprintf("%s read=%v write=%v", c.Name, c.Allows(api.KindConsole, api.ConsoleRead), c.Allows(api.KindConsole, api.ConsoleWrite))
		}
		rec := httptest.NewRecorder()
		s.Local().ServeHTTP(rec, httptest.NewRequestWithContext(r.Context(), http.MethodGet, "/v1/runs", nil))
		fmt.Fprintf(w, "%s %s; runs %d", r.URL.Path, who, rec.Code)
	})
}

// The console is mounted at / and below, outside /v1; it is a client of the
// API in-process (Local, without the admin token) and logs people in with
// Authenticate: the admin token, or a credential of Deps.Callers.
func TestConsoleMount(t *testing.T) {
	t.Parallel()
	viewer := func(r *http.Request, _ []byte) (api.Caller, error) {
		if r.Header.Get("Authorization") != "Bearer "+taskToken {
			return api.Caller{}, errors.New("unknown token")
		}
		return api.Caller{Name: "viewer", Allows: func(kind, name string) bool { return kind == api.KindConsole && name == api.ConsoleRead }}, nil
	}
	f := newFixture(t, func(_ *api.Config, d *api.Deps) { d.Console, d.Callers = page{}, viewer })
	for _, tt := range []struct{ path, want string }{
		{"/?token=" + adminToken, "/ admin read=true write=true; runs 200"},
		{"/runs/x?token=" + taskToken, "/runs/x viewer read=true write=false; runs 200"},
		{"/jobs?token=wrong-0123456789", "/jobs nobody; runs 200"},
	} {
		if r := f.do(t, "GET", tt.path, "", ""); r.status != 200 || string(r.body) != tt.want {
			t.Errorf("GET %s = %d %q, want 200 %q", tt.path, r.status, r.body, tt.want)
		}
	}
	// /v1 stays the API's, behind the admin token.
	if r := f.do(t, "GET", "/v1/runs", "", ""); r.status != 401 {
		t.Errorf("GET /v1/runs without a token = %d, want 401", r.status)
	}
}

// GET /v1/runs?before= pages; GET /v1/runs/{id} is one run with the
// delivery results of its notifications.
func TestRunsPageAndOne(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	var evs []bus.Event
	for i := range 5 {
		evs = append(evs, emit(t, f.b, "task", bus.OutcomeDone, fmt.Sprintf("n-%d", i)))
	}
	page1 := f.runs(t, url.Values{"limit": {"2"}})
	page2 := f.runs(t, url.Values{"limit": {"2"}, "before": {page1[1].Time.Format(time.RFC3339Nano)}})
	if len(page2) != 2 || page2[0].ID != evs[2].ID || page2[1].ID != evs[1].ID {
		t.Errorf("second page = %v, want n-2, n-1", page2)
	}
	if r := f.do(t, "GET", "/v1/runs?before=yesterday", adminToken, ""); r.status != 400 {
		t.Errorf("before=yesterday = %d, want 400", r.status)
	}

	// A run with a notification delivered to one target and failed on
	// another; another run's delivery is not its.
	runID := bus.NewID()
	res := agentwork.Result{Source: "task", Name: "digest", Outcome: bus.OutcomeDone, Text: "all good",
		NotificationIDs: []string{connectors.NotificationID(runID, "", "console"), connectors.NotificationID(runID, "", "phone")}}
	run, err := bus.NewEvent("agentwork/runner", bus.TypeOf("task", bus.OutcomeDone), "digest", time.Now(), res)
	if err != nil {
		t.Fatal(err)
	}
	run.RunID = runID
	if _, err := f.b.Publish(t.Context(), f.b.Subjects.Event("task", bus.OutcomeDone), run, ""); err != nil {
		t.Fatal(err)
	}
	deliver := func(runID, outcome, connector string) {
		d := connectors.Result{Notification: connectors.Notification{ID: connectors.NotificationID(runID, "", connector), Target: connector, Text: "all good", RunID: runID},
			Connector: connector, Attempts: 1, Receipt: &connectors.Receipt{MessageIDs: []string{"m-1"}}}
		ev, err := bus.NewEvent("agentwork/connectors/"+connector, bus.TypeOf(bus.SourceDelivery, outcome), connector, time.Now(), d)
		if err != nil {
			t.Fatal(err)
		}
		ev.RunID = runID
		if _, err := f.b.Publish(t.Context(), f.b.Subjects.Event(bus.SourceDelivery, outcome), ev, ""); err != nil {
			t.Fatal(err)
		}
	}
	deliver(run.RunID, connectors.OutcomeDelivered, "console")
	deliver(bus.NewID(), connectors.OutcomeDelivered, "other")
	deliver(run.RunID, connectors.OutcomeFailed, "phone")

	r := f.do(t, "GET", "/v1/runs/"+run.ID, adminToken, "")
	var got struct {
		Run        bus.Event   `json:"run"`
		Deliveries []bus.Event `json:"deliveries"`
	}
	if r.status != 200 || json.Unmarshal(r.body, &got) != nil {
		t.Fatalf("GET /v1/runs/{id} = %d %s", r.status, r.body)
	}
	if got.Run.ID != run.ID || len(got.Deliveries) != 2 || got.Deliveries[0].Subject != "console" || got.Deliveries[1].Subject != "phone" {
		t.Errorf("GET /v1/runs/{id} = %s, want the run and its 2 deliveries (console, phone)", r.body)
	}
	for _, id := range []string{bus.NewID(), "not-an-id"} {
		if r := f.do(t, "GET", "/v1/runs/"+id, adminToken, ""); r.status != 404 {
			t.Errorf("GET /v1/runs/%s = %d %s, want 404", id, r.status, r.body)
		}
	}
	if r := f.do(t, "GET", "/v1/runs/"+run.ID, "", ""); r.status != 401 {
		t.Errorf("GET /v1/runs/{id} without the admin token = %d, want 401", r.status)
	}
}
