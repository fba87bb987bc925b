package cron

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools/schedule"
)

// maxBody bounds request bodies of the HTTP API.
const maxBody = 1 << 20

// Routes mounts the jobs API on mux (Go 1.22+ patterns). The caller wraps
// mux with admin authentication.
//
//	GET    /v1/jobs                  list, a page of ?limit= (100, at most
//	                                 1000) jobs ?after= an id, with
//	                                 ?budget=true only those with a daily
//	                                 token budget; a Link header
//	                                 (rel="next") names the next page
//	POST   /v1/jobs                  add (a Job; 201, ETag: its revision);
//	                                 through the MCP server (api.Actor) of
//	                                 origin mcp
//	GET    /v1/jobs/{id}             show; ETag: the revision of its record
//	PATCH  /v1/jobs/{id}             update (JSON merge patch); with
//	                                 If-Match: <revision> only while it is
//	                                 at that revision (412 otherwise)
//	DELETE /v1/jobs/{id}             delete (204); If-Match as PATCH
//	POST   /v1/jobs/{id}/run         run now (202); an Idempotency-Key
//	                                 header runs it once per key
//	POST   /v1/jobs/{id}/pause       pause ({"reason": ...} optional)
//	POST   /v1/jobs/{id}/resume      resume
//	GET    /v1/jobs/{id}/history     events, newest first (?limit=20)
//
// POST and PATCH with ?dry_run=true check the job as they would write it,
// write nothing, and answer 200 with the job as it would be (the
// console's form checks what is typed with it).
//
// Errors are RFC 9457 problem details written by api/problem, with the
// Error's code.
func (s *Scheduler) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		limit := 0
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxListLimit {
				problem.Invalid(w, "invalid job list query", problem.FieldError{Field: "limit", Detail: fmt.Sprintf("%q: want a number from 1 to %d", v, MaxListLimit)})
				return
			}
			limit = n
		}
		lq := ListQuery{After: q.Get("after"), Limit: limit}
		if v := q.Get("budget"); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				problem.Invalid(w, "invalid job list query", problem.FieldError{Field: "budget", Detail: fmt.Sprintf("%q: want true (only the jobs with a daily token budget) or false", v)})
				return
			}
			lq.Budget = b
		}
		page, more, err := s.List(r.Context(), lq)
		if err == nil && more && len(page) > 0 {
			// The next page, as RFC 8288 links it.
			next := url.Values{"after": {page[len(page)-1].Job.ID}}
			if limit > 0 {
				next.Set("limit", strconv.Itoa(limit))
			}
			if lq.Budget {
				next.Set("budget", "true")
			}
			w.Header().Set("Link", fmt.Sprintf(`</v1/jobs?%s>; rel="next"`, next.Encode()))
		}
		s.httpFunc(http.StatusOK, func(*http.Request) (any, error) { return page, err })(w, r)
	})
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		dry, err := dryRun(r)
		created := http.StatusCreated
		if dry {
			created = http.StatusOK
		}
		s.httpRev(created, func(r *http.Request) (any, uint64, error) {
			if err != nil {
				return nil, 0, err
			}
			body, err := readBody(r)
			if err != nil {
				return nil, 0, err
			}
			var j Job
			if err := decodeStrict(body, &j); err != nil {
				return nil, 0, apiErr(ErrInvalid, "job: %v", err)
			}
			if a, ok := api.ActorFrom(r.Context()); ok && a.Via == OriginMCP {
				return s.add(r.Context(), j, &schedule.Owner{Name: a.Name, Credential: a.Credential}, OriginMCP, dry)
			} else if ok && a.Credential != "" {
				// A credential's console session: the job acts for it,
				// with the runner's tools (no grant names tools for the
				// console).
				if len(j.Tools) > 0 {
					return nil, 0, consoleTools(a.Credential)
				}
				return s.add(r.Context(), j, &schedule.Owner{Name: a.Name, Credential: a.Credential}, OriginConsole, dry)
			}
			return s.add(r.Context(), j, nil, OriginAPI, dry)
		})(w, r)
	})
	mux.HandleFunc("GET /v1/jobs/{id}", s.httpRev(http.StatusOK, func(r *http.Request) (any, uint64, error) {
		return s.getRev(r.Context(), r.PathValue("id"))
	}))
	mux.HandleFunc("PATCH /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		at, ok := api.IfMatch(w, r)
		if !ok {
			return
		}
		dry, err := dryRun(r)
		s.httpRev(http.StatusOK, func(r *http.Request) (any, uint64, error) {
			if err != nil {
				return nil, 0, err
			}
			body, err := readBody(r)
			if err != nil {
				return nil, 0, err
			}
			if a, ok := api.ActorFrom(r.Context()); ok && a.Via == OriginConsole && a.Credential != "" {
				var patch map[string]json.RawMessage
				if json.Unmarshal(body, &patch) == nil {
					if t, set := patch["tools"]; set && string(t) != "null" {
						return nil, 0, consoleTools(a.Credential)
					}
				}
			}
			return s.update(r.Context(), r.PathValue("id"), body, write{ifMatch: at, dryRun: dry})
		})(w, r)
	})
	mux.HandleFunc("DELETE /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		at, ok := api.IfMatch(w, r)
		if !ok {
			return
		}
		s.httpFunc(http.StatusNoContent, func(r *http.Request) (any, error) {
			return nil, s.delete(r.Context(), r.PathValue("id"), at)
		})(w, r)
	})
	mux.HandleFunc("POST /v1/jobs/{id}/run", s.httpFunc(http.StatusAccepted, func(r *http.Request) (any, error) {
		key := strings.Trim(r.Header.Get("Idempotency-Key"), `"`)
		if len(key) > 256 {
			return nil, apiErr(ErrBadRequest, "Idempotency-Key: %d characters; at most 256", len(key))
		}
		return s.RunNowKey(r.Context(), r.PathValue("id"), key)
	}))
	mux.HandleFunc("POST /v1/jobs/{id}/pause", s.httpFunc(http.StatusOK, func(r *http.Request) (any, error) {
		var in struct {
			Reason string `json:"reason"`
		}
		body, err := readBody(r)
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(body)) > 0 {
			if err := decodeStrict(body, &in); err != nil {
				return nil, apiErr(ErrBadRequest, "body: %v (want {\"reason\": \"...\"})", err)
			}
		}
		return s.Pause(r.Context(), r.PathValue("id"), in.Reason)
	}))
	mux.HandleFunc("POST /v1/jobs/{id}/resume", s.httpFunc(http.StatusOK, func(r *http.Request) (any, error) {
		return s.Resume(r.Context(), r.PathValue("id"))
	}))
	mux.HandleFunc("GET /v1/jobs/{id}/history", s.httpFunc(http.StatusOK, func(r *http.Request) (any, error) {
		limit := 0
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1000 {
				return nil, apiErr(ErrBadRequest, "limit: %q: want 1-1000", v)
			}
			limit = n
		}
		out, err := s.History(r.Context(), r.PathValue("id"), limit)
		if out == nil {
			out = []agentwork.Record{}
		}
		return out, err
	}))
}

