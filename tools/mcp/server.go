package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/tools"
)

// server is one configured server and its current session.
type server struct {
	m         *Manager
	name      string
	cfg       ServerConfig // with defaults
	transport string
	connect   func(context.Context) (sdk.Transport, error) // in-process only
	http      *http.Client                                 // HTTP only
	headers   *headerTransport                             // HTTP only
	client    *sdk.Client
	secrets   []string
	log       *zap.Logger
	// listChanged is signalled by the client's notification handler; the
	// session loop lists the tools again.
	listChanged chan struct{}

	mu       sync.Mutex
	state    State
	since    time.Time
	lastErr  string // redacted
	problems []string
	retryAt  time.Time
	restarts int
	everUp   bool
	stopped  bool
	sess     *sdk.ClientSession
	tools    map[string]tool // by the name the model sees
}

// tool is one tool of a server.
type tool struct {
	name string // the server's
	spec tools.Spec
}

func newServer(m *Manager, impl *sdk.Implementation, name string, c ServerConfig, transport string, connect func(context.Context) (sdk.Transport, error)) *server {
	s := &server{
		m: m, name: name, cfg: c.WithDefaults(), transport: transport, connect: connect,
		secrets:     c.secrets(),
		log:         m.log.With(zap.String("mcp_server", name), zap.String("transport", transport)),
		listChanged: make(chan struct{}, 1),
		state:       StateStarting,
		since:       m.clock.Now(),
	}
	if transport == TransportHTTP {
		s.http, s.headers = newHTTPClient(c.URL, c.Headers)
	}
	s.client = sdk.NewClient(impl, &sdk.ClientOptions{
		// No roots, sampling or elicitation: agentwork only calls tools.
		Capabilities: &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case s.listChanged <- struct{}{}:
			default: // a listing is due already
			}
		},
	})
	return s
}

// redact cuts the server's secrets out of text that may quote them.
func (s *server) redact(text string) string { return secret.Redact(text, s.secrets) }

// run keeps the server running until ctx is done.
func (s *server) run(ctx context.Context) {
	first := true
	endFirst := func() {
		if first {
			first = false
			s.m.firstAttemptDone()
		}
	}
	defer endFirst()
	if s.http != nil {
		defer s.http.CloseIdleConnections()
	}
	failures := 0
	for {
		upFor, err := s.session(ctx, endFirst)
		if ctx.Err() != nil {
			s.stop()
			return
		}
		if upFor >= BackoffMax {
			failures = 0
		}
		delay := BackoffMin << min(failures, 16)
		delay = min(delay, BackoffMax)
		failures++
		s.down(err, delay)
		endFirst()
		t := s.m.clock.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			s.stop()
			return
		case <-t.C():
		}
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
	}
}

