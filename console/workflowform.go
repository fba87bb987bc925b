package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/workflow"
)

// The run form of a workflow: one field per declared input, typed as the
// input is, sent as POST /v1/workflows/{name}/runs {"inputs": {...}}
// through the API's handler as the logged-in user (its grant applies).
// How a field's text becomes the input's JSON (runInputs):
//
//   - string: the text as typed; an empty field is not sent (the default,
//     if any, applies; a required input is refused by the API);
//   - number, integer: the text read as a JSON number; text that is not a
//     number is sent as it is, and the API says what it wants;
//   - boolean: a checkbox, always sent (unchecked is false);
//   - array: one value per line, each a string (empty lines dropped); a
//     text that starts with "[" is read as a JSON array instead, for
//     values that are not strings;
//   - object: the text read as a JSON object.
//
// Text that does not parse as what its input wants is sent as a string,
// so the API's own check is the one that refuses it: one validator.
//
// Each form carries a nonce, made when the page is rendered, sent as the
// Idempotency-Key: a double click or a POST sent again starts one run
// (the API answers the second with the first run).

// runField is one input of the run form.
type runField struct {
	Name, Type  string
	Required    bool
	Description string
	Default     string // the declared default, as text
	Value       string // what the field holds: as typed, else the default
	Checked     bool   // a boolean's checkbox
	Error       string // the API's error of this input
}

// runFormData is the data of the run form (on a workflow's page).
type runFormData struct {
	Name   string
	Fields []runField
	Nonce  string
	Other  string // the API's errors that name no field of the form
}

// workflowPage is the data of a workflow's page.
type workflowPage struct {
	Def   workflow.Summary
	Graph *stepGraph
	Form  runFormData
}

// nonceRE is a form's nonce: what randomToken makes (base64url).
var nonceRE = regexp.MustCompile(`^[A-Za-z0-9_-]{16,128}$`)

// inputText is v, a declared default, as the field shows it.
func inputText(typ string, v any) string {
	switch {
	case v == nil:
		return ""
	case typ == workflow.TypeArray:
		if list, ok := v.([]any); ok {
			var lines []string
			for _, x := range list {
				s, ok := x.(string)
				if !ok || strings.ContainsAny(s, "\r\n") || strings.TrimSpace(s) == "" {
					return jsonLine(v)
				}
				lines = append(lines, s)
			}
			return strings.Join(lines, "\n")
		}
	case typ == workflow.TypeObject:
		return jsonText(v)
	}
	if s, ok := v.(string); ok {
		return s
	}
	return jsonLine(v)
}

// jsonLine is v as compact JSON.
func jsonLine(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// newRunForm is the run form of s, its fields holding their defaults.
func newRunForm(s workflow.Summary) runFormData {
	f := runFormData{Name: s.Name, Nonce: randomToken()}
	for _, name := range slices.Sorted(maps.Keys(s.Inputs)) {
		in := s.Inputs[name]
		typ := in.Type
		if typ == "" {
			typ = workflow.TypeString
		}
		fd := runField{Name: name, Type: typ, Required: in.Required, Description: in.Description, Default: inputText(typ, in.Default)}
		fd.Value = fd.Default
		if typ == workflow.TypeBoolean {
			fd.Checked, fd.Value = in.Default == true, ""
		}
		f.Fields = append(f.Fields, fd)
	}
	return f
}

// runInputs reads the posted form r into f's fields (what was typed is
// kept) and returns the inputs to send: see the comment at the top. A
// posted in.<name> that f does not declare is sent too, as a string, so
// the API says it is unknown.
func runInputs(r *http.Request, f *runFormData) map[string]any {
	inputs := map[string]any{}
	declared := map[string]bool{}
	for i := range f.Fields {
		fd := &f.Fields[i]
		declared[fd.Name] = true
		raw := strings.ReplaceAll(r.PostFormValue("in."+fd.Name), "\r\n", "\n")
		if fd.Type == workflow.TypeBoolean {
			fd.Checked = raw != ""
			inputs[fd.Name] = fd.Checked
			continue
		}
		fd.Value = raw
		text := strings.TrimSpace(raw)
		if text == "" {
			continue
		}
		inputs[fd.Name] = typedInput(fd.Type, raw, text)
	}
	for key, vals := range r.PostForm {
		if name, ok := strings.CutPrefix(key, "in."); ok && !declared[name] && len(vals) > 0 {
			inputs[name] = vals[0]
		}
	}
	return inputs
}

// typedInput is the value of an input of type typ typed as raw (text:
// raw trimmed, not empty).
func typedInput(typ, raw, text string) any {
	switch typ {
	case workflow.TypeNumber, workflow.TypeInteger:
		var n json.Number
		if json.Unmarshal([]byte(text), &n) == nil {
			return n
		}
		return text
	case workflow.TypeArray:
		if strings.HasPrefix(text, "[") {
			var list []any
			if decodeNumbers(text, &list) == nil {
				return list
			}
			return text
		}
		list := []any{}
		for line := range strings.SplitSeq(text, "\n") {
			if line = strings.TrimSpace(line); line != "" {
				list = append(list, line)
			}
		}
		return list
	case workflow.TypeObject:
		var obj map[string]any
		if decodeNumbers(text, &obj) == nil && obj != nil {
			return obj
		}
		return text
	}
	return raw
}

// decodeNumbers decodes JSON text into v keeping numbers as written.
func decodeNumbers(text string, v any) error {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("more than one JSON value")
	}
	return nil
}