func (s *Scheduler) httpFunc(okStatus int, fn func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		out, err := fn(r)
		if err != nil {
			writeError(w, r, err)
			return
		}
		if okStatus == http.StatusNoContent {
			w.WriteHeader(okStatus)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(okStatus)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	}
}

// httpRev is httpFunc for an answer about one job's record: its revision,
// when fn gives one (not 0), is the answer's ETag.
func (s *Scheduler) httpRev(okStatus int, fn func(r *http.Request) (any, uint64, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		out, rev, err := fn(r)
		if err == nil && rev != 0 {
			w.Header().Set("ETag", api.ETag(rev))
		}
		s.httpFunc(okStatus, func(*http.Request) (any, error) { return out, err })(w, r)
	}
}

// dryRun reads ?dry_run= (true, 1, false, ...; absent: false).
func dryRun(r *http.Request) (bool, error) {
	v := r.URL.Query().Get("dry_run")
	if v == "" {
		return false, nil
	}
	dry, err := strconv.ParseBool(v)
	if err != nil {
		return false, apiErr(ErrBadRequest, "dry_run: %q: want true or false", v)
	}
	return dry, nil
}

// writeError answers an API error as problem details with its status and
// code; another error is a 500.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := bus.AsServiceError(err)
	d := problem.Details{Status: e.Status, Detail: e.Detail, Code: e.Code, Instance: r.URL.Path}
	if e.Status == http.StatusServiceUnavailable {
		d.Type, d.Title = problem.TypeUnavailable, "Service unavailable"
		w.Header().Set("Retry-After", "1")
	}
	problem.Write(w, d)
}

var errUnsupportedMedia = &Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type"}

func readBody(r *http.Request) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && mt != "application/merge-patch+json") {
			return nil, apiErr(errUnsupportedMedia, "Content-Type %q: send application/json", ct)
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, apiErr(ErrBadRequest, "body: %v", err)
	}
	if len(body) > maxBody {
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Detail: fmt.Sprintf("body over %d bytes", maxBody)}
	}
	return body, nil
}

func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// consoleTools is the refusal of a job's tools set in the console session
// of a credential (not the admin's).
func consoleTools(credential string) error {
	return apiErr(ErrForbidden, "credential %q may not set a job's tools in the console: its jobs run with the runner's tools (runner.tools); leave tools empty, or ask the operator", credential)
}
