package approval

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
)

// DefaultTimeout is how long an approval waits when its request sets no
// timeout.
const DefaultTimeout = 24 * time.Hour

// DefaultArgsMax is the longest a tool call's arguments may be to be
// asked about: 64 KiB.
const DefaultArgsMax = 64 << 10

// Config configures a Service: the approvals section of agentwork.yaml
// (public_url, timeout) and what cmd/agentwork wires in. Zero fields take
// the documented defaults.
type Config struct {
	// PublicURL is the base of the signed links, as people's browsers
	// reach agentwork ("https://agentwork.example.com"); a link is
	// <public_url>/approvals/<id>/<verb>?exp=...&sig=... Default: the
	// HTTP listener's address (http://127.0.0.1:8080), which only a
	// browser on this machine reaches. No links when HTTP is off.
	PublicURL string `yaml:"public_url" json:"public_url,omitempty"`
	// Timeout is how long an approval waits when what asks sets no
	// timeout. Default 24h.
	Timeout time.Duration `yaml:"timeout" json:"timeout,omitempty"`

	// LinkKey signs the links (HMAC-SHA256); no key, no links.
	// cmd/agentwork derives it from the admin token.
	LinkKey []byte `yaml:"-" json:"-"`
	// Connectors are the connector names a target may name; Ask refuses
	// another. Empty: any well-formed target.
	Connectors []string `yaml:"-" json:"-"`
	// Secrets are cut out of the question and the tool's arguments.
	Secrets []string `yaml:"-" json:"-"`
	// ArgsMax bounds a tool call's arguments (bytes, secrets cut out):
	// longer ones are not asked about (Ask refuses them), since the
	// approver must see them whole. Default DefaultArgsMax.
	ArgsMax int `yaml:"-" json:"-"`
	// Concurrency is how many fired timers the consumer handles at once.
	// Default 4.
	Concurrency int `yaml:"-" json:"-"`
	// AckWait is the timer consumer's ack wait. Default 30s.
	AckWait time.Duration `yaml:"-" json:"-"`
	// ShutdownGrace is how long handlers in flight may finish when Run's
	// ctx ends. Default 10s.
	ShutdownGrace time.Duration `yaml:"-" json:"-"`
}

// Validate checks the approvals section.
func (c Config) Validate() error {
	var errs []error
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			errs = append(errs, fmt.Errorf("approvals.public_url: %q: want the http(s) address people's browsers reach agentwork at, e.g. https://agentwork.example.com", c.PublicURL))
		}
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("approvals.timeout: %s: must not be negative (0: 24h)", c.Timeout))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ArgsMax <= 0 {
		c.ArgsMax = DefaultArgsMax
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	return c
}

// Option configures a Service.
type Option func(*Service)

// WithLogger sets the logger (default zap.NewNop()).
func WithLogger(l *zap.Logger) Option { return func(s *Service) { s.log = l } }

// WithClock sets the clock of the records' times and of the deadline
// checks (default time.Now). Timers fire in real time whatever it says.
func WithClock(now func() time.Time) Option { return func(s *Service) { s.now = now } }

// Service asks for, decides and keeps the approvals on a bus. Any number
// of services (in one process or many) may share a bus: each approval is
// one KV record written by compare-and-set, and the timer consumer is
// shared. Its methods are safe for concurrent use.
type Service struct {
	bus    *bus.Bus
	cfg    Config
	log    *zap.Logger
	now    func() time.Time
	timers *bus.Timers

	// hook, if set (tests), is called at the named points; an error
	// stops the caller there as if its process died.
	hook func(point, id string) error
}

// New returns a service on b. It does no I/O; Run does.
func New(b *bus.Bus, cfg Config, opts ...Option) *Service {
	s := &Service{bus: b, cfg: cfg.withDefaults(), log: zap.NewNop(), now: time.Now, timers: bus.NewTimers(b)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Ask asks for an approval: it writes the record (pending) first, arms
// its deadline on the time engine, queues the question to each target
// (with the approval's actions: buttons where the connector shows them,
// signed links in the text elsewhere) and publishes
// agentwork.event.approval.requested. created is false when the id was
// asked before: that approval is returned, and what an earlier Ask left
// undone (a crash) is completed, each step stored once. A request that is
// not valid is an error wrapping ErrInvalid that says what is wrong.
func (s *Service) Ask(ctx context.Context, r Request) (a Approval, created bool, err error) {
	return s.ask(ctx, r)
}

// Decide records the verdict (approve or reject) of by, with an optional
// comment, by compare-and-set from pending; then publishes the approval's
// Resume and agentwork.event.approval.approved|rejected. It returns the
// approval as decided. The same verdict again returns the recorded
// decision (no error, whoever gave it); another verdict after a decision
// is a *ConflictError naming who decided what and when; an expired or
// cancelled approval is ErrExpired or ErrCancelled (wrapped, with the
// approval), and a pending one whose deadline has passed expires then
// (as its timer would) and is ErrExpired; a by the approval does not allow is ErrNotAllowed; an
// unknown id ErrNoApproval.
func (s *Service) Decide(ctx context.Context, id string, v Verdict, by, comment string) (Approval, error) {
	return s.decide(ctx, id, Decision{Verdict: v, By: by, Comment: comment})
}

// Cancel cancels a pending approval (its run was cancelled): it ends
// cancelled with reason, its timer is removed, and
// agentwork.event.approval.cancelled is published; no Resume is. An
// approval that has ended is returned as it is.
func (s *Service) Cancel(ctx context.Context, id, reason string) (Approval, error) {
	return s.cancel(ctx, id, reason)
}

// Get returns the approval id, or ErrNoApproval.
func (s *Service) Get(ctx context.Context, id string) (Approval, error) {
	a, _, err := s.read(ctx, id)
	return a, err
}

// List returns the approvals f selects, the newest first.
func (s *Service) List(ctx context.Context, f Filter) ([]Approval, error) {
	return s.list(ctx, f)
}

// Run consumes the approvals' fired timers until ctx is done, through a
// durable consumer all instances share: it expires approvals at their
// deadline (also one whose deadline passed while nothing ran: it fires
// at the next start), sends the reminders, and finishes the work a
// crashed Decide left after its compare-and-set. It returns nil after a
// shutdown, or an error when the consumer cannot be created or is lost.
func (s *Service) Run(ctx context.Context) error { return s.run(ctx) }
