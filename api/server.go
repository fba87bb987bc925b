package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools/memory"
	"github.com/agentwork/agentwork/workflow"
)

// Router is the capability of a part with admin routes (cron jobs, the
// heartbeat). Routes registers them on mux with Go 1.22 patterns, e.g.
// "GET /v1/jobs/{id}"; it is called once, by New. The server mounts them
// behind the admin token, so the handlers need not check it. Errors should
// be written with api/problem. Handlers may run concurrently.
type Router interface {
	Routes(mux *http.ServeMux)
}

// PublicRouter is the capability of a part with routes that authenticate
// their callers themselves (the task webhook, POST /v1/tasks). PublicRoutes
// registers them like Routes, but outside the admin check; IsAdmin tells a
// handler whether the caller sent the admin token. Errors should be
// written with api/problem. Handlers may run concurrently.
type PublicRouter interface {
	PublicRoutes(mux *http.ServeMux)
}

// Readier is the capability of a part that can be not ready: the bus, the
// runner, a trigger still loading. Ready returns nil when the part is
// ready, else an error saying what it waits for; it must answer quickly
// (it backs /readyz), return when ctx is done, and be safe for concurrent
// use.
type Readier interface {
	Ready(ctx context.Context) error
}

// ReadyFunc adapts a function to Readier.
type ReadyFunc func(ctx context.Context) error

// Ready calls f.
func (f ReadyFunc) Ready(ctx context.Context) error { return f(ctx) }

// Deps are what the server serves.
type Deps struct {
	// Bus is required: events, runs, readiness.
	Bus *bus.Bus
	// Routes are mounted behind admin auth.
	Routes []Router
	// PublicRoutes are mounted without admin auth: they authenticate
	// callers themselves.
	PublicRoutes []PublicRouter
	// Ready are asked in order by /readyz (and agentwork_bus_ready); the
	// first that is not ready makes the server not ready. Default: the Bus.
	Ready []Readier
	// DataDir holds the generated admin token. Default: the bus's data dir.
	DataDir string
	// Tools, if set, serves /v1/tools: the tools in scope, the MCP
	// servers, a call by hand.
	Tools *agentwork.ToolAdmin
	// Memory, if set, serves /v1/memory: the agent's memory documents.
	Memory *memory.Store
	// Workflows, if set, serves /v1/workflows and /v1/workflow-runs.
	Workflows *workflow.Engine
	// Callers, if set, authenticates the callers of POST
	// /v1/workflows/{name}/runs that do not send the admin token (the
	// webhook's credentials); nil: only the admin token may start runs.
	Callers CallerAuth
	// Approvals, if set, serves /v1/approvals (admin) and the pages of
	// the approvals' signed links, /approvals/{id}/{verb} (open: the
	// signature is the credential).
	Approvals *approval.Service
	// MCP, if set, is served at /mcp (and /mcp/...). It authenticates its
	// callers itself. It is given the server's own handler, to call the
	// HTTP API in process on its callers' behalf (see Actor).
	MCP func(api http.Handler) http.Handler
	// Details, if set, adds to /readyz the state of parts that do not make
	// the server unready, such as MCP servers ("mcp.fs": "up"). It must
	// answer at once and name no secret (the route is open).
	Details func() map[string]string
	// Console, if set, serves the web console at "/" and below.
	Console Console
	// Credentials, if set, finds the webhook token credentials by name
	// (Server.Credential): the console checks each request of a session
	// against the credential it was made with, as the config has it now,
	// and POST /v1/workflows/{name}/runs served in process (Local) for an
	// Actor acting for a credential holds the request to that credential's
	// grant, as over HTTP. nil: only admin sessions are accepted, and such
	// an actor may start no run.
	Credentials CredentialLookup
}

// Server is agentwork's HTTP API. Safe for concurrent use.
type Server struct {
	cfg     Config
	deps    Deps
	log     *zap.Logger
	now     func() time.Time
	version string

	handler http.Handler
	local   http.Handler                      // the API in-process, without the admin check (Local)
	admin   atomic.Pointer[[sha256.Size]byte] // sha256 of the admin token
	metrics *metrics

	mu      sync.Mutex
	addr    net.Addr
	started chan struct{}
}

// Option configures New.
type Option func(*Server)

// WithLogger sets the logger (default zap.NewNop()).
func WithLogger(l *zap.Logger) Option { return func(s *Server) { s.log = l } }

// WithClock sets the time source of relative filters such as since=1h
// (default time.Now).
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// WithVersion sets the version reported by agentwork_build_info.
func WithVersion(v string) Option { return func(s *Server) { s.version = v } }