// session connects, lists the tools, and serves the session until it ends
// or ctx is done. It returns how long the server was up and why it ended.
func (s *server) session(ctx context.Context, up func()) (upFor time.Duration, err error) {
	s.setState(StateStarting)
	startCtx, cancel := context.WithTimeout(ctx, max(s.cfg.Timeout, MinStartTimeout))
	defer cancel()
	var t sdk.Transport
	var p *proc
	switch s.transport {
	case TransportStdio:
		if p, err = startProc(s.cfg); err != nil {
			return 0, fmt.Errorf("start %s: %w", s.cfg.Command, err)
		}
		defer p.stop()
		t = &sdk.IOTransport{Reader: p.stdout, Writer: p.stdin}
	case TransportHTTP:
		s.headers.reset()
		t = &sdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.http}
	default:
		if t, err = s.connect(startCtx); err != nil {
			return 0, fmt.Errorf("connect: %w", err)
		}
	}
	sess, err := s.client.Connect(startCtx, t, nil)
	if err != nil {
		return 0, s.failed("connect", err, p)
	}
	ended := make(chan struct{})
	var endErr error // set before ended is closed
	go func() {
		endErr = sess.Wait()
		close(ended)
	}()
	defer func() {
		_ = sess.Close()
		<-ended
	}()
	list, problems, err := s.discover(startCtx, sess)
	if err != nil {
		return 0, s.failed("list tools", err, p)
	}
	cancel()
	s.upWith(sess, list, problems)
	up()
	since := s.m.clock.Now()
	defer func() { upFor = s.m.clock.Now().Sub(since) }()
	var exited <-chan struct{}
	if p != nil {
		exited = p.done
	}
	for {
		select {
		case <-ctx.Done():
			s.detach()
			return 0, ctx.Err()
		case <-exited:
			s.detach()
			return 0, s.exitError(p)
		case <-ended:
			s.detach()
			if p != nil && waitFor(p.done, time.Second) {
				return 0, s.exitError(p)
			}
			if endErr != nil {
				return 0, fmt.Errorf("the connection ended: %s", s.redact(endErr.Error()))
			}
			return 0, errors.New("the connection ended")
		case <-s.listChanged:
			lctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
			list, problems, err := s.discover(lctx, sess)
			cancel()
			if err != nil {
				s.log.Warn("mcp server: list tools after tools/list_changed", zap.String("error", s.redact(err.Error())))
				continue
			}
			s.setTools(list, problems)
		}
	}
}

// failed explains a failed start: a stdio server that exited says how, and
// what it wrote to stderr last.
func (s *server) failed(what string, err error, p *proc) error {
	if p != nil && waitFor(p.done, time.Second) {
		return fmt.Errorf("%s: %w", what, s.exitError(p))
	}
	msg := s.redact(err.Error())
	if p != nil {
		if e := p.stderr.last(300); e != "" {
			msg += "; stderr: " + s.redact(e)
		}
	}
	if s.headers != nil {
		if where := s.headers.elsewhere.Load(); where != nil {
			msg += fmt.Sprintf(" (the server redirected to %s, another origin, where agentwork does not send mcp.servers.%s.headers: set mcp.servers.%s.url to the address the server answers at)", s.redact(*where), s.name, s.name)
		} else if code := s.headers.refused.Load(); code != 0 {
			msg += fmt.Sprintf(" (the server answered %d: check mcp.servers.%s.headers)", code, s.name)
		}
	}
	return fmt.Errorf("%s: %s", what, msg)
}

func (s *server) exitError(p *proc) error {
	msg := "the server exited (" + p.exited() + ")"
	if e := p.stderr.last(300); e != "" {
		msg += "; stderr: " + e
	}
	return errors.New(s.redact(msg))
}

// discover lists the server's tools and makes their Specs. Tools that
// cannot be offered are left out, each with a problem that says why.
func (s *server) discover(ctx context.Context, sess *sdk.ClientSession) (map[string]tool, []string, error) {
	var listed []*sdk.Tool
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return nil, nil, err
		}
		listed = append(listed, t)
	}
	var problems []string
	out := map[string]tool{}
	from := map[string]string{} // name the model sees → the server's, for clashes
	clashed := map[string]bool{}
	for _, t := range listed {
		name, err := ToolName(s.name, t.Name)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if other, ok := from[name]; ok {
			problems = append(problems, fmt.Sprintf("tools %q and %q both map to %s, so neither is offered (rename one on the server)", other, t.Name, name))
			clashed[name] = true
			continue
		}
		from[name] = t.Name
		schema, err := inputSchema(t.InputSchema)
		if err != nil {
			problems = append(problems, fmt.Sprintf("tool %q is not offered: %v", t.Name, err))
			continue
		}
		desc := t.Description
		if desc == "" {
			desc = t.Title
		}
		desc = s.redact(desc) // the model reads it with every request
		out[name] = tool{name: t.Name, spec: tools.Spec{
			Name: name, Description: desc, Schema: schema,
			Handler:    func(ctx context.Context, args json.RawMessage) (string, error) { return s.call(ctx, name, args) },
			Idempotent: slices.Contains(s.cfg.IdempotentTools, t.Name),
		}}
	}
	for name := range clashed {
		delete(out, name)
	}
	for _, n := range s.cfg.IdempotentTools {
		if !slices.ContainsFunc(listed, func(t *sdk.Tool) bool { return t.Name == n }) {
			problems = append(problems, fmt.Sprintf("idempotent_tools names %q, which the server does not list", n))
		}
	}
	slices.Sort(problems)
	return out, problems, nil
}

