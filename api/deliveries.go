package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/connectors"
)

// Failed deliveries (dead letters):
//
//	GET  /v1/deliveries[?connector=<name>]  the notifications that failed for good, newest first
//	GET  /v1/deliveries/{id}                one, by notification id
//	POST /v1/deliveries/{id}/retry          queue it again (202); 409 while a retry is queued,
//	                                        unless ?force=true
func (s *Server) deliveryRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/deliveries", s.deliveries)
	mux.HandleFunc("GET /v1/deliveries/{id}", s.delivery)
	mux.HandleFunc("POST /v1/deliveries/{id}/retry", s.retryDelivery)
}

func (s *Server) deadLetters() *connectors.DeadLetters { return connectors.NewDeadLetters(s.deps.Bus) }

func (s *Server) deliveries(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	list, err := s.deadLetters().List(ctx, r.URL.Query().Get("connector"))
	if err != nil {
		problem.Unavailable(w, 5*time.Second, err.Error())
		return
	}
	if list == nil {
		list = []connectors.DeadLetter{}
	}
	writeJSON(w, http.StatusOK, struct {
		Deliveries []connectors.DeadLetter `json:"deliveries"`
	}{list})
}

func (s *Server) delivery(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	d, err := s.deadLetters().Get(ctx, r.PathValue("id"))
	if err != nil {
		deliveryProblem(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) retryDelivery(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	d, err := s.deadLetters().Retry(ctx, r.PathValue("id"), r.URL.Query().Get("force") == "true")
	if err != nil {
		deliveryProblem(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, d)
}

func deliveryProblem(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, connectors.ErrNoDeadLetter):
		problem.Error(w, http.StatusNotFound, err.Error())
	case errors.Is(err, connectors.ErrRetryPending):
		problem.Error(w, http.StatusConflict, err.Error())
	default:
		problem.Unavailable(w, 5*time.Second, err.Error())
	}
}
