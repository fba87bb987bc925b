// Package webhookfake is a webhook receiver for tests: an httptest server
// on 127.0.0.1 that verifies Standard Webhooks signatures (with
// internal/stdwebhook, the code the inbound trigger uses) and rejects a
// bad one with 401, deduplicates on webhook-id as the spec asks receivers
// to, and records what it accepted (a connectortest.Observer). It can be
// made to fail (its connectortest.Script: Inject, FailNext, Fail,
// RateLimit, Recover; and RespondNext).
//
// Spec followed: standard-webhooks spec/standard-webhooks.md, "Verifying
// webhooks" (signed content, tolerance, constant-time compare, webhook-id
// as idempotency key) and "Delivery behavior" (2xx success, 410 disable,
// 429/503 with Retry-After throttle).
package webhookfake

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/internal/stdwebhook"
)

// MaxBody is the largest body the receiver reads; a larger one is 413.
const MaxBody = 1 << 20

// Options configures a Server.
type Options struct {
	// Secrets are the whsec_ secrets the receiver verifies with; a request
	// passes when one of its signatures matches one of them. None: the
	// receiver takes unsigned requests (and ignores signatures).
	Secrets []string
	// Tolerance is how far webhook-timestamp may be from the receiver's
	// clock. Default 5 minutes.
	Tolerance time.Duration
	// Now is the receiver's clock. Default time.Now.
	Now func() time.Time
}

// Attempt is one request the receiver got, answered whatever way.
type Attempt struct {
	ID, Timestamp, Signature string
	Header                   http.Header
	Body                     []byte
	// Status is the status the receiver answered (0: it stalled).
	Status int
}

// Event is the body of a delivery as the receiver decodes it: the
// CloudEvents envelope and the notification in its data.
type Event struct {
	SpecVersion string    `json:"specversion"`
	ID          string    `json:"id"`
	Source      string    `json:"source"`
	Type        string    `json:"type"`
	Subject     string    `json:"subject"`
	Time        time.Time `json:"time"`
	RunID       string    `json:"runid"`
	Data        struct {
		ID        string            `json:"id"`
		RunID     string            `json:"run_id"`
		RequestID string            `json:"request_id"`
		Source    string            `json:"source"`
		Name      string            `json:"name"`
		Text      string            `json:"text"`
		Urgency   string            `json:"urgency"`
		Truncated bool              `json:"truncated"`
		Target    string            `json:"target"`
		Time      time.Time         `json:"time"`
		Metadata  map[string]string `json:"metadata"`
	} `json:"data"`
}

// Server is the fake receiver. Its Script fails deliveries:
// Unavailable is 500, RateLimited 429 with the fault's wait as
// Retry-After (in whole seconds), Unauthorized 401, BadRequest 400, Stall
// no answer. Safe for concurrent use.
type Server struct {
	connectortest.Recorder
	*connectortest.Script[answer]
	// URL is the receiver's URL, http://127.0.0.1:<port>/hook.
	URL string

	keys      [][]byte
	tolerance time.Duration
	now       func() time.Time

	mu       sync.Mutex
	attempts []Attempt
	events   []Event
	seen     map[string]bool // webhook-ids accepted
	dups     int
}

// answer is a scripted response.
type answer struct {
	status     int
	retryAfter time.Duration
	stall      bool
}

var (
	_ connectortest.Observer      = (*Server)(nil)
	_ connectortest.FaultInjector = (*Server)(nil)
)

// New starts a Server, stopped at t's cleanup. It panics on a secret that
// is not whsec_<base64>.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{Script: connectortest.NewScript(faultAnswer), tolerance: opts.Tolerance, now: opts.Now, seen: map[string]bool{}}
	if s.tolerance == 0 {
		s.tolerance = 5 * time.Minute
	}
	if s.now == nil {
		s.now = time.Now
	}
	for _, sec := range opts.Secrets {
		k, err := stdwebhook.DecodeSecret(sec)
		if err != nil {
			t.Fatalf("webhookfake: secret: %v", err)
		}
		s.keys = append(s.keys, k)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Cleanup(s.Release) // runs first: releases stalled requests
	s.URL = srv.URL + "/hook"
	return s
}

