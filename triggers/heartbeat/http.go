package heartbeat

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"go.uber.org/zap"
)

// Routes registers the heartbeat's HTTP API on mux (Go 1.22 patterns):
//
//	GET  /v1/heartbeat          the Status
//	POST /v1/heartbeat/wake     run one now: 202 {"name", "id"}
//	GET  /v1/heartbeat/history  recent runs, newest first (?limit=20, at most 500)
//
// Errors are RFC 9457 problem details (application/problem+json). The
// routes do no authentication: the caller wraps mux with the admin check.
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
			writeProblem(w, r, http.StatusBadRequest, "Bad limit", "limit: "+strconv.Quote(v)+" is not a number from 1 to "+strconv.Itoa(MaxHistoryLimit))
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
	w.Header().Set("Retry-After", "5")
	writeProblem(w, r, http.StatusServiceUnavailable, "The bus is unavailable", err.Error()+"; retry shortly")
}

// problem is an RFC 9457 problem details object.
type problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
}

func writeProblem(w http.ResponseWriter, r *http.Request, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(problem{Type: "about:blank", Title: title, Status: status, Detail: detail, Instance: r.URL.Path})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
