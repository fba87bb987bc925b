package mcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/tools"
)

// Restart backoff: the first retry after a failure waits BackoffMin, each
// further one twice as long, up to BackoffMax. A server that stayed up for
// BackoffMax starts again from BackoffMin when it next fails.
const (
	BackoffMin = time.Second
	BackoffMax = time.Minute
)

// State is a server's state.
type State string

// States of a server.
const (
	// StateStarting: connecting and listing tools, at first or after a
	// failure.
	StateStarting State = "starting"
	// StateUp: connected; its tools can be called.
	StateUp State = "up"
	// StateDown: it failed (LastError says how) and waits to be restarted,
	// or the Manager has stopped.
	StateDown State = "down"
)

// Status is what the Manager knows of one server, for `agentwork tools
// list` and the readiness details. It holds no secret.
type Status struct {
	Name string `json:"name"`
	// Transport is "stdio", "http" or "inprocess".
	Transport string `json:"transport"`
	State     State  `json:"state"`
	// Since is when the server entered State.
	Since time.Time `json:"since"`
	// LastError says why the server is down, or, while it is up, which of
	// its tools are not offered and why. Env and header values are cut out.
	LastError string `json:"last_error,omitempty"`
	// RetryAt is when a down server is tried again.
	RetryAt time.Time `json:"retry_at,omitzero"`
	// Restarts counts the attempts to start it again after a failure.
	Restarts int `json:"restarts"`
	// Tools are the names the model sees (<server>__<tool>), sorted: those
	// of the last successful listing, also while the server is down.
	Tools []string `json:"tools"`
}

// Errors of a call, for callers that tell outcomes apart (errors.Is). The
// error a call returns reads as a sentence for the model; these are its
// kinds.
var (
	// ErrDown: the server is not up (starting, or down and restarting).
	ErrDown = errors.New("mcp: server down")
	// ErrTimeout: the server did not answer within its timeout. It is a
	// tools.ErrTimeout, so the tool loop records the call as timed out.
	ErrTimeout = fmt.Errorf("mcp: %w", tools.ErrTimeout)
	// ErrToolError: the tool ran and reported an error (isError).
	ErrToolError = errors.New("mcp: tool error")
	// ErrGone: the server no longer lists the tool.
	ErrGone = errors.New("mcp: tool no longer offered")
	// ErrCall: the server refused or failed the call (a protocol error).
	ErrCall = errors.New("mcp: call failed")
)

// ErrRunning is returned by a second Run.
var ErrRunning = errors.New("mcp: Run called twice")

// Manager runs the configured MCP servers and offers their tools as
// tools.Specs. New does no I/O; Run starts every server, keeps it running
// and stops it. Its methods are safe for concurrent use.
type Manager struct {
	log     *zap.Logger
	clock   clock.Clock
	version string
	inproc  []inProcess
	servers []*server // sorted by name

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	running bool
	waiting int           // servers whose first attempt has not ended
	ready   chan struct{} // closed when waiting reaches 0
}

var _ tools.Source = (*Manager)(nil)

// Option configures a Manager.
type Option func(*Manager)

// WithLogger sets the logger. Default: none.
func WithLogger(l *zap.Logger) Option { return func(m *Manager) { m.log = l } }

// WithClock sets the clock that times restarts. Default: the system clock.
func WithClock(c clock.Clock) Option { return func(m *Manager) { m.clock = c } }

// WithVersion sets the version agentwork gives servers in the handshake.
// Default "dev".
func WithVersion(v string) Option { return func(m *Manager) { m.version = v } }

type inProcess struct {
	name    string
	cfg     ServerConfig
	connect func(context.Context) (sdk.Transport, error)
}

// WithInProcess adds a server that runs in this process, such as one built
// with the SDK and reached through sdk.NewInMemoryTransports: connect
// returns a fresh transport for each connection (the first and every one
// after the session ends). cfg gives its limits (Timeout, MaxOutput,
// IdempotentTools); Command and URL must be empty.
func WithInProcess(name string, cfg ServerConfig, connect func(ctx context.Context) (sdk.Transport, error)) Option {
	return func(m *Manager) { m.inproc = append(m.inproc, inProcess{name, cfg, connect}) }
}

