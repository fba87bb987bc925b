package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
)

// Routes registers the heartbeat's HTTP API on mux (Go 1.22 patterns):
//
//	GET  /v1/heartbeat          the Status
//	POST /v1/heartbeat/wake     run one now: 202 {"name", "id"}
//	GET  /v1/heartbeat/history  recent runs, newest first (?limit=20, at most 500)
//	POST /v1/heartbeat/pause    pause the scheduled heartbeats ({"reason": ...} optional): 200 the Status
//	POST /v1/heartbeat/resume   lift a pause (by hand or the budget's): 200 the Status
//	GET  /v1/heartbeat/checklist the checklist (a ChecklistView); ETag: its revision
//	PUT  /v1/heartbeat/checklist replace it with the body, with If-Match: <revision>
//	                            (required: 428 without; 412 when it changed since),
//	                            or If-None-Match: * to create it: 200 the ChecklistView
//
// Errors are RFC 9457 problem details written by api/problem. The routes
// do no authentication: the api server mounts them behind the admin token
// (changing the checklist takes the same right as pause and resume: the
// admin token, or a surface's Actor whose grant it checked, such as a
// console session with console: write).
func (h *Heartbeat) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/heartbeat", h.httpStatus(h.Status))
	mux.HandleFunc("POST /v1/heartbeat/wake", h.httpWake)
	mux.HandleFunc("GET /v1/heartbeat/history", h.httpHistory)
	mux.HandleFunc("POST /v1/heartbeat/pause", h.httpPause)
	mux.HandleFunc("POST /v1/heartbeat/resume", h.httpStatus(h.Resume))
	mux.HandleFunc("GET /v1/heartbeat/checklist", h.httpChecklist)
	mux.HandleFunc("PUT /v1/heartbeat/checklist", h.httpPutChecklist)
}

func (h *Heartbeat) httpChecklist(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), serviceTimeout)
	defer cancel()
	v, err := h.Checklist(ctx)
	if err != nil {
		h.unavailable(w, r, err)
		return
	}
	writeChecklist(w, v)
}

// httpPutChecklist replaces the checklist at the revision the client
// read. A change without one is refused (428) rather than taken as "write
// over whatever is there": the checklist is the heartbeat's instructions,
// changed by people and (in memory) by the agent's checklist_update, and a
// blind write would silently drop a change made meanwhile; asking for the
// revision costs a script one GET.
func (h *Heartbeat) httpPutChecklist(w http.ResponseWriter, r *http.Request) {
	if api.RefuseChecklistChange(w, r) {
		return
	}
	im := strings.TrimSpace(r.Header.Get("If-Match"))
	create := im == "" && strings.TrimSpace(r.Header.Get("If-None-Match")) == "*" // only while there is none
	rev := strings.Trim(strings.TrimPrefix(im, "W/"), `"`)
	if rev == "*" {
		rev = "" // "whatever it is now" is the blind write refused below
	}
	if rev == "" && !create {
		problem.Write(w, problem.Details{Status: http.StatusPreconditionRequired, Code: "revision_required", Instance: r.URL.Path,
			Detail: "a checklist change needs the revision it was made at, so that a change made meanwhile is not lost: " +
				"GET /v1/heartbeat/checklist first and send its ETag in If-Match (or If-None-Match: * to create a checklist that does not exist)"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxChecklistBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			problem.Write(w, problem.Details{Status: http.StatusRequestEntityTooLarge, Code: ErrChecklistTooLarge.Code, Instance: r.URL.Path,
				Detail: "the checklist is at most " + strconv.Itoa(MaxChecklistBytes>>10) + " KiB: shorten it"})
			return
		}
		problem.Error(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	by := "http"
	if a, ok := api.ActorFrom(r.Context()); ok {
		by = a.Via + ":" + a.Name
	}
	ctx, cancel := context.WithTimeout(r.Context(), serviceTimeout)
	defer cancel()
	v, err := h.WriteChecklist(ctx, string(body), rev, by)
	if err != nil {
		if se, ok := errors.AsType[*bus.ServiceError](err); ok {
			problem.Write(w, problem.Details{Status: se.Status, Code: se.Code, Detail: se.Detail, Instance: r.URL.Path})
			return
		}
		h.unavailable(w, r, err)
		return
	}
	writeChecklist(w, v)
}

// writeChecklist answers 200 with v, its revision as the ETag.
func writeChecklist(w http.ResponseWriter, v ChecklistView) {
	if v.Revision != "" {
		w.Header().Set("ETag", strconv.Quote(v.Revision))
	}
	writeJSON(w, http.StatusOK, v)
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
