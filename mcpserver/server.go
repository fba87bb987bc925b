package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/api"
)

// Kinds of work a grant can be limited to.
const (
	KindJobs      = "jobs" // cron jobs and the heartbeat
	KindTasks     = "tasks"
	KindWorkflows = "workflows"
	KindApprovals = "approvals"
	KindMemory    = "memory"
)

// Caller is who calls the tools, and what they may do.
type Caller struct {
	// Name names the credential in logs and records: "admin" for the
	// admin token, else the token's name.
	Name string
	// Credential is the webhook credential's name; "" for the admin.
	Credential string
	// Field is where the credential is configured (webhook.tokens[0]),
	// for the errors that say what to change.
	Field string
	// ReadOnly allows only the tools that change nothing.
	ReadOnly bool
	// Kinds are the kinds of work it may touch; empty: all.
	Kinds []string
	// Tools are the tools (names or globs) the jobs it creates may name;
	// ignored for the admin, who may name any.
	Tools []string
	// AllowsTarget reports whether a job of its may send to a target;
	// nil: any (the admin).
	AllowsTarget func(target string) bool

	authorization string // the caller's Authorization header, for the public routes
}

// Admin is the caller of the admin token.
func Admin() Caller { return Caller{Name: "admin"} }

func (c Caller) admin() bool { return c.Credential == "" }

func (c Caller) allowsKind(kind string) bool {
	return kind == "" || len(c.Kinds) == 0 || slices.Contains(c.Kinds, kind)
}

// Error codes of tool errors.
const (
	CodeInvalid         = "invalid_input"
	CodeUnauthenticated = "unauthenticated"
	CodeForbidden       = "forbidden"
	CodeNotFound        = "not_found"
	CodeConflict        = "conflict"
	CodeUnavailable     = "unavailable"
	CodeInternal        = "internal_error"
)

// Error is a tool's error: a code for programs and a message that says
// what is wrong and what to do. Its Error is the JSON object
// {"code", "message"}, the text of the tool result.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	b, _ := json.Marshal(e)
	return string(b)
}

func errorf(code, format string, a ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, a...)}
}

// Server holds the tools. Safe for concurrent use.
type Server struct {
	api   backend
	log   *zap.Logger
	now   func() time.Time
	local *Caller // the caller of a transport without tokens (stdio)
	mcp   *mcp.Server
	poll  time.Duration

	waitMu sync.Mutex
	waits  map[string]int // the tool calls waiting for outcomes, by credential
}

// MaxWaits is how many tool calls of one credential may wait for an
// outcome (wait_seconds) at once: each polls the API until it ends.
const MaxWaits = 4

// acquireWait takes one of c's waits, or says to try again later; the
// caller calls release when its wait ends.
func (s *Server) acquireWait(c Caller) (release func(), err error) {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	if s.waits[c.Name] >= MaxWaits {
		return nil, errorf(CodeUnavailable, "credential %q already has %d calls waiting for outcomes, so nothing was started; call again when one ended, or with wait_seconds 0 and poll get_run", c.Name, MaxWaits)
	}
	s.waits[c.Name]++
	return func() {
		s.waitMu.Lock()
		defer s.waitMu.Unlock()
		if s.waits[c.Name]--; s.waits[c.Name] <= 0 {
			delete(s.waits, c.Name)
		}
	}, nil
}

// Option configures a Server.
type Option func(*Server)

// WithLogger sets the logger of the tool calls (default zap.NewNop()).
func WithLogger(l *zap.Logger) Option { return func(s *Server) { s.log = l } }

// WithClock sets the time source of relative times (in: 5m).
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// New returns the tools over the api server's own handler (Deps.MCP gets
// it): each call goes through the HTTP API's routes in process, as its
// caller.
func New(apiHandler http.Handler, opts ...Option) *Server {
	return newServer(inProcess{h: apiHandler}, nil, opts)
}

// NewRemote returns the tools over the HTTP API at base (http://host:port)
// with the admin token, for `agentwork mcp`: every call is the admin's.
func NewRemote(base, adminToken string, hc *http.Client, opts ...Option) *Server {
	if hc == nil {
		hc = &http.Client{}
	}
	local := Admin()
	return newServer(remote{base: strings.TrimRight(base, "/"), token: adminToken, hc: hc}, &local, opts)
}

