package console

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// jobCheck is the answer of POST /jobs/check: what the save of the job
// form would meet (the API's errors by field, the rest as Other) and the
// next fire times in the job's zone. The form's script shows it as text.
type jobCheck struct {
	Errors map[string]string `json:"errors"`
	Other  string            `json:"other,omitempty"`
	Title  string            `json:"title"`
	Next   []string          `json:"next"`
	Note   string            `json:"note,omitempty"`
}

// checkJob checks the job form as typed, without saving: the API's own
// checks of the save (POST or PATCH /v1/jobs with ?dry_run=true, as the
// session's user; ?edit=<id> for a job's edit form) and the next fire
// times, as "Show fire times" shows them. Like "Show fire times" it
// changes nothing, so a read-only session may use it. It answers JSON
// (html/template is not involved: the script inserts it as text).
func (h *handler) checkJob(w http.ResponseWriter, r *http.Request, _ *session) {
	f, err := formFrom(r)
	if err != nil {
		f = jobForm{Errors: map[string]string{}, Other: err.Error()}
	}
	if id := r.URL.Query().Get("edit"); id != "" {
		f.Edit, f.ID = true, id
	}
	if err == nil {
		if err := h.send(jobRequest(r.Context(), f, true), nil, nil); err != nil {
			f.refused(err)
		}
	}
	f.fires(time.Now(), h.schedule)
	out := jobCheck{Errors: f.Errors, Other: f.Other, Title: f.FiresTitle(), Next: f.Next, Note: f.NextNote}
	if out.Next == nil {
		out.Next = []string{}
		if out.Note == "" && strings.TrimSpace(f.Schedule) == "" {
			out.Note = "Type a schedule to see its next five fire times."
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out) // escapes <, > and & too
}