// New builds the server and its routes. It does no I/O and starts nothing:
// Run listens. Handler serves without listening (tests). An admin token
// given in cfg is effective at once; a generated one once Run has read or
// created it.
func New(cfg Config, deps Deps, opts ...Option) *Server {
	s := &Server{cfg: cfg.WithDefaults(), deps: deps, log: zap.NewNop(), now: time.Now, version: "dev", started: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	if len(s.deps.Ready) == 0 {
		s.deps.Ready = []Readier{ReadyFunc(func(ctx context.Context) error {
			if deps.Bus == nil {
				return errors.New("api: no bus")
			}
			return deps.Bus.Ready(ctx)
		})}
	}
	if s.deps.DataDir == "" && deps.Bus != nil {
		s.deps.DataDir = deps.Bus.Config().DataDir
	}
	if s.cfg.AdminToken != "" {
		s.setAdminToken(s.cfg.AdminToken)
	}
	s.metrics = newMetrics(s.version)
	s.handler = s.routes()
	return s
}

// Handler is the server's root handler, with every route and middleware.
func (s *Server) Handler() http.Handler { return s.handler }

// Started is closed once Run listens; Addr is valid from then on.
func (s *Server) Started() <-chan struct{} { return s.started }

// Addr is the address Run listens on (nil before).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Run validates the config, reads or generates the admin token, counts run
// events for /metrics and serves HTTP until ctx is done; then it stops
// accepting connections, ends event streams, lets requests in flight
// finish within ShutdownTimeout, and returns nil. With listen: off it
// waits for ctx and returns nil. Call Run once.
func (s *Server) Run(ctx context.Context) error {
	if err := s.cfg.Validate(); err != nil {
		return err
	}
	if s.deps.Bus == nil {
		return errors.New("api: no bus")
	}
	if s.cfg.Off() {
		<-ctx.Done()
		return nil
	}
	if s.admin.Load() == nil {
		tok, err := EnsureAdminToken(s.deps.DataDir)
		if err != nil {
			return err
		}
		s.setAdminToken(tok)
	}
	unsub, err := s.metrics.countEvents(s.deps.Bus)
	if err != nil {
		return err
	}
	defer unsub()

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("http.listen: %s is already in use (another agentwork serve?): stop it, or set http.listen to a free address, or off", s.cfg.Listen)
		}
		return fmt.Errorf("http.listen: cannot listen on %s: %w", s.cfg.Listen, err)
	}
	// Requests' contexts end when shutdown begins, so event streams return
	// instead of holding Shutdown until its timeout.
	base, stopStreams := context.WithCancel(context.WithoutCancel(ctx))
	defer stopStreams()
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          zap.NewStdLog(s.log.Named("http")),
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()
	close(s.started)
	s.log.Info("http listening", zap.String("addr", ln.Addr().String()))

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("api: serve: %w", err)
	case <-ctx.Done():
	}
	stopStreams()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("api: shutdown: %w", err)
	}
	return nil
}

func (s *Server) setAdminToken(tok string) {
	sum := sha256.Sum256([]byte(tok))
	s.admin.Store(&sum)
}

// ready asks every Readier in order; the first error is the answer.
func (s *Server) ready(ctx context.Context) error {
	for _, r := range s.deps.Ready {
		if err := r.Ready(ctx); err != nil {
			return err
		}
	}
	return nil
}

// IsAdmin reports whether r, served by a Server, carries its admin token:
// a PublicRouter's handler may then grant what the admin may do.
func IsAdmin(r *http.Request) bool {
	s, ok := r.Context().Value(serverKey{}).(*Server)
	return ok && s.isAdmin(r)
}

type serverKey struct{}

// isAdmin reports whether r carries the admin token.
func (s *Server) isAdmin(r *http.Request) bool {
	want := s.admin.Load()
	if want == nil {
		return false
	}
	tok, ok := bearerToken(r)
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(sum[:], want[:]) == 1
}

func bearerToken(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	tok = strings.TrimSpace(tok)
	return tok, ok && strings.EqualFold(scheme, "Bearer") && tok != ""
}

// adminRealm is the realm of the admin token's 401s.
const adminRealm = "agentwork admin"