// inputSchema returns the tool's input schema as the model gets it: a JSON
// object schema, with "type": "object" and "properties" added if missing
// (OpenAI rejects an object schema without properties).
func inputSchema(v any) (json.RawMessage, error) {
	obj := map[string]any{}
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("input schema: %w", err)
		}
		if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
			return nil, errors.New("the input schema is not a JSON object")
		}
	}
	switch typ := obj["type"]; typ {
	case nil:
		obj["type"] = "object"
	case "object":
	default:
		return nil, fmt.Errorf("the input schema has type %v; tools take an object", typ)
	}
	if _, ok := obj["properties"]; !ok {
		obj["properties"] = map[string]any{}
	}
	return json.Marshal(obj)
}

func (s *server) setState(st State) {
	s.mu.Lock()
	if s.state != st {
		s.state, s.since = st, s.m.clock.Now()
	}
	s.mu.Unlock()
	s.m.notify()
}

func (s *server) upWith(sess *sdk.ClientSession, list map[string]tool, problems []string) {
	s.mu.Lock()
	restarted := s.everUp
	s.sess, s.everUp = sess, true
	s.state, s.since, s.retryAt = StateUp, s.m.clock.Now(), time.Time{}
	s.lastErr = ""
	s.mu.Unlock()
	s.log.Info("mcp server up", zap.Int("tools", len(list)), zap.Bool("restarted", restarted))
	s.setTools(list, problems)
}

func (s *server) setTools(list map[string]tool, problems []string) {
	s.mu.Lock()
	old := s.tools
	s.tools, s.problems = list, problems
	s.mu.Unlock()
	added := slices.DeleteFunc(slices.Sorted(maps.Keys(list)), func(n string) bool { _, ok := old[n]; return ok })
	removed := slices.DeleteFunc(slices.Sorted(maps.Keys(old)), func(n string) bool { _, ok := list[n]; return ok })
	if old != nil && (len(added) > 0 || len(removed) > 0) {
		s.log.Info("mcp server tools changed", zap.Strings("added", added), zap.Strings("removed", removed))
	}
	for _, p := range problems {
		s.log.Warn("mcp server tool not offered", zap.String("problem", s.redact(p)))
	}
	s.m.notify()
}

// detach forgets the session that just ended: calls from now on are told
// the server is down.
func (s *server) detach() {
	s.mu.Lock()
	s.sess = nil
	s.state, s.since = StateDown, s.m.clock.Now()
	s.mu.Unlock()
	s.m.notify()
}

// down records a failure and when the next attempt is due.
func (s *server) down(err error, delay time.Duration) {
	msg := s.redact(err.Error())
	s.mu.Lock()
	repeated := msg == s.lastErr
	s.sess = nil
	if s.state != StateDown {
		s.state, s.since = StateDown, s.m.clock.Now()
	}
	s.lastErr, s.retryAt = msg, s.m.clock.Now().Add(delay)
	s.mu.Unlock()
	log := s.log.Warn
	if repeated {
		log = s.log.Debug
	}
	log("mcp server down", zap.String("error", msg), zap.Duration("retry_in", delay))
	s.m.notify()
}

// stop marks the server stopped, as Run ends.
func (s *server) stop() {
	s.mu.Lock()
	s.sess, s.stopped = nil, true
	s.state, s.since, s.retryAt = StateDown, s.m.clock.Now(), time.Time{}
	s.mu.Unlock()
	s.m.notify()
}