// faultAnswer is how the receiver answers a connectortest fault.
func faultAnswer(f connectortest.Fault) answer {
	switch f.Kind {
	case connectortest.Unavailable:
		return answer{status: http.StatusInternalServerError}
	case connectortest.RateLimited:
		return answer{status: http.StatusTooManyRequests, retryAfter: f.RetryAfter}
	case connectortest.Unauthorized:
		return answer{status: http.StatusUnauthorized}
	case connectortest.BadRequest:
		return answer{status: http.StatusBadRequest}
	case connectortest.Stall:
		return answer{stall: true}
	}
	panic(fmt.Sprintf("webhookfake: unknown fault %s", f.Kind))
}

// RespondNext makes the next request (after those scripted before it) get
// status, with a Retry-After of retryAfter in whole seconds when it is
// positive: 410 Gone, 503 with Retry-After, 302. Status 0 is no answer.
func (s *Server) RespondNext(status int, retryAfter time.Duration) {
	s.AnswerNext(1, answer{status: status, retryAfter: retryAfter, stall: status == 0})
}

// Attempts returns every request the receiver got, in order.
func (s *Server) Attempts() []Attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.attempts)
}

// Events returns the deliveries the receiver accepted, once per
// webhook-id, in order.
func (s *Server) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// Duplicates returns how many signed deliveries repeated a webhook-id the
// receiver had accepted (answered 200, not recorded again).
func (s *Server) Duplicates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dups
}

func (s *Server) record(a Attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts = append(s.attempts, a)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

type problem struct {
	Error string `json:"error"`
}

// ServeHTTP receives one delivery.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/hook" {
		writeJSON(w, http.StatusNotFound, problem{"no such hook"})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeJSON(w, http.StatusMethodNotAllowed, problem{"POST only"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	a := Attempt{
		ID: r.Header.Get(stdwebhook.HeaderID), Timestamp: r.Header.Get(stdwebhook.HeaderTimestamp),
		Signature: r.Header.Get(stdwebhook.HeaderSignature), Header: r.Header.Clone(), Body: body,
	}
	answerWith := func(status int, v any) {
		a.Status = status
		s.record(a)
		writeJSON(w, status, v)
	}
	if err != nil {
		answerWith(http.StatusRequestEntityTooLarge, problem{"body too large"})
		return
	}
	if sc, ok := s.Next(); ok {
		if sc.stall {
			s.record(a)
			s.Stall(r.Context())
			return
		}
		if sc.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(sc.retryAfter/time.Second)))
		}
		answerWith(sc.status, problem{http.StatusText(sc.status)})
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		answerWith(http.StatusUnsupportedMediaType, problem{"want Content-Type: application/json"})
		return
	}
	if len(s.keys) > 0 {
		if _, err := stdwebhook.Verify(s.keys, a.ID, a.Timestamp, a.Signature, body, s.now(), s.tolerance); err != nil {
			answerWith(http.StatusUnauthorized, problem{err.Error()})
			return
		}
	} else if !stdwebhook.ValidID(a.ID) {
		answerWith(http.StatusBadRequest, problem{"webhook-id missing or invalid"})
		return
	}
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil || ev.SpecVersion != "1.0" || ev.ID == "" || ev.Type == "" || ev.Source == "" {
		answerWith(http.StatusBadRequest, problem{"want a CloudEvents 1.0 JSON event"})
		return
	}
	s.mu.Lock()
	if s.seen[a.ID] {
		s.dups++
		s.mu.Unlock()
		answerWith(http.StatusOK, map[string]bool{"duplicate": true})
		return
	}
	s.seen[a.ID] = true
	s.events = append(s.events, ev)
	s.mu.Unlock()
	s.Add(connectortest.Message{Text: ev.Data.Text, Urgency: ev.Data.Urgency, ID: ev.Data.ID})
	answerWith(http.StatusOK, map[string]bool{"ok": true})
}