func (s *Server) requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if FromTool(r) {
			// A run's own tool (http_fetch, an HTTP MCP server): a run
			// that found the admin token acts as nobody here.
			s.log.Warn("admin request of a run's tool refused", zap.String("path", r.URL.Path))
			problem.Error(w, http.StatusForbidden, "a run's tools may not use agentwork's admin API (the request carries "+ToolHeader+")")
			return
		}
		_, isActor := ActorFrom(r.Context())
		if !isActor && s.isAdmin(r) && r.Header.Get(ViaHeader) == "mcp" {
			// `agentwork mcp` (over stdio) calls with the admin token.
			r = r.WithContext(WithActor(r.Context(), Actor{Via: "mcp", Name: "admin"}))
			isActor = true
		}
		if !isActor && !s.isAdmin(r) {
			detail := "send Authorization: Bearer <admin token> (http.admin_token, or the admin-token file in the data dir)"
			if _, ok := bearerToken(r); ok {
				detail = "the bearer token is not the admin token"
			}
			problem.Unauthorized(w, adminRealm, detail)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// routes builds the handler tree:
//
//	GET  /healthz, /readyz   open
//	GET  /metrics            open from loopback, else admin
//	the PublicRoutes         their own auth (POST /v1/tasks: webhook
//	                         credentials, or the admin token)
//	/approvals/{id}/{verb}   the approvals' signed links (the signature)
//	/mcp                     the MCP server (Deps.MCP: its own auth)
//	/v1/...                  admin: events, runs, usage, failed deliveries, tools,
//	                         approvals, and the mounted Routes
//	/ and below              the Console, if any (its own login)
func (s *Server) routes() http.Handler {
	admin := http.NewServeMux()
	admin.HandleFunc("GET /v1/events", s.events)
	admin.HandleFunc("GET /v1/runs", s.runs)
	admin.HandleFunc("GET /v1/runs/{id}", s.run)
	admin.HandleFunc("GET /v1/runs/counts", s.runCounts)
	admin.HandleFunc("GET /v1/usage", s.usage)
	s.deliveryRoutes(admin)
	s.toolRoutes(admin)
	s.memoryRoutes(admin)
	s.workflowRoutes(admin)
	s.approvalRoutes(admin)
	for _, r := range s.deps.Routes {
		r.Routes(admin)
	}

	root := http.NewServeMux()
	root.HandleFunc("GET /healthz", s.healthz)
	root.HandleFunc("GET /readyz", s.readyz)
	root.HandleFunc("GET /metrics", s.metricsHandler)
	root.Handle("/v1/", s.requireAdmin(problemMux(admin)))
	s.workflowPublicRoutes(root)
	for _, r := range s.deps.PublicRoutes {
		r.PublicRoutes(root)
	}
	if s.deps.Approvals != nil {
		s.deps.Approvals.PublicRoutes(root)
	}
	if s.deps.MCP != nil {
		h := s.deps.MCP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }))
		root.Handle("/mcp", h)
		root.Handle("/mcp/", h)
	}
	local := http.NewServeMux()
	local.HandleFunc("GET /healthz", s.healthz)
	local.HandleFunc("GET /readyz", s.readyz)
	local.Handle("/v1/", problemMux(admin))
	s.workflowLocalRoutes(local)
	s.local = s.withServer(problemMux(local))
	if s.deps.Console != nil {
		root.Handle("/", s.deps.Console.Handler(s))
	}
	return s.middleware(problemMux(root))
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		problem.Unavailable(w, 5*time.Second, "not ready: "+err.Error())
		return
	}
	body := struct {
		Status  string            `json:"status"`
		Details map[string]string `json:"details,omitempty"`
	}{Status: "ready"}
	if s.deps.Details != nil {
		body.Details = s.deps.Details()
	}
	writeJSON(w, http.StatusOK, body)
}

// problemMux serves mux, answering its own 404 and 405 with problem details
// (keeping Allow), and records the matched pattern for the metrics.
func problemMux(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			if ri, ok := r.Context().Value(routeKey{}).(*routeInfo); ok {
				ri.pattern = pattern
			}
			mux.ServeHTTP(w, r) // sets the path values
			return
		}
		rec := &statusOnly{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		status := rec.status
		if status == 0 || status == http.StatusOK {
			status = http.StatusNotFound
		}
		detail := "no such endpoint: " + r.URL.Path
		if status == http.StatusMethodNotAllowed {
			detail = fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, rec.header.Get("Allow"))
		}
		problem.Error(w, status, detail)
	})
}

// statusOnly records the status and headers of the mux's 404/405 handler.
type statusOnly struct {
	header http.Header
	status int
}

func (s *statusOnly) Header() http.Header         { return s.header }
func (s *statusOnly) Write(p []byte) (int, error) { return len(p), nil }
func (s *statusOnly) WriteHeader(code int)        { s.status = code }

type routeKey struct{}

type routeInfo struct{ pattern string }

// withServer puts s in the request's context (IsAdmin), and a route
// record of its own, so that an in-process call does not rename the
// route of the request that made it in the metrics.
func (s *Server) withServer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), serverKey{}, s)
		next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, routeKey{}, &routeInfo{})))
	})
}

// middleware counts requests by route and status, recovers panics as 500
// problems and sets headers every response gets.
func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri := &routeInfo{}
		ctx := context.WithValue(r.Context(), routeKey{}, ri)
		r = r.WithContext(context.WithValue(ctx, serverKey{}, s))
		sw := &statusWriter{ResponseWriter: w}
		h := sw.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("http handler panicked", zap.Any("panic", p), zap.String("path", r.URL.Path))
				if !sw.wrote {
					problem.Error(sw, http.StatusInternalServerError, "internal error; see the server log")
				}
			}
			route := ri.pattern
			if route == "" {
				route = "unmatched"
			}
			s.metrics.request(route, sw.code())
		}()
		next.ServeHTTP(sw, r)
	})
}

// statusWriter remembers the status code; Unwrap lets
// http.ResponseController reach Flush and the deadlines.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Flush() {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if !w.wrote {
		return http.StatusOK
	}
	return w.status
}

// fromLoopback reports whether r came from this machine.
func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
