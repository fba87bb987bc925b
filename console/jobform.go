package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
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
	// Revision is the revision of the job's record the edit form was
	// opened at (GET /v1/jobs/{id}'s ETag): the save is made at it
	// (If-Match). 0: none (a save then overwrites whatever is there).
	Revision uint64
	// Theirs, after a save refused because the job changed since the
	// form was opened (412), is the job as it is now.
	Theirs   *jobForm
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

// FiresTitle is the heading of the fire times: in the job's zone.
func (f jobForm) FiresTitle() string {
	if f.Timezone != "" {
		return "Next five fire times in " + f.Timezone
	}
	return "Next five fire times (UTC)"
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

// formOf is the form of job j as the API shows it.
func formOf(j job) jobForm {
	return jobForm{Edit: true, ID: j.Job.ID, Schedule: j.Job.Schedule, At: j.Job.At, Timezone: j.Job.Timezone,
		Prompt: j.Job.Prompt, Targets: strings.Join(j.Job.Targets, ", "), Tools: strings.Join(j.Job.Tools, ", "), Model: j.Job.Model}
}

// readJob reads job id through GET /v1/jobs/{id}, with the revision its
// ETag names.
func (h *handler) readJob(ctx context.Context, id string) (jobForm, error) {
	var j job
	var hdr http.Header
	if err := h.call(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), nil, &j, &hdr); err != nil {
		return jobForm{}, err
	}
	f := formOf(j)
	f.Revision, _ = strconv.ParseUint(strings.Trim(strings.TrimPrefix(hdr.Get("ETag"), "W/"), `"`), 10, 64)
	return f, nil
}

// formFrom is the form as posted; a revision that is not a number is an
// error.
func formFrom(r *http.Request) (jobForm, error) {
	var rev uint64
	if v := r.PostFormValue("revision"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return jobForm{}, fmt.Errorf("the form's revision %q is not a number: open the job's form again", cut(v, 40))
		}
		rev = n
	}
	return jobForm{
		Revision: rev,
		ID:       strings.TrimSpace(r.PostFormValue("id")),
		Schedule: strings.TrimSpace(r.PostFormValue("schedule")),
		Timezone: strings.TrimSpace(r.PostFormValue("timezone")),
		Prompt:   r.PostFormValue("prompt"),
		Targets:  strings.Join(list(r.PostFormValue("targets")), ", "),
		Tools:    strings.Join(list(r.PostFormValue("tools")), ", "),
		Model:    strings.TrimSpace(r.PostFormValue("model")),
		Errors:   map[string]string{},
	}, nil
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
	f, err := h.readJob(r.Context(), id)
	if err != nil {
		v.Title, v.Error = "Job "+id, "The job could not be read: "+err.Error()
		st := http.StatusBadGateway
		if status(err) == http.StatusNotFound {
			st = http.StatusNotFound
		}
		h.render(w, st, "error", v)
		return
	}
	h.renderJobForm(w, http.StatusOK, v, f)
}

// jobRequest is the API request that saves f: POST /v1/jobs with the
// job, or PATCH /v1/jobs/{id} with a merge patch of the form's fields
// (an empty timezone, targets, tools or model removes it) at the revision
// the form was opened at (If-Match, when it has one). dry: ?dry_run=true,
// the API's checks of the save, which write nothing.
func jobRequest(ctx context.Context, f jobForm, dry bool) *http.Request {
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
	method, path, ctype := http.MethodPost, "/v1/jobs", "application/json"
	var body map[string]any
	if f.Edit {
		method, path, ctype = http.MethodPatch, "/v1/jobs/"+url.PathEscape(f.ID), "application/merge-patch+json"
		body = map[string]any{"prompt": f.Prompt, "timezone": orNull(f.Timezone), "targets": listOrNull(f.Targets),
			"tools": listOrNull(f.Tools), "model": orNull(f.Model)}
		if f.Schedule != "" {
			body["schedule"], body["at"] = f.Schedule, nil
		}
	} else {
		body = map[string]any{"id": f.ID, "schedule": f.Schedule, "prompt": f.Prompt}
		if f.Timezone != "" {
			body["timezone"] = f.Timezone
		}
		if l := list(f.Targets); len(l) > 0 {
			body["targets"] = l
		}
		if l := list(f.Tools); len(l) > 0 {
			body["tools"] = l
		}
		if f.Model != "" {
			body["model"] = f.Model
		}
	}
	if dry {
		path += "?dry_run=true"
	}
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, method, path, strings.NewReader(string(raw)))
	req.Header.Set("Content-Type", ctype)
	if f.Edit && f.Revision != 0 {
		req.Header.Set("If-Match", strconv.Quote(strconv.FormatUint(f.Revision, 10)))
	}
	return req
}

// refused puts the API's refusal of f next to the fields it names; what
// names none is Other. A new job's taken id is the id's.
func (f *jobForm) refused(err error) {
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.status == http.StatusConflict && !f.Edit:
		f.Errors = map[string]string{"id": "id: " + ae.detail}
	case errors.As(err, &ae) && ae.status < 500:
		f.Errors, f.Other = fieldErrors(ae.detail)
	default:
		f.Other = err.Error()
	}
}

// saveJob creates a job (POST /v1/jobs) or changes one (PATCH
// /v1/jobs/{id}, see jobRequest). With "preview" it only shows the form
// again with the next fire times, for a read-only session too (it saves
// nothing); a save needs a session that may write. A refusal shows the
// form again, what was typed kept, each error next to its field. When the
// job changed since the form was opened (412), nothing is overwritten:
// the form comes back with what was typed and the job as it is now, at
// its new revision, so that saving again replaces it.
func (h *handler) saveJob(w http.ResponseWriter, r *http.Request, ss *session) {
	id := r.PathValue("id")
	f, err := formFrom(r)
	if err != nil {
		h.sessions.setFlash(r, "Refused: "+err.Error())
		http.Redirect(w, r, "/jobs/"+url.PathEscape(id)+"/edit", http.StatusSeeOther)
		return
	}
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
	if err := h.send(jobRequest(r.Context(), f, false), nil, nil); err != nil {
		st := status(err)
		if st == http.StatusPreconditionFailed && f.Edit {
			h.jobConflict(w, r, v, f)
			return
		}
		f.refused(err)
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

// jobConflict answers a save of f refused because the job changed since
// the form was opened: 409 with the form as typed, at the job's revision
// now, and the job as it is now beside it.
func (h *handler) jobConflict(w http.ResponseWriter, r *http.Request, v *view, f jobForm) {
	theirs, err := h.readJob(r.Context(), f.ID)
	if err != nil {
		v.Title, v.Error = "Job "+f.ID, "Not saved: the job changed since you opened it, and it could not be read again: "+err.Error()
		st := status(err)
		if st == 0 {
			st = http.StatusBadGateway
		}
		h.render(w, st, "error", v)
		return
	}
	f.Theirs, f.Revision = &theirs, theirs.Revision
	v.Error = fmt.Sprintf("Not saved: someone else changed this job since you opened it (it is at revision %d now). "+
		"Their version is shown below and what you typed is kept in the form: merge the two and save again, which replaces theirs.", theirs.Revision)
	h.renderJobForm(w, http.StatusConflict, v, f)
}
