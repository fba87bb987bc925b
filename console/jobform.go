package console

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// fireTimes is how many next fire times the job form shows.
const fireTimes = 5

// jobForm is the data of the job form: what was typed, the API's errors
// next to their fields, and the next fire times in the job's zone.
type jobForm struct {
	Edit     bool // editing job ID; else creating
	ID       string
	Schedule string
	Timezone string
	Prompt   string
	Targets  string // comma-separated
	Tools    string
	Model    string
	At       *time.Time // a one-shot job's time (not editable here)
	Errors   map[string]string
	Other    string // what the API said that names no field of the form
	Next     []string
	NextNote string
}

// jobFields are the fields of the form, as the API's errors name them.
var jobFields = map[string]bool{"id": true, "schedule": true, "at": true, "timezone": true, "prompt": true, "targets": true, "tools": true, "model": true}

// fieldOf matches the field an error of the API starts with: "schedule:",
// "targets[1]:", "tools:".
var fieldOf = regexp.MustCompile(`^([a-z_]+)(?:\[\d+\])?[:.]`)

// fieldErrors splits the API's validation detail ("schedule: ...;
// prompt: missing ...") by the form's fields; what names none is other. A
// part that names no field continues the one before it.
func fieldErrors(detail string) (map[string]string, string) {
	out := map[string]string{}
	var other []string
	last := ""
	for _, part := range strings.Split(detail, "; ") {
		if m := fieldOf.FindStringSubmatch(part); m != nil && jobFields[m[1]] {
			last = m[1]
			if last == "at" {
				last = "schedule"
			}
			if out[last] != "" {
				out[last] += "; "
			}
			out[last] += part
			continue
		}
		if last != "" {
			out[last] += "; " + part
			continue
		}
		other = append(other, part)
	}
	return out, strings.Join(other, "; ")
}

// fires fills the next fire times of f's schedule in its zone, with the
// scheduler's own parser (parse, cron.ParseSchedule in the binary); the
// jitter a job may add is not in them.
func (f *jobForm) fires(now time.Time, parse ScheduleParser) {
	if strings.TrimSpace(f.Schedule) == "" {
		if f.At != nil {
			f.Next = []string{f.At.In(zone(f.Timezone)).Format("Mon 2006-01-02 15:04 MST")}
		}
		return
	}
	loc := zone(f.Timezone)
	if f.Timezone != "" && loc == time.UTC && f.Timezone != "UTC" {
		f.NextNote = "Fire times need a valid time zone."
		return
	}
	if parse == nil {
		f.NextNote = "Fire times are not available here."
		return
	}
	s, err := parse(f.Schedule, loc)
	if err != nil {
		if f.Errors["schedule"] == "" {
			f.Errors["schedule"] = "schedule: " + err.Error()
		}
		return
	}
	t := now
	for range fireTimes {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		f.Next = append(f.Next, t.In(loc).Format("Mon 2006-01-02 15:04 MST"))
	}
}

// zone is the IANA zone tz, or UTC when it is empty or unknown.
func zone(tz string) *time.Location {
	if tz == "" || tz == "Local" {
		return time.UTC
	}
	if loc, err := time.LoadLocation(tz); err == nil {
		return loc
	}
	return time.UTC
}

// list splits a comma- or space-separated field.
func list(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
}

func formFrom(r *http.Request) jobForm {
	return jobForm{
		ID:       strings.TrimSpace(r.PostFormValue("id")),
		Schedule: strings.TrimSpace(r.PostFormValue("schedule")),
		Timezone: strings.TrimSpace(r.PostFormValue("timezone")),
		Prompt:   r.PostFormValue("prompt"),
		Targets:  strings.Join(list(r.PostFormValue("targets")), ", "),
		Tools:    strings.Join(list(r.PostFormValue("tools")), ", "),
		Model:    strings.TrimSpace(r.PostFormValue("model")),
		Errors:   map[string]string{},
	}
}

func (h *handler) renderJobForm(w http.ResponseWriter, status int, v *view, f jobForm) {
	v.Nav = "jobs"
	if f.Edit {
		v.Title = "Edit job " + f.ID
	} else {
		v.Title = "New cron job"
	}
	if f.Errors == nil {
		f.Errors = map[string]string{}
	}
	f.fires(time.Now(), h.schedule)
	v.Data = f
	h.render(w, status, "job_form", v)
}