func newServer(b backend, local *Caller, opts []Option) *Server {
	s := &Server{api: b, log: zap.NewNop(), now: time.Now, local: local, poll: 250 * time.Millisecond, waits: map[string]int{}}
	for _, o := range opts {
		o(s)
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "agentwork", Title: "agentwork", Version: "1"}, &mcp.ServerOptions{
		Instructions: "agentwork runs an AI agent's scheduled and requested work: cron jobs, the heartbeat, tasks, workflows and the approvals they wait on. " +
			"Use the list_* and get_* tools to look, the others to change things. Errors are JSON {code, message}; the message says what to do.",
	})
	s.mcp.AddReceivingMiddleware(s.inputErrors)
	s.addTools()
	s.addResources()
	return s
}

// inputErrors gives the SDK's own tool errors (arguments that do not
// match the input schema: an unknown field, a wrong type) the shape of
// the tools' errors, {"code", "message"}, and logs the calls the SDK
// refuses (those never reach add's log line) with the caller's name.
func (s *Server) inputErrors(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method != "tools/call" {
			return res, err
		}
		refused := ""
		if err != nil {
			refused = "protocol_error"
		}
		if r, ok := res.(*mcp.CallToolResult); ok && err == nil && r.IsError && len(r.Content) == 1 {
			if tc, ok := r.Content[0].(*mcp.TextContent); ok && !strings.HasPrefix(tc.Text, "{") {
				tc.Text = (&Error{Code: CodeInvalid, Message: tc.Text + "; call it with the arguments its input schema allows (tools/list shows it)"}).Error()
				refused = CodeInvalid
			}
		}
		if refused != "" {
			tool := ""
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
				tool = p.Name
			}
			c, _ := s.caller(req.GetExtra())
			s.log.Info("mcp tool call refused", zap.String("tool", tool), zap.String("credential", c.Name), zap.String("code", refused))
		}
		return res, err
	}
}

// MCP is the MCP server of the tools (to serve on any transport).
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Authenticate finds the caller of a bearer token that is not the admin
// token (the webhook's tokens with an mcp grant). It returns an error
// wrapping ErrUnknownToken for a token it does not know (401), and one
// wrapping ErrNoGrant for a known token that may not use the MCP server
// (403).
type Authenticate func(token string) (Caller, error)

// Errors of an Authenticate.
var (
	ErrUnknownToken = errors.New("the bearer token is not valid")
	ErrNoGrant      = errors.New("the token has no mcp grant")
)

// scope is the one scope of the bearer check: a token allowed to use the
// MCP server has it.
const scope = "mcp"

// tokenLife is the expiry the SDK wants of a token: static tokens do not
// expire, so each request's verification is good for this long.
const tokenLife = time.Hour

// Handler is the streamable HTTP handler of the server, for the api server
// to mount at /mcp (it must run under the api server's middleware, so
// that api.IsAdmin knows the admin token). Callers send Authorization:
// Bearer with the admin token or a token that authn accepts: another gets
// 401, a known token without an mcp grant 403. The SDK's DNS-rebinding
// protection stays on, and requests of a run's own tools (api.ToolHeader)
// are refused: a run never decides its own approvals here.
func (s *Server) Handler(authn Authenticate) http.Handler {
	stream := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		SessionTimeout: 30 * time.Minute,
	})
	verify := func(_ context.Context, tok string, r *http.Request) (*auth.TokenInfo, error) {
		c := Admin()
		if !api.IsAdmin(r) {
			if authn == nil {
				return nil, fmt.Errorf("%w: send the admin token (no other tokens are configured)", auth.ErrInvalidToken)
			}
			var err error
			if c, err = authn(tok); err != nil {
				if errors.Is(err, ErrNoGrant) {
					s.log.Info("mcp request refused", zap.String("credential", c.Name), zap.String("reason", err.Error()))
					return &auth.TokenInfo{UserID: c.Name, Expiration: time.Now().Add(tokenLife)}, nil // no scope: 403
				}
				s.log.Info("mcp request refused: unknown token")
				return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
			}
		}
		c.authorization = r.Header.Get("Authorization")
		return &auth.TokenInfo{Scopes: []string{scope}, UserID: c.Name, Expiration: time.Now().Add(tokenLife), Extra: map[string]any{callerKey: c}}, nil
	}
	bearer := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{Scopes: []string{scope}})(stream)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if api.FromTool(r) {
			s.log.Warn("mcp request of a run's tool refused")
			http.Error(w, "a run's tools may not use agentwork's MCP server (nobody approves their own request)", http.StatusForbidden)
			return
		}
		bearer.ServeHTTP(w, r)
	})
}

