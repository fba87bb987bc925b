package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"io"
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
//	POST /v1/heartbeat/pause    pause the scheduled heartbeats ({"reason": ...} optional): 200 the Status
//	POST /v1/heartbeat/resume   lift a pause (by hand or the budget's): 200 the Status
//
// Errors are RFC 9457 problem details written by api/problem. The routes
// do no authentication: the api server mounts them behind the admin token.
func (h *Heartbeat) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/heartbeat", h.httpStatus(h.Status))
	mux.HandleFunc("POST /v1/heartbeat/wake", h.httpWake)
	mux.HandleFunc("GET /v1/heartbeat/history", h.httpHistory)
	mux.HandleFunc("POST /v1/heartbeat/pause", h.httpPause)
	mux.HandleFunc("POST /v1/heartbeat/resume", h.httpStatus(h.Resume))
}

// httpStatus answers 200 with the Status that fn returns.
func (h *Heartbeat) httpStatus(fn func(context.Context) (Status, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), serviceTimeout)
		defer cancel()
		st, err := fn(ctx)
		if err != nil {
			h.unavailable(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	}
}

// maxPauseBody bounds the body of a pause.
const maxPauseBody = 4 << 10

func (h *Heartbeat) httpPause(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Reason string `json:"reason"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxPauseBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil && !errors.Is(err, io.EOF) {
		problem.Invalid(w, "body: "+err.Error()+` (want {"reason": "..."} or no body)`)
		return
	}
	h.httpStatus(func(ctx context.Context) (Status, error) { return h.Pause(ctx, in.Reason) })(w, r)
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
