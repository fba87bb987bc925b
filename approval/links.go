package approval

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/connectors"
)

// The actions of every approval, in the order they are shown.
var actions = []connectors.Action{
	{Verb: string(Approve), Label: "Approve"},
	{Verb: string(Reject), Label: "Reject"},
}

// prompt is a's question as its notifications carry it: the actions, each
// with its signed link when a's links may decide it.
func (s *Service) prompt(a Approval) connectors.Prompt {
	p := connectors.Prompt{ID: a.ID}
	for _, act := range actions {
		if s.linksOn() && a.Allowed(ByLink) {
			act.URL = s.Link(a, Verdict(act.Verb))
		}
		p.Actions = append(p.Actions, act)
	}
	return p
}

func (s *Service) linksOn() bool { return s.cfg.PublicURL != "" && len(s.cfg.LinkKey) > 0 }

// Link is the signed link that answers a with v in a browser:
// <PublicURL>/approvals/<id>/<verb>?exp=<unix seconds>&sig=<hex>, valid
// until a's deadline. "" when links are off (no PublicURL or LinkKey).
func (s *Service) Link(a Approval, v Verdict) string {
	if !s.linksOn() {
		return ""
	}
	exp := strconv.FormatInt(a.Deadline.Unix()+1, 10)
	q := url.Values{"exp": {exp}, "sig": {s.sign(a.ID, string(v), exp)}}
	return strings.TrimRight(s.cfg.PublicURL, "/") + "/approvals/" + a.ID + "/" + string(v) + "?" + q.Encode()
}

// sign is the hex HMAC-SHA256 of id, verb and exp under the link key.
func (s *Service) sign(id, verb, exp string) string {
	m := hmac.New(sha256.New, s.cfg.LinkKey)
	m.Write([]byte("agentwork approval link\x00" + id + "\x00" + verb + "\x00" + exp))
	return hex.EncodeToString(m.Sum(nil))
}

// errLink: the link is not one this service signed, or it has expired.
var errLink = errors.New("approval: the link is not valid or has expired")

// verify checks a link's signature and expiry (in constant time).
func (s *Service) verify(id, verb, exp, sig string) error {
	if !s.linksOn() {
		return errLink
	}
	want := s.sign(id, verb, exp)
	if !hmac.Equal([]byte(want), []byte(strings.ToLower(sig))) {
		return errLink
	}
	n, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || !s.now().Before(time.Unix(n, 0)) {
		return errLink
	}
	return nil
}

// PublicRoutes serves the signed links' page (an api.PublicRouter): GET
// /approvals/{id}/{verb} shows the question and a form, and changes
// nothing (so link previews and mail scanners decide nothing); POST
// decides, by ByLink. A link that is not valid or has expired gets a 403
// page that says so.
func (s *Service) PublicRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /approvals/{id}/{verb}", s.page)
	mux.HandleFunc("POST /approvals/{id}/{verb}", s.page)
}

// pageData is what the page shows.
type pageData struct {
	A       Approval
	Verb    string
	Label   string
	Message string // the outcome of a POST, or why the link is refused
	Error   bool
	Done    bool // decided (or ended): no form
}