func (s *server) status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{
		Name: s.name, Transport: s.transport, State: s.state, Since: s.since,
		LastError: s.lastErr, RetryAt: s.retryAt, Restarts: s.restarts,
		Tools: slices.Sorted(maps.Keys(s.tools)),
	}
	if s.state == StateUp {
		st.LastError = s.redact(strings.Join(s.problems, "; "))
	}
	if st.Tools == nil {
		st.Tools = []string{}
	}
	return st
}

// callError is a failed call: a sentence for the model, of a kind for
// errors.Is.
type callError struct {
	msg  string
	kind error
}

func (e *callError) Error() string { return e.msg }
func (e *callError) Unwrap() error { return e.kind }

func failf(kind error, format string, args ...any) error {
	return &callError{msg: fmt.Sprintf(format, args...), kind: kind}
}

// call calls the tool the model knows as name.
func (s *server) call(ctx context.Context, name string, args json.RawMessage) (string, error) {
	s.mu.Lock()
	sess, t, known := s.sess, s.tools[name].name, s.tools[name].name != ""
	unavailable := s.unavailable()
	s.mu.Unlock()
	if sess == nil {
		return "", unavailable
	}
	if !known {
		return "", failf(ErrGone, "%s is no longer offered: MCP server %s changed its tools; do not call it again", name, s.name)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	res, err := sess.CallTool(cctx, &sdk.CallToolParams{Name: t, Arguments: args})
	if err != nil {
		var rpcErr *jsonrpc.Error
		switch {
		case ctx.Err() != nil:
			return "", ctx.Err()
		case cctx.Err() != nil:
			return "", failf(ErrTimeout, "MCP server %s did not answer within %s (mcp.servers.%s.timeout), so the call was cancelled; it may or may not have taken effect", s.name, s.cfg.Timeout, s.name)
		case errors.Is(err, sdk.ErrConnectionClosed):
			return "", failf(ErrDown, "MCP server %s went down during the call, which may or may not have taken effect; it is restarted automatically", s.name)
		case errors.As(err, &rpcErr):
			return "", failf(ErrCall, "MCP server %s refused the call: %s", s.name, s.redact(rpcErr.Message))
		default:
			return "", failf(ErrCall, "MCP server %s: the call failed: %s", s.name, s.redact(err.Error()))
		}
	}
	// Redacted before it is cut, of the server's secrets and the config's
	// (the tool loop's): a cut through a secret would leave a part of it
	// that matches nothing.
	secrets := append(slices.Clip(s.secrets), secret.FromContext(ctx)...)
	out := capOutput(render(res), s.cfg.MaxOutput, "mcp.servers."+s.name+".max_output", secrets)
	if res.IsError {
		if out == "" {
			out = "the tool reported an error and said nothing more"
		}
		return "", &callError{msg: out, kind: ErrToolError}
	}
	if out == "" {
		out = "(the tool returned no content)"
	}
	return out, nil
}

// unavailable is the error of a call while there is no session; s.mu is
// held.
func (s *server) unavailable() error {
	switch {
	case s.stopped:
		return failf(ErrDown, "MCP server %s is stopped: agentwork is shutting down", s.name)
	case !s.everUp && s.lastErr == "":
		return failf(ErrDown, "MCP server %s is starting; try again in a moment", s.name)
	case s.state == StateStarting:
		return failf(ErrDown, "MCP server %s is down and being restarted (it failed: %s); try again in a moment", s.name, s.lastErr)
	case s.lastErr == "":
		return failf(ErrDown, "MCP server %s is down; it is restarted automatically", s.name)
	}
	in := s.retryAt.Sub(s.m.clock.Now()).Round(time.Second)
	return failf(ErrDown, "MCP server %s is down (%s); it is restarted automatically, next attempt in %s", s.name, s.lastErr, max(in, 0))
}