// newJob shows the empty form.
func (h *handler) newJob(w http.ResponseWriter, r *http.Request, v *view) {
	h.renderJobForm(w, http.StatusOK, v, jobForm{Schedule: r.URL.Query().Get("schedule"), Timezone: r.URL.Query().Get("timezone")})
}

// editJob shows the form of job id, read through GET /v1/jobs/{id}.
func (h *handler) editJob(w http.ResponseWriter, r *http.Request, v *view) {
	id := r.PathValue("id")
	var j job
	if err := h.call(r.Context(), http.MethodGet, "/v1/jobs/"+url.PathEscape(id), nil, &j, nil); err != nil {
		v.Title, v.Error = "Job "+id, "The job could not be read: "+err.Error()
		st := http.StatusBadGateway
		if status(err) == http.StatusNotFound {
			st = http.StatusNotFound
		}
		h.render(w, st, "error", v)
		return
	}
	h.renderJobForm(w, http.StatusOK, v, jobForm{Edit: true, ID: j.Job.ID, Schedule: j.Job.Schedule, At: j.Job.At, Timezone: j.Job.Timezone,
		Prompt: j.Job.Prompt, Targets: strings.Join(j.Job.Targets, ", "), Tools: strings.Join(j.Job.Tools, ", "), Model: j.Job.Model})
}

// saveJob creates a job (POST /v1/jobs) or changes one (PATCH
// /v1/jobs/{id} with a merge patch of the form's fields: an empty
// timezone, targets, tools or model removes it). With "preview" it only
// shows the form again with the next fire times, for a read-only session
// too (it saves nothing); a save needs a session that may write. A refusal shows the
// form again, what was typed kept, each error next to its field.
func (h *handler) saveJob(w http.ResponseWriter, r *http.Request, ss *session) {
	f := formFrom(r)
	id := r.PathValue("id")
	f.Edit = id != ""
	if f.Edit {
		f.ID = id
	}
	v := &view{Who: ss.who, Write: ss.write, CSRF: ss.csrf, Path: r.URL.Path}
	if r.PostFormValue("preview") != "" {
		h.renderJobForm(w, http.StatusOK, v, f)
		return
	}
	if !ss.write {
		h.readOnly(w, ss)
		return
	}
	orNull := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	listOrNull := func(s string) any {
		if l := list(s); len(l) > 0 {
			return l
		}
		return nil
	}
	var err error
	if f.Edit {
		patch := map[string]any{"prompt": f.Prompt, "timezone": orNull(f.Timezone), "targets": listOrNull(f.Targets),
			"tools": listOrNull(f.Tools), "model": orNull(f.Model)}
		if f.Schedule != "" {
			patch["schedule"], patch["at"] = f.Schedule, nil
		}
		raw, _ := json.Marshal(patch)
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPatch, "/v1/jobs/"+url.PathEscape(id), strings.NewReader(string(raw)))
		req.Header.Set("Content-Type", "application/merge-patch+json")
		err = h.send(req, nil, nil)
	} else {
		j := map[string]any{"id": f.ID, "schedule": f.Schedule, "prompt": f.Prompt}
		if f.Timezone != "" {
			j["timezone"] = f.Timezone
		}
		if l := list(f.Targets); len(l) > 0 {
			j["targets"] = l
		}
		if l := list(f.Tools); len(l) > 0 {
			j["tools"] = l
		}
		if f.Model != "" {
			j["model"] = f.Model
		}
		err = h.call(r.Context(), http.MethodPost, "/v1/jobs", j, nil, nil)
	}
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.status < 500 {
			f.Errors, f.Other = fieldErrors(ae.detail)
		} else {
			f.Other = err.Error()
		}
		st := status(err)
		if st < 400 {
			st = http.StatusBadGateway
		}
		h.renderJobForm(w, st, v, f)
		return
	}
	verb := "added"
	if f.Edit {
		verb = "saved"
	}
	h.sessions.setFlash(r, "Job "+f.ID+" "+verb+".")
	http.Redirect(w, r, "/jobs#job-"+url.PathEscape(f.ID), http.StatusSeeOther)
}
