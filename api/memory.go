package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools/memory"
)

// The agent's memory (when Deps.Memory is set), docs/memory.md:
//
//	GET /v1/memory                  the documents: name, file, bytes, revision, updated
//	GET /v1/memory/{doc}            one document (long, today, yesterday,
//	                                YYYY-MM-DD, checklist) as JSON, or its
//	                                Markdown with Accept: text/markdown;
//	                                ETag: its revision
//	GET /v1/memory/{doc}/history    its kept revisions, newest first
//	PUT /v1/memory/{doc}            replace it with the body (Markdown); with
//	                                If-Match: <revision> only while it is at
//	                                that revision (412 otherwise), with
//	                                If-None-Match: * only if it does not exist
func (s *Server) memoryRoutes(mux *http.ServeMux) {
	if s.deps.Memory == nil {
		return
	}
	mux.HandleFunc("GET /v1/memory", s.listMemory)
	mux.HandleFunc("GET /v1/memory/{doc}", s.getMemory)
	mux.HandleFunc("GET /v1/memory/{doc}/history", s.memoryHistory)
	mux.HandleFunc("PUT /v1/memory/{doc}", s.putMemory)
}

func (s *Server) listMemory(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	docs, err := s.deps.Memory.List(ctx)
	if err != nil {
		memoryProblem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, docs)
}

func (s *Server) getMemory(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	d, err := s.deps.Memory.Read(ctx, r.PathValue("doc"))
	if err != nil {
		memoryProblem(w, r, err)
		return
	}
	w.Header().Set("ETag", ETag(d.Revision))
	if strings.Contains(r.Header.Get("Accept"), "text/markdown") {
		w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
		_, _ = io.WriteString(w, d.Text)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) memoryHistory(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	h, err := s.deps.Memory.History(ctx, r.PathValue("doc"))
	if err != nil {
		memoryProblem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

func (s *Server) putMemory(w http.ResponseWriter, r *http.Request) {
	if memory.IsChecklist(r.PathValue("doc")) && RefuseChecklistChange(w, r) {
		return
	}
	rev, ok := IfMatch(w, r)
	if !ok {
		return
	}
	if rev == nil && r.Header.Get("If-None-Match") == "*" {
		rev = new(uint64)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, memory.MaxDoc))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			problem.Error(w, http.StatusRequestEntityTooLarge, "a memory document is at most "+strconv.Itoa(memory.MaxDoc)+" bytes: shorten it")
			return
		}
		problem.Error(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	by := "http"
	if a, ok := ActorFrom(r.Context()); ok {
		by = a.Via + ":" + a.Name
	}
	d, err := s.deps.Memory.Put(ctx, r.PathValue("doc"), string(body), by, rev)
	if err != nil {
		memoryProblem(w, r, err)
		return
	}
	d.Text = ""
	w.Header().Set("ETag", ETag(d.Revision))
	writeJSON(w, http.StatusOK, d)
}

// memoryProblem answers an error of the memory store as problem details
// with its status and code; the bus not answering is a 503.
func memoryProblem(w http.ResponseWriter, r *http.Request, err error) {
	if _, ok := errors.AsType[*memory.Error](err); !ok {
		problem.Unavailable(w, 5*time.Second, err.Error())
		return
	}
	e := bus.AsServiceError(err)
	problem.Write(w, problem.Details{Status: e.Status, Detail: e.Detail, Code: e.Code, Instance: r.URL.Path})
}
