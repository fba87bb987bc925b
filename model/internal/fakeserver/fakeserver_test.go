package fakeserver

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// recorder is a test whose failures are recorded instead of reported.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func TestServer(t *testing.T) {
	t.Parallel()
	rec := &recorder{TB: t}
	var s *Server[string, Raw]
	s = New[string, Raw](rec, "fake", "k", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := s.Record(string(Body(w, r)))
		resp, ok := s.Next(n)
		if !ok {
			WriteJSON(w, http.StatusInternalServerError, map[string]string{"error": "empty"})
			return
		}
		if !s.Respond(w, r, resp) {
			WriteJSON(w, http.StatusOK, map[string]int{"n": n})
		}
	}))
	s.Enqueue(Raw{Body: `{"raw":true}`, Status: 418, Header: http.Header{"X-A": {"1"}}}, Raw{})
	if got := s.Pending(); got != 2 {
		t.Fatalf("Pending() = %d, want 2", got)
	}
	post := func(body string) (int, string, http.Header) {
		t.Helper()
		resp, err := http.Post(s.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	tests := []struct {
		status int
		body   string
	}{
		{418, `{"raw":true}`},
		{200, `{"n":2}`},
		{500, `{"error":"empty"}`},
	}
	for i, tt := range tests {
		status, body, h := post(fmt.Sprintf("req%d", i+1))
		if status != tt.status || body != tt.body {
			t.Errorf("request %d = %d %s, want %d %s", i+1, status, body, tt.status, tt.body)
		}
		if i == 0 && h.Get("X-A") != "1" {
			t.Errorf("request 1 header X-A = %q, want 1", h.Get("X-A"))
		}
	}
	if got := s.Requests(); strings.Join(got, ",") != "req1,req2,req3" {
		t.Errorf("Requests() = %q, want req1,req2,req3", got)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.errors) != 1 || rec.errors[0] != "fake: request 3: no response queued" {
		t.Errorf("test failures = %q, want one for the empty queue", rec.errors)
	}
}