func (s *Service) page(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	id, verb := r.PathValue("id"), r.PathValue("verb")
	q := r.URL.Query()
	if (verb != string(Approve) && verb != string(Reject)) || s.verify(id, verb, q.Get("exp"), q.Get("sig")) != nil {
		s.render(w, http.StatusForbidden, pageData{Error: true, Done: true,
			Message: "This link is not valid or has expired. Ask for the approval again, or answer with agentwork approvals."})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	label := "Approve"
	if verb == string(Reject) {
		label = "Reject"
	}
	d := pageData{Verb: verb, Label: label}
	status := http.StatusOK
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
		if err := r.ParseForm(); err != nil {
			s.render(w, http.StatusBadRequest, pageData{Error: true, Done: true, Message: "The form could not be read: send it again."})
			return
		}
		a, err := s.decide(ctx, id, Decision{Verdict: Verdict(verb), By: ByLink, Name: r.PostForm.Get("name"), Comment: r.PostForm.Get("comment")})
		d.A = a
		var ce *ConflictError
		switch {
		case err == nil:
			d.Message = "Recorded: " + string(a.State) + "."
		case errors.As(err, &ce), errors.Is(err, ErrExpired), errors.Is(err, ErrCancelled), errors.Is(err, ErrNotAllowed):
			d.Message, d.Error, status = err.Error(), true, http.StatusConflict
			if errors.Is(err, ErrNotAllowed) {
				status = http.StatusForbidden
			}
		case errors.Is(err, ErrNoApproval):
			s.render(w, http.StatusNotFound, pageData{Error: true, Done: true, Message: "There is no such approval (any more)."})
			return
		default:
			s.log.Warn("approval link: decide", zap.String("approval", id), zap.Error(err))
			s.render(w, http.StatusServiceUnavailable, pageData{Error: true, Done: true, Message: "The answer could not be recorded now: try again in a moment."})
			return
		}
	} else {
		a, err := s.Get(ctx, id)
		if errors.Is(err, ErrNoApproval) {
			s.render(w, http.StatusNotFound, pageData{Error: true, Done: true, Message: "There is no such approval (any more)."})
			return
		}
		if err != nil {
			s.render(w, http.StatusServiceUnavailable, pageData{Error: true, Done: true, Message: "The approval could not be read now: try again in a moment."})
			return
		}
		d.A = a
	}
	d.Done = d.A.State.Ended()
	s.render(w, status, d)
}

func (s *Service) render(w http.ResponseWriter, status int, d pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := pageTmpl.Execute(w, d); err != nil {
		s.log.Warn("approval page", zap.Error(err))
	}
}

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{"clock": clock, "done": verdictDone}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>agentwork approval</title>
<style>body{font-family:system-ui,sans-serif;max-width:40em;margin:2em auto;padding:0 1em;line-height:1.4}
pre{white-space:pre-wrap;background:#f4f4f4;padding:.5em}.err{color:#a00}.ok{color:#060}
textarea,input{width:100%;box-sizing:border-box;margin:.2em 0 .8em}button{font-size:1.1em;padding:.4em 1.2em}</style></head>
<body><h1>Approval</h1>
{{with .Message}}<p class="{{if $.Error}}err{{else}}ok{{end}}">{{.}}</p>{{end}}
{{if .A.ID}}
<pre>{{.A.Question}}</pre>
{{with .A.Tool}}<p>Tool: <code>{{.}}</code></p>{{end}}
{{with .A.Args}}<p>Arguments:</p><pre>{{.}}</pre>{{end}}
<p>State: <strong>{{.A.State}}</strong>{{with .A.Decision}} — {{done .Verdict}} by {{.By}}{{with .Name}} ("{{.}}", as typed){{end}} at {{clock .At}}{{with .Comment}}: {{.}}{{end}}{{end}}{{if eq .A.State "cancelled"}} — {{.A.CancelReason}}{{end}}</p>
{{if not .Done}}
<p>Answer by {{clock .A.Deadline}}, or it is {{done .A.OnTimeout}} automatically.</p>
<form method="post">
<label>Your name (shown as given)<input name="name" maxlength="100"></label>
<label>Comment<textarea name="comment" rows="3" maxlength="2000"></textarea></label>
<button type="submit">{{.Label}}</button>
</form>
{{end}}
{{end}}
</body></html>
`))

// LinkKey derives the links' signing key from the admin token: the links
// verify on every instance that shares the token, and a new admin token
// makes the links sent before it invalid.
func LinkKey(adminToken string) []byte {
	m := hmac.New(sha256.New, []byte(adminToken))
	m.Write([]byte("agentwork approval links v1"))
	return m.Sum(nil)
}
