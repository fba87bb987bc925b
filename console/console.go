package console

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/tools/memory"
)

// ContentSecurityPolicy is the policy of every console response: no
// inline script or style, nothing from elsewhere, no framing.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// maxForm bounds a form's body: a memory document (memory.MaxDoc) sent
// as a URL-encoded form, each byte at worst three.
const maxForm = 3*memory.MaxDoc + 64<<10

// Console is the web console. Safe for concurrent use.
type Console struct {
	log      *zap.Logger
	now      func() time.Time
	cfg      Config
	sessions *sessions
	pages    map[string]*template.Template
	schedule ScheduleParser
}

// ScheduleParser reads a cron schedule in a zone as the scheduler does
// (cron.ParseSchedule, given by the binary: the console sits below the
// triggers and does not import them). The job form shows the next fire
// times with it.
type ScheduleParser func(expr string, loc *time.Location) (interface{ Next(time.Time) time.Time }, error)

// WithSchedules sets the parser the job form's fire times come from
// (default none: the form says it cannot show them).
func WithSchedules(p ScheduleParser) Option { return func(c *Console) { c.schedule = p } }

var _ api.Console = (*Console)(nil)

// Option configures New.
type Option func(*Console)

// WithLogger sets the logger (default zap.NewNop()).
func WithLogger(l *zap.Logger) Option { return func(c *Console) { c.log = l } }

// WithClock sets the time source of session expiry (default time.Now).
func WithClock(now func() time.Time) Option { return func(c *Console) { c.now = now } }

// WithConfig sets the console section (default: its defaults). It is
// not validated here: config.File.Validate does that.
func WithConfig(cfg Config) Option { return func(c *Console) { c.cfg = cfg } }

// New builds the console. It does no I/O and starts nothing; the api
// server mounts it (api.Deps.Console), and its sessions live on that
// server's bus.
func New(opts ...Option) *Console {
	c := &Console{log: zap.NewNop(), now: time.Now}
	for _, o := range opts {
		o(c)
	}
	c.sessions = newSessions(c.cfg, c.now, c.log)
	c.pages = parsePages()
	return c
}

// Handler serves the console for s: called once, by api.New.
func (c *Console) Handler(s *api.Server) http.Handler {
	h := &handler{Console: c, api: s}
	c.sessions.srv = s
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /login", h.loginPage)
	mux.HandleFunc("POST /login", h.login)
	mux.HandleFunc("POST /logout", h.post(false, h.logout))
	mux.HandleFunc("GET /events", h.events)
	mux.HandleFunc("GET /{$}", h.get(h.overview))
	mux.HandleFunc("GET /runs", h.get(h.runs))
	mux.HandleFunc("GET /runs/{id}", h.get(h.run))
	mux.HandleFunc("GET /jobs", h.get(h.jobs))
	mux.HandleFunc("POST /jobs/{id}/{action}", h.post(true, h.jobAction))
	mux.HandleFunc("GET /jobs/new", h.get(h.newJob))
	// The job form's "Show fire times" changes nothing: a read-only
	// session may use it; saveJob refuses it a save.
	mux.HandleFunc("POST /jobs/new", h.post(false, h.saveJob))
	mux.HandleFunc("GET /jobs/{id}/edit", h.get(h.editJob))
	mux.HandleFunc("POST /jobs/{id}/edit", h.post(false, h.saveJob))
	// The job form's checks as you type change nothing either.
	mux.HandleFunc("POST /jobs/check", h.post(false, h.checkJob))
	mux.HandleFunc("GET /heartbeat", h.get(h.heartbeat))
	mux.HandleFunc("POST /heartbeat/{action}", h.post(true, h.heartbeatAction))
	mux.HandleFunc("GET /heartbeat/checklist", h.get(h.checklistEditor))
	mux.HandleFunc("POST /heartbeat/checklist", h.post(true, h.saveChecklist))
	mux.HandleFunc("GET /deliveries", h.get(h.deliveries))
	mux.HandleFunc("POST /deliveries/{id}/retry", h.post(true, h.retryDelivery))
	mux.HandleFunc("POST /deliveries-retry-all", h.post(true, h.retryAll))
	mux.HandleFunc("GET /approvals", h.get(h.approvals))
	mux.HandleFunc("GET /approvals/{id}", h.get(h.approval))
	mux.HandleFunc("POST /approvals/{id}", h.post(true, h.decide))
	mux.HandleFunc("GET /workflows", h.get(h.workflows))
	mux.HandleFunc("GET /workflows/{name}", h.get(h.workflowDef))
	mux.HandleFunc("POST /workflows/{name}/run", h.post(true, h.startWorkflow))
	mux.HandleFunc("GET /workflow-runs/{id}", h.get(h.workflowRun))
	mux.HandleFunc("POST /workflow-runs/{id}/{action}", h.post(true, h.workflowRunAction))
	mux.HandleFunc("GET /memory", h.get(h.memoryList))
	mux.HandleFunc("GET /memory/{doc}", h.get(h.memoryDoc))
	mux.HandleFunc("POST /memory/{doc}", h.post(true, h.saveMemory))
	mux.HandleFunc("GET /usage", h.get(h.usage))
	mux.HandleFunc("GET /tools", h.get(h.toolsList))
	mux.HandleFunc("/", h.get(h.notFound))
	return headers(mux)
}

