package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools/mcp"
)

// maxToolArgs bounds the body of a tool call by hand.
const maxToolArgs = 1 << 20

// The tools (when Deps.Tools is set):
//
//	GET  /v1/tools[?source=<s>[&name=<n>]]  the tools offered to the runs of a
//	                                        source and name (every tool without
//	                                        source), and the MCP servers' state
//	POST /v1/tools/{tool}/call              call a tool by hand; the body is its
//	                                        arguments (a JSON object; none is {})
func (s *Server) toolRoutes(mux *http.ServeMux) {
	if s.deps.Tools == nil {
		return
	}
	mux.HandleFunc("GET /v1/tools", s.listTools)
	mux.HandleFunc("POST /v1/tools/{tool}/call", s.callTool)
}

func (s *Server) listTools(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	q := r.URL.Query()
	l, err := s.deps.Tools.List(ctx, q.Get("source"), q.Get("name"))
	if err != nil {
		toolProblem(w, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

func (s *Server) callTool(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxToolArgs))
	if err != nil {
		problem.Error(w, http.StatusRequestEntityTooLarge, "the arguments are larger than 1 MiB")
		return
	}
	// The call may take as long as its server's timeout.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(mcp.MaxTimeout + time.Minute))
	c, err := s.deps.Tools.Call(r.Context(), r.PathValue("tool"), json.RawMessage(body))
	if err != nil {
		toolProblem(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func toolProblem(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, agentwork.ErrToolRequest):
		problem.Error(w, http.StatusBadRequest, bus.AsServiceError(err).Detail)
	case errors.Is(err, agentwork.ErrNoTool):
		problem.Error(w, http.StatusNotFound, bus.AsServiceError(err).Detail)
	default:
		problem.Unavailable(w, 5*time.Second, err.Error())
	}
}
