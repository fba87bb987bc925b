package problem_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentwork/agentwork/api/problem"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		write      func(http.ResponseWriter)
		status     int
		typ, title string
		retry      string
	}{
		{"error", func(w http.ResponseWriter) { problem.Error(w, 404, "no job x") }, 404, "about:blank", "Not Found", ""},
		{"zero", func(w http.ResponseWriter) { problem.Write(w, problem.Details{}) }, 500, "about:blank", "Internal Server Error", ""},
		{"invalid", func(w http.ResponseWriter) {
			problem.Invalid(w, "bad", problem.FieldError{Field: "prompt", Detail: "required"})
		}, 400, problem.TypeValidation, "Invalid request", ""},
		{"unavailable", func(w http.ResponseWriter) { problem.Unavailable(w, 1500*time.Millisecond, "bus down") }, 503, problem.TypeUnavailable, "Service unavailable", "2"},
		{"unavailable zero", func(w http.ResponseWriter) { problem.Unavailable(w, 0, "bus down") }, 503, problem.TypeUnavailable, "Service unavailable", "1"},
		{"unauthorized", func(w http.ResponseWriter) { problem.Unauthorized(w, "agentwork", "no token") }, 401, problem.TypeUnauthorized, "Unauthorized", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			tt.write(rec)
			if rec.Code != tt.status || rec.Header().Get("Content-Type") != problem.ContentType {
				t.Fatalf("status, content type = %d, %q; want %d, %q", rec.Code, rec.Header().Get("Content-Type"), tt.status, problem.ContentType)
			}
			var d problem.Details
			if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
				t.Fatal(err)
			}
			if d.Status != tt.status || d.Type != tt.typ || d.Title != tt.title {
				t.Errorf("body = %+v, want status %d type %s title %s", d, tt.status, tt.typ, tt.title)
			}
			if got := rec.Header().Get("Retry-After"); got != tt.retry {
				t.Errorf("Retry-After = %q, want %q", got, tt.retry)
			}
			if got := rec.Header().Get("WWW-Authenticate"); (tt.status == 401) != (got == `Bearer realm="agentwork"`) {
				t.Errorf("WWW-Authenticate = %q", got)
			}
		})
	}
}

func TestInvalidFields(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	problem.Invalid(rec, "the task body is invalid", problem.FieldError{Field: "prompt", Detail: "required"})
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	errs, _ := m["errors"].([]any)
	if len(errs) != 1 || errs[0].(map[string]any)["field"] != "prompt" || errs[0].(map[string]any)["detail"] != "required" {
		t.Fatalf("errors = %v, want [{field: prompt, detail: required}]", m["errors"])
	}
}

func TestCode(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	problem.Write(rec, problem.Details{Status: 409, Code: "exists", Detail: "job x exists"})
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil || m["code"] != "exists" {
		t.Fatalf("body %s: want code exists (%v)", rec.Body, err)
	}
	rec = httptest.NewRecorder()
	problem.Error(rec, 404, "no x")
	m = nil
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil || m["code"] != nil {
		t.Fatalf("body %s: want no code member without a code", rec.Body)
	}
}
