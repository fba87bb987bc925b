package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/approval"
)

// Approvals (Deps.Approvals), admin:
//
//	GET  /v1/approvals[?state=<state>&limit=<n>]  the approvals, newest first
//	GET  /v1/approvals/counts                     how many in each state
//	GET  /v1/approvals/{id}                       one
//	POST /v1/approvals/{id}/approve|reject        decide, by "admin" (through MCP: the
//	                                              token's Actor.Decider); body {"comment": "..."} (optional)
//
// and, open (the signed link is the credential), the links' page:
// GET|POST /approvals/{id}/{verb}?exp=...&sig=...
func (s *Server) approvalRoutes(mux *http.ServeMux) {
	if s.deps.Approvals == nil {
		return
	}
	mux.HandleFunc("GET /v1/approvals", s.approvals)
	mux.HandleFunc("GET /v1/approvals/{id}", s.approval)
	mux.HandleFunc("GET /v1/approvals/counts", s.approvalCounts)
	mux.HandleFunc("POST /v1/approvals/{id}/{verb}", s.decideApproval)
}

func (s *Server) approvals(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	f := approval.Filter{State: approval.State(r.URL.Query().Get("state"))}
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 {
			problem.Invalid(w, "limit: want a positive number", problem.FieldError{Field: "limit", Detail: "want a positive number"})
			return
		}
		f.Limit = n
	}
	list, err := s.deps.Approvals.List(ctx, f)
	if err != nil {
		approvalProblem(w, err)
		return
	}
	if list == nil {
		list = []approval.Approval{}
	}
	writeJSON(w, http.StatusOK, struct {
		Approvals []approval.Approval `json:"approvals"`
	}{list})
}

// approvalCounts answers how many approvals are in each state, every
// state named (0 for none): {"counts": {"pending": 2, ...}}. It does not
// list them (approval.Service.Count).
func (s *Server) approvalCounts(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		problem.Invalid(w, "GET /v1/approvals/counts takes no parameters: it counts every state")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	counts, err := s.deps.Approvals.Count(ctx)
	if err != nil {
		approvalProblem(w, err)
		return
	}
	out := make(map[approval.State]int, len(approval.States))
	for _, st := range approval.States {
		out[st] = counts[st]
	}
	writeJSON(w, http.StatusOK, struct {
		Counts map[approval.State]int `json:"counts"`
	}{out})
}

func (s *Server) approval(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	a, err := s.deps.Approvals.Get(ctx, r.PathValue("id"))
	if err != nil {
		approvalProblem(w, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) decideApproval(w http.ResponseWriter, r *http.Request) {
	verb := approval.Verdict(r.PathValue("verb"))
	if verb != approval.Approve && verb != approval.Reject {
		problem.Error(w, http.StatusNotFound, "no such action: POST /v1/approvals/{id}/approve or /reject")
		return
	}
	var body struct {
		Comment string `json:"comment"`
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<10))
	if err != nil {
		problem.Invalid(w, "the body is over 16 KiB or could not be read")
		return
	}
	if len(raw) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			problem.Invalid(w, `the body: want {"comment": "..."} (optional): `+err.Error())
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	by := approval.ByAdmin
	if a, ok := ActorFrom(r.Context()); ok {
		by = a.Decider()
	}
	a, err := s.deps.Approvals.Decide(ctx, r.PathValue("id"), verb, by, body.Comment)
	if err != nil {
		approvalProblem(w, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func approvalProblem(w http.ResponseWriter, err error) {
	var ce *approval.ConflictError
	switch {
	case errors.Is(err, approval.ErrNoApproval):
		problem.Error(w, http.StatusNotFound, err.Error())
	case errors.Is(err, approval.ErrInvalid):
		problem.Invalid(w, err.Error())
	case errors.Is(err, approval.ErrNotAllowed):
		problem.Error(w, http.StatusForbidden, err.Error())
	case errors.As(err, &ce), errors.Is(err, approval.ErrExpired), errors.Is(err, approval.ErrCancelled):
		problem.Error(w, http.StatusConflict, err.Error())
	default:
		problem.Unavailable(w, 5*time.Second, err.Error())
	}
}
