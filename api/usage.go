package api

import (
	"context"
	"net/http"
	"time"

	"github.com/agentwork/agentwork/agentwork/usage"
	"github.com/agentwork/agentwork/api/problem"
)

// Token usage (the agentwork_usage bucket):
//
//	GET /v1/usage[?since=7d][&source=s][&name=n][&by=day,source,name,model]
//	    the model tokens of runs per UTC day, source, name and model, newest
//	    day first; by keeps those dimensions and sums over the others
func (s *Server) usage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := usage.ParseFilter(q.Get("since"), q.Get("source"), q.Get("name"), q.Get("by"), time.Now())
	if err != nil {
		problem.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	list, err := usage.Query(ctx, s.deps.Bus, f)
	if err != nil {
		problem.Unavailable(w, 5*time.Second, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, UsageReply{Since: f.Since, Usage: list})
}

// UsageReply is the body of GET /v1/usage.
type UsageReply struct {
	// Since is the first day's start (zero: all days kept).
	Since time.Time      `json:"since,omitzero"`
	Usage []usage.Record `json:"usage"`
}
