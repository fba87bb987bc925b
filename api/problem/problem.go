// Package problem writes RFC 9457 problem details
// (application/problem+json), the error body of every agentwork HTTP
// endpoint. It is a leaf package: the api server, the webhook and the
// routes of cron and heartbeat all use it, so their errors look the same.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// ContentType is the media type of a problem details body.
const ContentType = "application/problem+json"

// TypeBase is the prefix of agentwork's problem type URIs; the fragment
// names the section of docs/http.md that explains the problem.
const TypeBase = "https://github.com/agentwork/agentwork/blob/main/docs/http.md#"

// Problem types used by agentwork. A problem without a more specific type
// uses "about:blank", whose title is the HTTP status text (RFC 9457 §4.2.1).
const (
	// TypeValidation: the request body or a parameter failed validation;
	// Errors names each field.
	TypeValidation = TypeBase + "validation"
	// TypeUnauthorized: credentials are missing or wrong.
	TypeUnauthorized = TypeBase + "unauthorized"
	// TypeForbidden: the credential may not request this.
	TypeForbidden = TypeBase + "forbidden"
	// TypeIdempotencyConflict: an idempotency key was reused with another body.
	TypeIdempotencyConflict = TypeBase + "idempotency-conflict"
	// TypeUnavailable: the bus is down; retry after Retry-After seconds.
	TypeUnavailable = TypeBase + "unavailable"
	// TypeStoreFull: the bus's JetStream store has no space (bus.max_store
	// or the disk); nothing was queued.
	TypeStoreFull = TypeBase + "store-full"
)

// Details is an RFC 9457 problem details object with agentwork's two
// extension members, code and errors.
type Details struct {
	// Type is a URI reference identifying the problem type. Default "about:blank".
	Type string `json:"type"`
	// Title is a short summary of the problem type. Default: the status text.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence, and what to do about it.
	Detail string `json:"detail,omitempty"`
	// Instance identifies this occurrence (optional).
	Instance string `json:"instance,omitempty"`
	// Code names the error for programs, where the endpoint has such
	// names (the jobs API's not_found, exists, config_job, ...).
	Code string `json:"code,omitempty"`
	// Errors lists the fields that failed validation.
	Errors []FieldError `json:"errors,omitempty"`
}

// FieldError is one invalid field: its JSON name (dotted for nested fields,
// e.g. "metadata.team") and what is wrong with it.
type FieldError struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// Error makes Details usable as an error.
func (d Details) Error() string {
	if d.Detail != "" {
		return d.Title + ": " + d.Detail
	}
	return d.Title
}

// Write sends d with its status and the problem+json content type. Zero
// Type and Title are filled with "about:blank" and the status text; a zero
// Status is 500.
func Write(w http.ResponseWriter, d Details) {
	if d.Status == 0 {
		d.Status = http.StatusInternalServerError
	}
	if d.Type == "" {
		d.Type = "about:blank"
	}
	if d.Title == "" {
		d.Title = http.StatusText(d.Status)
	}
	body, err := json.Marshal(d)
	if err != nil { // cannot happen: only strings and ints
		body = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500}`)
		d.Status = http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(d.Status)
	_, _ = w.Write(append(body, '\n'))
}

// Error writes a problem of type about:blank: the title is the status text.
func Error(w http.ResponseWriter, status int, detail string) {
	Write(w, Details{Status: status, Detail: detail})
}

// Unavailable writes a 503 with Retry-After (rounded up to whole seconds,
// at least 1) for a dependency that is down, typically the bus.
func Unavailable(w http.ResponseWriter, retryAfter time.Duration, detail string) {
	secs := int((retryAfter + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	Write(w, Details{Type: TypeUnavailable, Title: "Service unavailable", Status: http.StatusServiceUnavailable, Detail: detail})
}

// Invalid writes a 400 validation problem listing errs.
func Invalid(w http.ResponseWriter, detail string, errs ...FieldError) {
	Write(w, Details{Type: TypeValidation, Title: "Invalid request", Status: http.StatusBadRequest, Detail: detail, Errors: errs})
}

// Unauthorized writes a 401 with WWW-Authenticate: Bearer realm="<realm>",
// for a request without the credentials it needs; detail says which.
func Unauthorized(w http.ResponseWriter, realm, detail string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
	Write(w, Details{Type: TypeUnauthorized, Title: "Unauthorized", Status: http.StatusUnauthorized, Detail: detail})
}