// New returns a Manager for cfg. It validates cfg and does no I/O.
func New(cfg Config, opts ...Option) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Manager{log: zap.NewNop(), clock: clock.Real{}, version: "dev", changed: make(chan struct{}), ready: make(chan struct{})}
	for _, o := range opts {
		o(m)
	}
	impl := &sdk.Implementation{Name: "agentwork", Version: m.version}
	byName := map[string]bool{}
	for name, c := range cfg.Servers {
		m.servers = append(m.servers, newServer(m, impl, name, c, c.transport(), nil))
		byName[name] = true
	}
	for _, ip := range m.inproc {
		p := "mcp.servers." + ip.name
		if err := CheckServerName(ip.name); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if byName[ip.name] {
			return nil, fmt.Errorf("%s: defined twice", p)
		}
		if ip.cfg.Command != "" || ip.cfg.URL != "" || ip.connect == nil {
			return nil, fmt.Errorf("%s: an in-process server takes a connect function and no command or url", p)
		}
		c := ip.cfg
		c.Command = "in-process" // only to pass the check of command or url
		if err := errors.Join(c.validate(p)...); err != nil {
			return nil, err
		}
		m.servers = append(m.servers, newServer(m, impl, ip.name, ip.cfg, TransportInProcess, ip.connect))
		byName[ip.name] = true
	}
	sort.Slice(m.servers, func(i, j int) bool { return m.servers[i].name < m.servers[j].name })
	m.waiting = len(m.servers)
	if m.waiting == 0 {
		close(m.ready)
	}
	return m, nil
}

// Run starts every server and keeps it running: a server that fails to
// start or ends (a stdio server that exits, a lost HTTP session) is
// started again after a backoff (BackoffMin doubling to BackoffMax), and
// one that never comes up does not keep the others from running. Run
// blocks until ctx is done, then stops every server (a stdio server gets
// its stdin closed, then SIGTERM, then SIGKILL, 5s apart) and returns nil.
// It may be called once.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.running {
		m.mu.Unlock()
		return ErrRunning
	}
	m.running = true
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range m.servers {
		wg.Go(func() { s.run(ctx) })
	}
	<-ctx.Done()
	wg.Wait()
	return nil
}

// Ready is closed once every server has been tried once: it is up, or its
// first start failed. Specs then holds the tools of every server that came
// up.
func (m *Manager) Ready() <-chan struct{} { return m.ready }

// Changed returns a channel that is closed at the next change of a
// server's state or tools. Call it again for the change after.
func (m *Manager) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *Manager) notify() {
	m.mu.Lock()
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

func (m *Manager) firstAttemptDone() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.waiting--; m.waiting == 0 {
		close(m.ready)
	}
}

// Specs returns the tools of every server, by server and name: one Spec
// named <server>__<tool> per tool the server listed last, with its
// description and input schema. A Spec's handler calls the tool on the
// server's current session, so it stays valid across restarts: while the
// server is down it returns an error that says so (ErrDown), and if the
// server no longer lists the tool, one that says that (ErrGone).
func (m *Manager) Specs() []tools.Spec {
	var out []tools.Spec
	for _, s := range m.servers {
		s.mu.Lock()
		for _, n := range slices.Sorted(maps.Keys(s.tools)) {
			out = append(out, s.tools[n].spec)
		}
		s.mu.Unlock()
	}
	return out
}

// Status returns the status of every server, by name.
func (m *Manager) Status() []Status {
	out := make([]Status, 0, len(m.servers))
	for _, s := range m.servers {
		out = append(out, s.status())
	}
	return out
}

// Idempotent reports whether the tool the model knows as name is listed in
// its server's idempotent_tools: a call of it cut short may be made again.
// Its Spec says the same (tools.Spec.Idempotent).
func (m *Manager) Idempotent(name string) bool {
	for _, s := range m.servers {
		s.mu.Lock()
		t, ok := s.tools[name]
		s.mu.Unlock()
		if ok {
			return slices.Contains(s.cfg.IdempotentTools, t.name)
		}
	}
	return false
}