const callerKey = "agentwork.caller"

// caller is the caller of a request: from its token, else the local
// caller of the stdio server.
func (s *Server) caller(extra *mcp.RequestExtra) (Caller, error) {
	if extra != nil && extra.TokenInfo != nil {
		if c, ok := extra.TokenInfo.Extra[callerKey].(Caller); ok {
			return c, nil
		}
	}
	if s.local != nil {
		return *s.local, nil
	}
	return Caller{}, errorf(CodeUnauthenticated, "no credentials: send Authorization: Bearer <token>")
}

// spec is what a tool touches: its kind ("" for the run history and
// usage, which every grant reads) and whether it changes anything.
type spec struct {
	kind  string
	write bool
}

// allow checks c's grant for sp.
func allow(c Caller, tool string, sp spec) error {
	if sp.write && c.ReadOnly {
		return errorf(CodeForbidden, "credential %q is read-only for MCP (%s.mcp.read_only), so %s was refused and nothing changed; use the read tools, or ask the operator for a token whose mcp grant is not read_only", c.Name, c.Field, tool)
	}
	if !c.allowsKind(sp.kind) {
		return errorf(CodeForbidden, "credential %q may not touch %s through MCP (%s.mcp.kinds is %s), so %s was refused and nothing changed; ask the operator to add %s to the kinds", c.Name, sp.kind, c.Field, strings.Join(c.Kinds, ", "), tool, sp.kind)
	}
	return nil
}

// kinded is an input that names the kind of work it touches itself (a
// memory tool's doc: the checklist is the heartbeat's, kind jobs).
type kinded interface{ kind() string }

// add registers a typed tool with the grant check and the log line every
// call gets.
func add[In, Out any](s *Server, t *mcp.Tool, sp spec, h func(ctx context.Context, c Caller, in In) (Out, error)) {
	if sp.write {
		t.Annotations = &mcp.ToolAnnotations{DestructiveHint: ptr(strings.HasPrefix(t.Name, "delete") || strings.HasPrefix(t.Name, "cancel"))}
	} else {
		t.Annotations = &mcp.ToolAnnotations{ReadOnlyHint: true}
	}
	mcp.AddTool(s.mcp, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		start := s.now()
		c, err := s.caller(req.Extra)
		if err == nil {
			sp := sp
			if k, ok := any(in).(kinded); ok {
				sp.kind = k.kind()
			}
			err = allow(c, t.Name, sp)
		}
		var out Out
		if err == nil {
			out, err = h(ctx, c, in)
		}
		log := s.log.With(zap.String("tool", t.Name), zap.String("credential", c.Name), zap.Duration("took", s.now().Sub(start)))
		if err != nil {
			e, ok := errors.AsType[*Error](err)
			if !ok {
				e = &Error{Code: CodeInternal, Message: err.Error()}
			}
			log.Info("mcp tool call failed", zap.String("code", e.Code))
			return nil, zero, e
		}
		log.Info("mcp tool call")
		return nil, out, nil
	})
}

func ptr[T any](v T) *T { return &v }

// matchTool reports whether the tool name or glob want is within the
// patterns of allowed.
func matchTool(allowed []string, want string) bool {
	for _, p := range allowed {
		if p == want {
			return true
		}
		if ok, _ := path.Match(p, want); ok {
			return true
		}
	}
	return false
}