// headers sets the security headers of every console response.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// handler serves the pages of one api server.
type handler struct {
	*Console
	api *api.Server
}

// view is what every page's template gets.
type view struct {
	Title   string
	Nav     string // the nav entry to mark current
	Who     string
	Write   bool
	Admin   bool // logged in with the admin token (not a webhook credential)
	CSRF    string
	Flash   string
	Error   string // a failure of the API, shown on the page
	Data    any
	Path    string
	Refresh bool // the page opts in to live updates
}

// get wraps a page: without a session it redirects to the login page.
func (h *handler) get(page func(w http.ResponseWriter, r *http.Request, v *view)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ss, why, err := h.sessions.get(r, true)
		if ss == nil {
			h.noSession(w, r, why, err)
			return
		}
		v := &view{Who: ss.who, Write: ss.write, Admin: ss.cred == "", CSRF: ss.csrf, Flash: ss.flash, Path: r.URL.Path}
		page(w, r, v)
	}
}

// post wraps a state change: a session (else to the login page), a
// same-origin request carrying the session's CSRF token (else 403), and,
// when write, a session that may change state (else 403). It then runs
// change, which answers with a redirect.
func (h *handler) post(write bool, change func(w http.ResponseWriter, r *http.Request, ss *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		ss, why, err := h.sessions.get(r, false)
		if ss == nil {
			h.noSession(w, r, why, err)
			return
		}
		if !sameOrigin(r) || !ss.validCSRF(r) {
			h.forbidden(w, ss, "This form is not from this console, or it is stale (the session changed). Go back, reload the page and try again.")
			return
		}
		if write && !ss.write {
			h.readOnly(w, ss)
			return
		}
		// The API records the change as the session's user, and the
		// rules of who may decide what (an approval's approvers) apply.
		r = r.WithContext(api.WithActor(r.Context(), api.Actor{Via: api.ViaConsole, Name: ss.who, Credential: ss.cred}))
		change(w, r, ss)
	}
}

// readOnly refuses a change to a session that may not make one.
func (h *handler) readOnly(w http.ResponseWriter, ss *session) {
	h.forbidden(w, ss, fmt.Sprintf("Read-only: %q may look but not change anything. Log in with the admin token, or a token whose grant has console: write.", ss.who))
}

func (h *handler) forbidden(w http.ResponseWriter, ss *session, msg string) {
	v := &view{Title: "Refused", Who: ss.who, Write: ss.write, CSRF: ss.csrf, Error: msg}
	h.render(w, http.StatusForbidden, "error", v)
}

// sameOrigin refuses a request a browser marked as from another site
// (Sec-Fetch-Site), or, from a browser that does not send that header,
// whose Origin names another host. (With Referrer-Policy: no-referrer a
// browser sends Origin: null on a form's POST; that says nothing.)
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin" || site == "none"
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

