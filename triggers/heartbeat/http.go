package heartbeat

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/api/problem"
)

// Routes registers the heartbeat's HTTP API on mux (Go 1.22 patterns):
//
//	GET  /v1/heartbeat          the Status
//	POST /v1/heartbeat/wake     run one now: 202 {"name", "id"}
//	GET  /v1/heartbeat/history  recent runs, newest first (?limit=20, at most 500)
//
// Errors are RFC 9457 problem details written by api/problem. The routes
// do no authentication: the api server mounts them behind the admin token.
func (h *Heartbeat) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/heartbeat", h.httpStatus)
	mux.HandleFunc("POST /v1/heartbeat/wake", h.httpWake)
	mux.HandleFunc("GET /v1/heartbeat/history", h.httpHistory)
}

func (h *Heartbeat) httpStatus(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), serviceTimeout)
	defer cancel()
	st, err := h.Status(ctx)
	if err != nil {
		h.unavailable(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *Heartbeat) httpWake(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), serviceTimeout)
	defer cancel()
	pub, err := h.Wake(ctx)
	if err != nil {
		h.unavailable(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, WakeResult{Name: h.cfg.Name, ID: pub.ID})
}

func (h *Heartbeat) httpHistory(w http.ResponseWriter, r *http.Request) {
	limit := DefaultHistoryLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxHistoryLimit {
			detail := strconv.Quote(v) + " is not a number from 1 to " + strconv.Itoa(MaxHistoryLimit)
			problem.Invalid(w, "limit: "+detail, problem.FieldError{Field: "limit", Detail: detail})
			return
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), serviceTimeout)
	defer cancel()
	runs, err := History(ctx, h.bus, h.cfg.Name, limit)
	if err != nil {
		h.unavailable(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, HistoryResult{Runs: orEmpty(runs)})
}

// unavailable answers 503 for a bus failure: the client may retry.
func (h *Heartbeat) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	h.log.Warn("heartbeat HTTP request failed", zap.String("path", r.URL.Path), zap.Error(err))
	problem.Unavailable(w, 5*time.Second, "the bus is unavailable: "+err.Error()+"; retry shortly")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
