// Package fakeserver is the httptest plumbing the openaifake and
// anthropicfake packages build on: a server closed when the test ends, a
// queue of scripted responses (a request that finds it empty fails the
// test), the requests received, the expected API key, and the parts of a
// response that do not depend on the wire format: hang until the client
// gives up, drop the connection, extra headers, a verbatim body. Each fake
// keeps its own request and response types, validation and error shapes.
package fakeserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// maxBody caps how much of a request body is read.
const maxBody = 32 << 20

// Server is a scripted httptest server that records requests of type Q and
// answers with responses of type R. Its methods are safe for concurrent use.
type Server[Q, R any] struct {
	// URL is the root of the httptest server.
	URL string

	name string // the fake's package name, starting its test failures
	t    testing.TB
	done chan struct{}

	mu    sync.Mutex
	key   string
	queue []R
	reqs  []Q
	n     int
}

// New starts h on an httptest server that is closed when the test ends.
// name (e.g. "openaifake") starts the messages of the failures it reports;
// key is the API key it expects until SetKey. New does not call h, so h may
// refer to the returned Server.
func New[Q, R any](t testing.TB, name, key string, h http.Handler) *Server[Q, R] {
	t.Helper()
	s := &Server[Q, R]{name: name, t: t, key: key, done: make(chan struct{})}
	srv := httptest.NewServer(h)
	s.URL = srv.URL
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(s.done) }) // runs first: releases hanging handlers
	return s
}

// SetKey sets the API key the server expects; "" accepts any request.
func (s *Server[Q, R]) SetKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.key = key
}

// Key returns the API key the server expects.
func (s *Server[Q, R]) Key() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.key
}

// Enqueue appends responses; each request takes the next one.
func (s *Server[Q, R]) Enqueue(rs ...R) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, rs...)
}

// Pending returns how many queued responses were not used yet.
func (s *Server[Q, R]) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Requests returns the requests received so far, in arrival order.
func (s *Server[Q, R]) Requests() []Q {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Q(nil), s.reqs...)
}

// Body reads the request body (at most 32 MiB).
func Body(w http.ResponseWriter, r *http.Request) []byte {
	var body bytes.Buffer
	_, _ = body.ReadFrom(http.MaxBytesReader(w, r.Body, maxBody))
	return body.Bytes()
}

// Record appends q to the requests received and returns its number
// (counting from 1) and the key expected now.
func (s *Server[Q, R]) Record(q Q) (n int, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, q)
	s.n++
	return s.n, s.key
}

// Next takes the next queued response for request n. If the queue is empty
// it fails the test and returns false; the caller answers with its API's
// server error.
func (s *Server[Q, R]) Next(n int) (R, bool) {
	s.mu.Lock()
	if len(s.queue) == 0 {
		s.mu.Unlock()
		s.Fail(n, errors.New("no response queued"))
		var zero R
		return zero, false
	}
	resp := s.queue[0]
	s.queue = s.queue[1:]
	s.mu.Unlock()
	return resp, true
}

// Fail fails the test with err, for request n.
func (s *Server[Q, R]) Fail(n int, err error) {
	s.t.Errorf("%s: request %d: %v", s.name, n, err)
}

// Raw is the part of a scripted response that does not depend on the wire
// format.
type Raw struct {
	// Hang answers nothing until the client gives up (or the test ends).
	Hang bool
	// Disconnect closes the connection without answering.
	Disconnect bool
	// Header is added to the reply.
	Header http.Header
	// Body, if set, is sent verbatim as JSON with Status (default 200).
	Body   string
	Status int
}

// Respond answers r as raw says and reports whether it did: it hangs,
// disconnects, or sends raw.Body; otherwise it adds raw.Header and returns
// false, and the caller writes the reply.
func (s *Server[Q, R]) Respond(w http.ResponseWriter, r *http.Request, raw Raw) bool {
	switch {
	case raw.Hang:
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		return true
	case raw.Disconnect:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return true
			}
		}
		panic(http.ErrAbortHandler)
	}
	for k, vs := range raw.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if raw.Body == "" {
		return false
	}
	status := raw.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(raw.Body))
	return true
}

// WriteJSON sends v as a JSON reply with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// T returns the test the server belongs to.
func (s *Server[Q, R]) T() testing.TB { return s.t }
