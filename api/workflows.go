package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/workflow"
)

// Caller is a caller of POST /v1/workflows/{name}/runs authenticated by a
// credential that is not the admin token (a webhook token or signing
// secret).
type Caller struct {
	// Name names the credential (in logs and the run's cause).
	Name string
	// Admin is set for the admin token (Server.Authenticate).
	Admin bool
	// Allows reports whether the credential may request kind (a source,
	// "workflow" here) under name.
	Allows func(kind, name string) bool
	// SignedID is the webhook-id of a signed request ("" for a bearer
	// token): the run's idempotency key when the request names none.
	SignedID string
}

// CallerAuth authenticates r, whose body is body (a signature covers
// it), or says why not (the server answers 401 with the error's text).
type CallerAuth func(r *http.Request, body []byte) (Caller, error)

// MaxWorkflowBody bounds the body of a workflow run request.
const MaxWorkflowBody = 256 << 10

// workflowRoutes mounts the admin routes of workflows and their runs.
func (s *Server) workflowRoutes(admin *http.ServeMux) {
	if s.deps.Workflows == nil {
		return
	}
	admin.HandleFunc("GET /v1/workflows", s.listWorkflows)
	admin.HandleFunc("GET /v1/workflows/{name}", s.showWorkflow)
	admin.HandleFunc("GET /v1/workflow-runs", s.listWorkflowRuns)
	admin.HandleFunc("GET /v1/workflow-runs/{id}", s.getWorkflowRun)
	admin.HandleFunc("POST /v1/workflow-runs/{id}/cancel", s.cancelWorkflowRun)
	admin.HandleFunc("POST /v1/workflow-runs/{id}/retry", s.retryWorkflowRun)
}

// workflowPublicRoutes mounts POST /v1/workflows/{name}/runs, which
// authenticates its callers itself: the admin token, or a webhook
// credential granted kind workflow and the workflow's name.
func (s *Server) workflowPublicRoutes(root *http.ServeMux) {
	if s.deps.Workflows == nil {
		return
	}
	root.HandleFunc("POST /v1/workflows/{name}/runs", s.startWorkflowRun)
}

// workflowLocalRoutes mounts POST /v1/workflows/{name}/runs in process
// (Local): the caller is the request's Actor (the console's logged-in
// user), its credential's grant checked as over HTTP; without an Actor
// it is the admin, as every Local route.
func (s *Server) workflowLocalRoutes(local *http.ServeMux) {
	if s.deps.Workflows == nil {
		return
	}
	local.HandleFunc("POST /v1/workflows/{name}/runs", s.startWorkflowRunLocal)
}

// workflowProblem writes err of the engine's API as a problem.
func workflowProblem(w http.ResponseWriter, err error) {
	var fields []problem.FieldError
	for _, e := range flattenErr(err) {
		if ie, ok := errors.AsType[*workflow.InputError](e); ok {
			fields = append(fields, problem.FieldError{Field: "inputs." + ie.Field, Detail: ie.Msg})
		}
	}
	if len(fields) > 0 {
		problem.Invalid(w, strings.ReplaceAll(err.Error(), "\n", "; "), fields...)
		return
	}
	se := workflow.ServiceError(err)
	if bus.IsStoreFull(err) {
		problem.Write(w, problem.Details{Type: problem.TypeStoreFull, Title: "Insufficient storage", Status: http.StatusInsufficientStorage,
			Detail: "the bus's store is full (bus.max_store, or the disk): nothing was stored; free space or raise bus.max_store, then retry"})
		return
	}
	problem.Write(w, problem.Details{Status: se.Status, Code: se.Code, Detail: se.Detail})
}

func flattenErr(err error) []error {
	if many, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range many.Unwrap() {
			out = append(out, flattenErr(e)...)
		}
		return out
	}
	return []error{err}
}

func (s *Server) listWorkflows(w http.ResponseWriter, _ *http.Request) {
	list := s.deps.Workflows.Summaries()
	if list == nil {
		list = []workflow.Summary{}
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) showWorkflow(w http.ResponseWriter, r *http.Request) {
	def, err := s.deps.Workflows.Definition(r.PathValue("name"))
	if err != nil {
		workflowProblem(w, err)
		return
	}
	writeJSON(w, http.StatusOK, def)
}

func (s *Server) listWorkflowRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := workflow.Filter{Workflow: q.Get("workflow"), Status: workflow.RunStatus(q.Get("status"))}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			problem.Invalid(w, "limit: want 1 to 1000", problem.FieldError{Field: "limit", Detail: "want 1 to 1000"})
			return
		}
		f.Limit = n
	}
	switch f.Status {
	case "", workflow.RunPending, workflow.RunRunning, workflow.RunWaiting, workflow.RunDone, workflow.RunFailed, workflow.RunCancelled, workflow.RunTimedOut:
	default:
		const want = "want pending, running, waiting, done, failed, cancelled or timed_out"
		problem.Invalid(w, "status: "+want, problem.FieldError{Field: "status", Detail: want})
		return
	}
	runs, err := s.deps.Workflows.List(r.Context(), f)
	if err != nil {
		workflowProblem(w, err)
		return
	}
	if runs == nil {
		runs = []workflow.Run{}
	}
	writeJSON(w, http.StatusOK, runs)
}