// readWorkflow reads the definition of name as its summary and its steps'
// graph; on a failure it sets v.Error and returns the status to answer.
func (h *handler) readWorkflow(r *http.Request, v *view, name string) (workflow.Summary, *stepGraph, int) {
	var def workflow.Workflow
	if err := h.call(r.Context(), http.MethodGet, "/v1/workflows/"+url.PathEscape(name), nil, &def, nil); err != nil {
		v.Error = "The workflow could not be read: " + err.Error()
		if st := status(err); st != 0 {
			return workflow.Summary{}, nil, st
		}
		return workflow.Summary{}, nil, http.StatusInternalServerError
	}
	if def.Name == "" {
		def.Name = name
	}
	return workflow.Summarize(&def), drawSteps(def.Steps, nil), 0
}

// workflowDef is a workflow's page: what it is, its steps, and (for a
// session that may change state) the form that starts a run.
func (h *handler) workflowDef(w http.ResponseWriter, r *http.Request, v *view) {
	name := r.PathValue("name")
	v.Title, v.Nav = "Workflow: "+name, "workflows"
	s, graph, code := h.readWorkflow(r, v, name)
	if code != 0 {
		h.render(w, code, "error", v)
		return
	}
	v.Data = workflowPage{Def: s, Graph: graph, Form: newRunForm(s)}
	h.render(w, http.StatusOK, "workflow", v)
}

// startWorkflow starts a run of the workflow the path names with the
// form's inputs, through POST /v1/workflows/{name}/runs as the session's
// user, the form's nonce its Idempotency-Key. Started (or started
// already by this form): to the run's page with a flash. Refused: the
// form again, each of the API's errors under its input, what was typed
// kept, the same nonce (nothing was started with it).
func (h *handler) startWorkflow(w http.ResponseWriter, r *http.Request, ss *session) {
	name := r.PathValue("name")
	v := &view{Who: ss.who, Write: ss.write, CSRF: ss.csrf, Path: r.URL.Path, Nav: "workflows", Title: "Workflow: " + name}
	s, graph, code := h.readWorkflow(r, v, name)
	if code != 0 {
		h.render(w, code, "error", v)
		return
	}
	f := newRunForm(s)
	inputs := runInputs(r, &f)
	nonce := r.PostFormValue("nonce")
	if !nonceRE.MatchString(nonce) {
		v.Error = "This form has no valid nonce (it keeps a double click from starting two runs); reload the page and start again."
		v.Data = workflowPage{Def: s, Graph: graph, Form: f}
		h.render(w, http.StatusBadRequest, "workflow", v)
		return
	}
	f.Nonce = nonce
	id, dup, p := h.startRunCall(r, name, inputs, nonce)
	if p == nil {
		msg := "Started run " + id + " of " + name + "."
		if dup {
			msg = "This form already started run " + id + " of " + name + ": no second run was started."
		}
		h.sessions.setFlash(r, msg)
		http.Redirect(w, r, "/workflow-runs/"+url.PathEscape(id), http.StatusSeeOther)
		return
	}
	byName := map[string]int{}
	for i, fd := range f.Fields {
		byName[fd.Name] = i
	}
	var other []string
	for _, e := range p.Errors {
		in, ok := strings.CutPrefix(e.Field, "inputs.")
		if i, known := byName[in]; ok && known {
			if f.Fields[i].Error != "" {
				f.Fields[i].Error += "; "
			}
			f.Fields[i].Error += e.Detail
			continue
		}
		other = append(other, strings.TrimSuffix(e.Field+": "+e.Detail, ": "))
	}
	f.Other = strings.Join(other, "; ")
	switch {
	case p.Status == http.StatusUnprocessableEntity && p.Type == problem.TypeIdempotencyConflict:
		// This form started a run with other inputs (sent again after
		// a change): a new nonce makes the next start a new run.
		f.Nonce = randomToken()
		v.Error = "Not started: this form already started a run with other inputs. Check the inputs and start again to start another run."
	case len(p.Errors) > 0:
		v.Error = "Not started: the workflow refused its inputs; see the fields below."
	default:
		v.Error = "Not started: " + p.Detail
	}
	st := p.Status
	if st < 400 {
		st = http.StatusInternalServerError
	}
	v.Data = workflowPage{Def: s, Graph: graph, Form: f}
	h.render(w, st, "workflow", v)
}

// startRunCall sends POST /v1/workflows/{name}/runs in process (the
// session's Actor is in r's context) and returns the run's id and whether
// the key had started it already, or the API's problem.
func (h *handler) startRunCall(r *http.Request, name string, inputs map[string]any, key string) (string, bool, *problem.Details) {
	body, err := json.Marshal(map[string]any{"inputs": inputs})
	if err != nil {
		return "", false, &problem.Details{Status: http.StatusBadRequest, Detail: err.Error()}
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "/v1/workflows/"+url.PathEscape(name)+"/runs", bytes.NewReader(body))
	if err != nil {
		return "", false, &problem.Details{Status: http.StatusBadRequest, Detail: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	rec := &recorder{header: http.Header{}}
	h.api.Local().ServeHTTP(rec, req)
	if rec.status/100 != 2 {
		p := &problem.Details{}
		_ = json.Unmarshal(rec.body.Bytes(), p)
		p.Status = rec.status
		if p.Detail == "" {
			p.Detail = p.Title
		}
		if p.Detail == "" {
			p.Detail = http.StatusText(rec.status) + " (" + strconv.Itoa(rec.status) + ")"
		}
		return "", false, p
	}
	var out struct {
		ID        string `json:"id"`
		Duplicate bool   `json:"duplicate"`
	}
	if err := json.Unmarshal(rec.body.Bytes(), &out); err != nil || out.ID == "" {
		return "", false, &problem.Details{Status: http.StatusInternalServerError, Detail: "the API's answer has no run id"}
	}
	return out.ID, out.Duplicate, nil
}