// noSession answers a request without a session: 503 when the bus did
// not say (err), else a redirect to the login page, which says why a
// session ended (why), coming back to r's page.
func (h *handler) noSession(w http.ResponseWriter, r *http.Request, why ended, err error) {
	if err != nil {
		h.busDown(w, err)
		return
	}
	next := "/"
	if r.Method == http.MethodGet {
		next = r.URL.RequestURI()
	}
	q := "/login?next=" + url.QueryEscape(next)
	if why != endedNone {
		setCookie(w, r, "", -1)
		q += "&ended=" + string(why)
	}
	http.Redirect(w, r, q, http.StatusSeeOther)
}

// busUnavailable is the page of a request whose session could not be
// checked.
const busUnavailable = "The console cannot reach the bus, where it keeps its sessions, so it cannot tell who you are. " +
	"The bus may be restarting: try again in a moment. If this lasts, see /readyz and the server's log."

// busDown answers 503: the session's bus did not answer.
func (h *handler) busDown(w http.ResponseWriter, err error) {
	h.log.Warn("console: sessions unavailable", zap.Error(err))
	w.Header().Set("Retry-After", "5")
	h.render(w, http.StatusServiceUnavailable, "error", &view{Title: "Unavailable", Error: busUnavailable})
}

// back redirects to the page a form came from (its "back" field, a local
// path), else to fallback.
func back(w http.ResponseWriter, r *http.Request, fallback string) {
	http.Redirect(w, r, localPath(r.PostFormValue("back"), fallback), http.StatusSeeOther)
}

// localPath is p when it is a path of this site, else fallback: a
// redirect never leaves the console. Browsers strip tabs and newlines
// from a Location and read a backslash as a slash, so "/\t/evil.example"
// would reach //evil.example: any control byte is refused, and the path
// may not start with // or /\. What is kept is re-encoded from its parse.
func localPath(p, fallback string) string {
	for i := 0; i < len(p); i++ {
		if p[i] < 0x20 || p[i] == 0x7f {
			return fallback
		}
	}
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.Contains(p, "\\") {
		return fallback
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return fallback
	}
	out := u.RequestURI()
	if !strings.HasPrefix(out, "/") || strings.HasPrefix(out, "//") || strings.HasPrefix(out, "/\\") {
		return fallback
	}
	return out
}

func (h *handler) render(w http.ResponseWriter, status int, name string, v *view) {
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, "base", v); err != nil {
		h.log.Error("console: render", zap.String("page", name), zap.Error(err))
		http.Error(w, "the console could not render this page; see the server log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (h *handler) notFound(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title, v.Error = "Not found", "There is no page "+r.URL.Path+" in the console."
	h.render(w, http.StatusNotFound, "error", v)
}

// apiError is a failed call of the API: its status and the problem's
// detail.
type apiError struct {
	status int
	detail string
}

func (e *apiError) Error() string { return e.detail }

// call makes one request of the API in-process, through the same handlers
// the CLI and scripts reach over HTTP (api.Server.Local). A 2xx answer's
// JSON body is decoded into out (if not nil); another is an *apiError with
// the problem's detail. header, if not nil, receives the answer's header.
func (h *handler) call(ctx context.Context, method, path string, body any, out any, header *http.Header) error {
	var rd io.Reader = http.NoBody
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return h.send(req, out, header)
}

// send makes the request req of the API in-process and answers as call.
func (h *handler) send(req *http.Request, out any, header *http.Header) error {
	method, path := req.Method, req.URL.Path
	rec := &recorder{header: http.Header{}}
	h.api.Local().ServeHTTP(rec, req)
	if header != nil {
		*header = rec.header
	}
	if rec.status < 200 || rec.status > 299 {
		var p struct {
			Detail string `json:"detail"`
			Title  string `json:"title"`
		}
		_ = json.Unmarshal(rec.body.Bytes(), &p)
		if p.Detail == "" {
			p.Detail = p.Title
		}
		if p.Detail == "" {
			p.Detail = http.StatusText(rec.status)
		}
		return &apiError{status: rec.status, detail: p.Detail}
	}
	if out != nil && rec.body.Len() > 0 {
		if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
			return fmt.Errorf("console: decode %s %s: %w", method, path, err)
		}
	}
	return nil
}

// status is the HTTP status of err from call (0 when not an API answer).
func status(err error) int {
	if e, ok := err.(*apiError); ok {
		return e.status
	}
	return 0
}

// recorder is the response of an in-process API call.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
