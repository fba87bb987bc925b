package console

import (
	"bytes"
	"crypto/sha256"
	"net/http"
	"net/url"
	"strings"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/api"
)

type loginData struct {
	Next string
}

func (h *handler) loginPage(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.URL.Query().Get("next"), "/")
	ss, _, err := h.sessions.get(r, false)
	if err != nil {
		h.busDown(w, err)
		return
	}
	if ss != nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	// Why the last session ended: a fixed text by its code, never
	// anything of the query's own.
	notice := notices[ended(r.URL.Query().Get("ended"))]
	h.render(w, http.StatusOK, "login", &view{Title: "Log in", Flash: notice, Data: loginData{Next: next}})
}

// refusedLogin is the one answer to every refused token: it does not tell
// an unknown token from one without the console grant.
const refusedLogin = "That token is not accepted here. Use the admin token (http.admin_token, or the admin-token file in the data dir) or a webhook token whose grant has sources: [console]."

// login checks the token of the login form: the admin token, or a webhook
// credential whose grant allows the console; then it starts a session.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	next := localPath(r.PostFormValue("next"), "/")
	if !sameOrigin(r) {
		h.render(w, http.StatusForbidden, "login", &view{Title: "Log in", Error: "This login form is not from this console.", Data: loginData{Next: next}})
		return
	}
	if api.FromTool(r) {
		// A run's own tool (http_fetch, an HTTP MCP server) that found a
		// token gets no session.
		h.log.Warn("console login of a run's tool refused", zap.String("remote", r.RemoteAddr))
		h.render(w, http.StatusForbidden, "login", &view{Title: "Log in", Error: "A run's tools may not log in to the console.", Data: loginData{Next: next}})
		return
	}
	tok := strings.TrimSpace(r.PostFormValue("token"))
	c, err := h.api.Authenticate(r, tok)
	if err != nil || c.Allows == nil || !c.Allows(api.KindConsole, api.ConsoleRead) {
		h.log.Info("console login refused", zap.String("remote", r.RemoteAddr))
		h.render(w, http.StatusUnauthorized, "login", &view{Title: "Log in", Error: refusedLogin, Data: loginData{Next: next}})
		return
	}
	// A session of its own for every login (no fixation): an old cookie's
	// session ends.
	_ = h.sessions.end(r)
	cred := c.Name
	if c.Admin {
		cred = api.AdminName
	}
	id, err := h.sessions.create(r.Context(), cred, sha256.Sum256([]byte(tok)))
	if err != nil {
		h.busDown(w, err)
		return
	}
	setCookie(w, r, id, 0)
	h.log.Info("console login", zap.String("who", c.Name), zap.String("remote", r.RemoteAddr))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request, _ *session) {
	if err := h.sessions.end(r); err != nil {
		// The session lives on: say so rather than seem logged out.
		h.busDown(w, err)
		return
	}
	setCookie(w, r, "", -1)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// events streams run events to the console's script (live updates): the
// API's own GET /v1/events, in-process, with the filters of the page
// (source, name, outcome) and the browser's Last-Event-ID. Without a
// session: 401 (an EventSource cannot follow a redirect to a login page).
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	ss, _, err := h.sessions.get(r, false)
	if err != nil {
		h.log.Warn("console: sessions unavailable", zap.Error(err))
		http.Error(w, "the console cannot reach the bus to check the session; try again in a moment", http.StatusServiceUnavailable)
		return
	}
	if ss == nil {
		http.Error(w, "log in first", http.StatusUnauthorized)
		return
	}
	in := r.URL.Query()
	q := url.Values{}
	for _, k := range []string{"source", "name", "outcome"} {
		if v := strings.TrimSpace(in.Get(k)); v != "" {
			q.Set(k, v)
		}
	}
	if q.Get("outcome") == "" {
		q.Set("outcome", "done,skip,error")
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "/v1/events?"+q.Encode(), http.NoBody)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		req.Header.Set("Last-Event-ID", id)
	}
	h.api.Local().ServeHTTP(&unnamed{ResponseWriter: w}, req)
}

// unnamed passes an event stream on without its "event:" lines, so that
// every event reaches an EventSource's message listener (named events
// reach only listeners of their name, and sources are open-ended). Lines
// split across writes are held until complete.
type unnamed struct {
	http.ResponseWriter
	partial []byte
}

func (u *unnamed) Write(p []byte) (int, error) {
	n := len(p)
	buf := append(u.partial, p...)
	u.partial = nil
	var out []byte
	for len(buf) > 0 {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			u.partial = append([]byte(nil), buf...)
			break
		}
		line := buf[:i+1]
		buf = buf[i+1:]
		if !bytes.HasPrefix(line, []byte("event:")) {
			out = append(out, line...)
		}
	}
	if len(out) > 0 {
		if _, err := u.ResponseWriter.Write(out); err != nil {
			return 0, err
		}
	}
	return n, nil
}

func (u *unnamed) Flush() { _ = http.NewResponseController(u.ResponseWriter).Flush() }

func (u *unnamed) Unwrap() http.ResponseWriter { return u.ResponseWriter }