func (s *Server) getWorkflowRun(w http.ResponseWriter, r *http.Request) {
	run, err := s.deps.Workflows.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		workflowProblem(w, err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

func (s *Server) cancelWorkflowRun(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Reason string `json:"reason"`
	}
	if !readOptionalJSON(w, r, &body) {
		return
	}
	if body.Reason == "" {
		body.Reason = "cancelled through the HTTP API"
	}
	run, err := s.deps.Workflows.Cancel(r.Context(), r.PathValue("id"), body.Reason)
	if err != nil {
		workflowProblem(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, run)
}

func (s *Server) retryWorkflowRun(w http.ResponseWriter, r *http.Request) {
	var body struct {
		From string `json:"from"`
	}
	if !readOptionalJSON(w, r, &body) {
		return
	}
	key, err := requestKey(r.Header, "")
	if err != nil {
		problem.Invalid(w, "the Idempotency-Key header is invalid: "+err.Error(), problem.FieldError{Field: "Idempotency-Key", Detail: err.Error()})
		return
	}
	run, err := s.deps.Workflows.RetryRequest(r.Context(), r.PathValue("id"), body.From, key)
	if err != nil {
		workflowProblem(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, run)
}

// startResponse is the 202 body of POST /v1/workflows/{name}/runs.
type startResponse struct {
	ID string `json:"id"`
	// Duplicate is true when the idempotency key named a run that exists:
	// no new run was started.
	Duplicate bool `json:"duplicate,omitempty"`
}

func (s *Server) startWorkflowRun(w http.ResponseWriter, r *http.Request) {
	s.startRun(w, r, false)
}

func (s *Server) startWorkflowRunLocal(w http.ResponseWriter, r *http.Request) {
	s.startRun(w, r, true)
}

// startRun starts a run of the workflow the path names. Over HTTP (local
// false) the caller is the admin token or a webhook credential
// (Deps.Callers), and a credential's run is a webhook run; in process
// (local) the caller is the request's Actor, and its run is a manual run
// that acts for the actor's credential, if any (Cause.Credential).
func (s *Server) startRun(w http.ResponseWriter, r *http.Request, local bool) {
	name := r.PathValue("name")
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxWorkflowBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			problem.Error(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", MaxWorkflowBody))
			return
		}
		problem.Error(w, http.StatusBadRequest, "could not read the body: "+err.Error())
		return
	}
	caller := Caller{Name: "admin"}
	actor, _ := ActorFrom(r.Context())
	switch {
	case local && actor.Credential != "":
		c, found := Caller{}, false
		if s.deps.Credentials != nil {
			c, _, found = s.deps.Credentials(actor.Credential)
		}
		if !found || c.Allows == nil {
			forbidden(w, fmt.Sprintf("credential %q is no longer configured, so it may start no run; log in again with a configured token", actor.Credential))
			return
		}
		caller = c
	case local:
	case !s.isAdmin(r):
		if s.deps.Callers == nil {
			problem.Unauthorized(w, "agentwork", "send Authorization: Bearer <admin token>, or a webhook credential (webhook.tokens, webhook.secrets) granted sources: [workflow]")
			return
		}
		if caller, err = s.deps.Callers(r, body); err != nil {
			problem.Unauthorized(w, "agentwork", err.Error())
			return
		}
	}
	def, err := s.deps.Workflows.Definition(name)
	if err != nil {
		if caller.Allows != nil {
			// A credential learns nothing of the workflows it may not start.
			if !caller.Allows(bus.SourceWorkflow, name) {
				forbidden(w, fmt.Sprintf("credential %q may not start workflow %q (grant it sources: [workflow] and the name)", caller.Name, name))
				return
			}
		}
		workflowProblem(w, err)
		return
	}
	if caller.Allows != nil {
		if !caller.Allows(bus.SourceWorkflow, name) {
			forbidden(w, fmt.Sprintf("credential %q may not start workflow %q (grant it sources: [workflow] and the name)", caller.Name, name))
			return
		}
		if !def.HasWebhook() {
			forbidden(w, fmt.Sprintf("workflow %q has no webhook trigger, so only the admin token may start it; add `on: [{webhook: {}}]` to let credentials start it", name))
			return
		}
	}
	var req struct {
		Inputs map[string]any `json:"inputs"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := checkJSONType(r.Header.Get("Content-Type")); err != nil {
			w.Header().Set("Accept-Post", "application/json")
			problem.Error(w, http.StatusUnsupportedMediaType, err.Error())
			return
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		dec.UseNumber()
		if err := dec.Decode(&req); err != nil {
			problem.Invalid(w, "the body is not {\"inputs\": {...}}: "+err.Error(), problem.FieldError{Field: "inputs", Detail: err.Error()})
			return
		}
	}
	inputs, err := plainNumbers(req.Inputs)
	if err != nil {
		problem.Invalid(w, err.Error(), problem.FieldError{Field: "inputs", Detail: err.Error()})
		return
	}
	key, err := requestKey(r.Header, caller.SignedID)
	if err != nil {
		problem.Invalid(w, "the Idempotency-Key header is invalid: "+err.Error(), problem.FieldError{Field: "Idempotency-Key", Detail: err.Error()})
		return
	}
	cause := workflow.Cause{Kind: workflow.CauseManual, ID: key}
	switch {
	case local:
		cause.Credential = actor.Credential
	case caller.Allows != nil:
		cause = workflow.Cause{Kind: workflow.CauseWebhook, ID: caller.Name, Credential: caller.Name}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	run, created, err := s.deps.Workflows.Start(ctx, name, inputs, workflow.StartOptions{IdempotencyKey: key, Cause: cause})
	if err != nil {
		s.log.Debug("workflow run not started")
		workflowProblem(w, err)
		return
	}
	if !created && key != "" {
		if checked, err := workflow.CheckInputs(def, inputs); err == nil && !sameJSON(checked, run.Inputs) {
			problem.Write(w, problem.Details{Type: problem.TypeIdempotencyConflict, Title: "Idempotency key reused", Status: http.StatusUnprocessableEntity,
				Detail: "this idempotency key (webhook-id or Idempotency-Key) started a run with other inputs; use a new key for a new run"})
			return
		}
	}
	w.Header().Set("Location", "/v1/workflow-runs/"+run.ID)
	writeJSON(w, http.StatusAccepted, startResponse{ID: run.ID, Duplicate: !created})
}

func forbidden(w http.ResponseWriter, detail string) {
	problem.Write(w, problem.Details{Type: problem.TypeForbidden, Status: http.StatusForbidden, Title: "Forbidden", Detail: detail})
}

// requestKey is the Idempotency-Key header (a quoted or bare string), else
// signedID, else the webhook-id header; "" if none.
func requestKey(h http.Header, signedID string) (string, error) {
	key := h.Get("Idempotency-Key")
	if len(key) >= 2 && key[0] == '"' && key[len(key)-1] == '"' {
		key = key[1 : len(key)-1]
	}
	if key == "" && len(h.Values("Idempotency-Key")) > 0 {
		return "", errors.New("empty; send a unique value per request, e.g. a UUID")
	}
	if key == "" {
		key = signedID
	}
	if key == "" {
		key = h.Get("webhook-id")
	}
	if len(key) > 256 {
		return "", fmt.Errorf("%d characters; at most 256", len(key))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c == 0x7f {
			return "", errors.New("contains control characters")
		}
	}
	return key, nil
}

func checkJSONType(ct string) error {
	if ct == "" {
		return errors.New("no Content-Type; send application/json")
	}
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(strings.ToLower(mt))
	if mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return fmt.Errorf("content type %q is not JSON; send application/json", mt)
	}
	return nil
}

// readOptionalJSON decodes an optional JSON body into v (an empty body
// leaves v as is); it writes a 400 and returns false on a bad one.
func readOptionalJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		problem.Error(w, http.StatusBadRequest, "could not read the body: "+err.Error())
		return false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		problem.Invalid(w, "the body is not valid: "+err.Error())
		return false
	}
	return true
}

// plainNumbers turns the json.Numbers of v into float64 (as the engine's
// inputs are), refusing numbers a float64 cannot hold.
func plainNumbers(in map[string]any) (map[string]any, error) {
	var conv func(v any) (any, error)
	conv = func(v any) (any, error) {
		switch x := v.(type) {
		case json.Number:
			f, err := x.Float64()
			if err != nil {
				return nil, fmt.Errorf("the number %s is out of range", x)
			}
			return f, nil
		case map[string]any:
			for k, e := range x {
				c, err := conv(e)
				if err != nil {
					return nil, err
				}
				x[k] = c
			}
		case []any:
			for i, e := range x {
				c, err := conv(e)
				if err != nil {
					return nil, err
				}
				x[i] = c
			}
		}
		return v, nil
	}
	for k, v := range in {
		c, err := conv(v)
		if err != nil {
			return nil, fmt.Errorf("inputs.%s: %w", k, err)
		}
		in[k] = c
	}
	return in, nil
}

func sameJSON(a, b map[string]any) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	ra, err1 := json.Marshal(a)
	rb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ra, rb)
}
