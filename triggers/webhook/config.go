package webhook

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/internal/stdwebhook"
	"github.com/agentwork/agentwork/tools"
)

// Defaults.
const (
	// DefaultTolerance is how far webhook-timestamp may be from now, either way.
	DefaultTolerance = 5 * time.Minute
	// DefaultMaxBody is the largest accepted request body.
	DefaultMaxBody = 256 << 10
	// DefaultMaxInflight bounds the body bytes received at once.
	DefaultMaxInflight = 32 << 20
	// MinSecretBytes is the shortest signing secret accepted (Standard
	// Webhooks: "at least 24 bytes").
	MinSecretBytes = stdwebhook.MinSecretBytes
	// MinTokenLength is the shortest bearer token accepted.
	MinTokenLength = 16
)

// Config is the `webhook` section: who may request work through POST
// /v1/tasks, and what. With no tokens and no secrets every request is
// refused with 401 (secure by default).
//
// Secrets and tokens arrive already ${ENV}-expanded by the config loader.
type Config struct {
	// Tokens are bearer tokens: `Authorization: Bearer <token>`.
	Tokens []Token `yaml:"tokens" json:"tokens,omitempty"`
	// Secrets are Standard Webhooks signing secrets. A request passes when
	// any of its v1 signatures matches any secret (rotation: configure the
	// old and the new secret side by side).
	Secrets []Secret `yaml:"secrets" json:"secrets,omitempty"`
	// Tolerance is how far webhook-timestamp may lie from the server's
	// clock, either way. Default 5m.
	Tolerance time.Duration `yaml:"tolerance" json:"tolerance,omitempty"`
	// MaxBody is the largest accepted body in bytes; larger is 413.
	// Default 262144 (256 KiB).
	MaxBody int64 `yaml:"max_body" json:"max_body,omitempty"`
	// MaxInflight bounds the bytes of the bodies being received and queued
	// at once (each counts its Content-Length, or max_body when unknown);
	// a request beyond it is answered 503 with Retry-After, so memory stays
	// bounded under a burst. Default 33554432 (32 MiB).
	MaxInflight int64 `yaml:"max_inflight" json:"max_inflight,omitempty"`
}

// Grant is what a credential may request: sources and names, each a list of
// exact values or path.Match globs ("deploy-*"). Sources default to
// ["task"] (none for a token with an mcp or console section: list task
// to let it send tasks); empty Names allow every name. The source workflow lets the
// credential start the workflows of Names (that have a webhook trigger)
// through POST /v1/workflows/{name}/runs; it is never a task's source. The reserved sources heartbeat,
// cron and delivery are never granted, whatever the patterns say.
//
// The source console, spelled out (a glob such as "*" never grants it),
// lets the credential's token log in to the web console: to see
// everything, and change nothing unless Console is write. It is never a
// task's source.
//
// Targets are where a task of the credential may send its result: each a
// connector (a name, or a path.Match glob of names) alone, which allows
// naming that connector alone (its configured destination), or followed by
// :<destination pattern>, which allows naming it with a destination the
// pattern matches (* any characters, dots, slashes and @ included; ? one
// character): [console, phone, "team:#ops", "mail:*@example.com"]. Empty
// (the default): any configured connector alone, and no destination. A
// task that names no targets goes to the source's defaults, which the
// operator configured; the grant is not asked.
type Grant struct {
	Sources []string `yaml:"sources" json:"sources,omitempty"`
	Names   []string `yaml:"names" json:"names,omitempty"`
	Targets []string `yaml:"targets" json:"targets,omitempty"`
	// Console is what a credential with sources: [console] may do in the
	// web console: read (the default: see everything, change nothing) or
	// write (also run, pause, resume and delete jobs, wake and pause the
	// heartbeat, retry deliveries).
	Console string `yaml:"console" json:"console,omitempty" jsonschema:"enum=read,enum=write"`

	// noTasks: a token with an mcp or console section, which sends no
	// tasks unless Sources lists them (Token.grant).
	noTasks bool
}

// Token is a named bearer token and its grant.
type Token struct {
	// Name identifies the credential in logs and in the request's
	// CloudEvents source (agentwork/webhook/<name>). [a-z0-9_-].
	Name string `yaml:"name" json:"name"`
	// Token is the secret value, at least 16 characters (use ${ENV}).
	Token string `yaml:"token" json:"token"`
	Grant `yaml:",inline" json:",inline"`
	// MCP, if set, lets the token use agentwork's MCP server (/mcp), within
	// this grant: docs/mcp-server.md. Unset: the token cannot use it.
	MCP *MCPGrant `yaml:"mcp" json:"mcp,omitempty"`
}

// MCPGrant is what a token may do through the MCP server. Tasks it sends
// and workflows it starts are still limited by its sources and names, and
// their targets (and those of the jobs it creates) by its targets.
type MCPGrant struct {
	// ReadOnly, if true, allows only the tools that change nothing
	// (list_*, get_*, read_memory, heartbeat_status).
	ReadOnly bool `yaml:"read_only" json:"read_only,omitempty"`
	// Kinds are the kinds of work its tools may touch: jobs (cron jobs
	// and the heartbeat), tasks, workflows, approvals, memory. Empty: all.
	// The run history and the token usage are readable by every MCP grant.
	Kinds []string `yaml:"kinds" json:"kinds,omitempty" jsonschema:"enum=jobs,enum=tasks,enum=workflows,enum=approvals,enum=memory"`
	// Tools are the tools (names and globs, as runner.tools) that the jobs
	// it creates or updates may name. Empty: none, so its jobs run with
	// the default tools (runner.tools).
	Tools []string `yaml:"tools" json:"tools,omitempty"`
}

// MCPKinds are the kinds of work an MCPGrant can name.
var MCPKinds = []string{"jobs", "tasks", "workflows", "approvals", "memory"}

// AllowsKind reports whether g lets the token's tools touch kind.
func (g MCPGrant) AllowsKind(kind string) bool {
	return len(g.Kinds) == 0 || slices.Contains(g.Kinds, kind)
}

// Secret is a named Standard Webhooks signing secret and its grant.
type Secret struct {
	// Name identifies the credential, as Token.Name.
	Name string `yaml:"name" json:"name"`
	// Secret is "whsec_" followed by the base64 of at least 24 random bytes.
	Secret string `yaml:"secret" json:"secret"`
	Grant  `yaml:",inline" json:",inline"`
}

// Reserved lists the sources no webhook credential can request: the
// runtime's own triggers and the delivery results.
var Reserved = []string{bus.SourceHeartbeat, bus.SourceCron, bus.SourceDelivery}

// ReservedNames are the names no credential can have: approval records
// name who decided with them (the admin token, a signed link, the
// deadline), so a token of one of these names would pass for it.
var ReservedNames = []string{approval.ByAdmin, approval.ByLink, approval.ByTimeout}

func reserved(source string) bool {
	for _, r := range Reserved {
		if source == r {
			return true
		}
	}
	return false
}

// WithDefaults returns c with zero fields filled.
func (c Config) WithDefaults() Config {
	if c.Tolerance == 0 {
		c.Tolerance = DefaultTolerance
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	return c
}

// Validate checks c. Errors name the field, e.g.
// `webhook.secrets[1].secret: want whsec_<base64>`.
func (c Config) Validate() error {
	var errs []error
	if c.Tolerance < 0 {
		errs = append(errs, fmt.Errorf("webhook.tolerance: %s must not be negative", c.Tolerance))
	}
	if c.MaxBody < 0 || c.MaxBody > 16<<20 {
		errs = append(errs, fmt.Errorf("webhook.max_body: %d: want 1 to 16777216 bytes (default 262144)", c.MaxBody))
	}
	if c.MaxInflight < 0 || (c.MaxInflight > 0 && c.MaxInflight < max(c.MaxBody, DefaultMaxBody)) {
		errs = append(errs, fmt.Errorf("webhook.max_inflight: %d: want at least max_body (default 33554432)", c.MaxInflight))
	}
	names := map[string]string{}
	seen := func(field, name string) {
		if name == "" {
			return
		}
		if slices.Contains(ReservedNames, name) {
			errs = append(errs, fmt.Errorf("%s.name: %q is reserved (%s name who decided an approval: the admin token, a signed link, a deadline); choose another name", field, name, strings.Join(ReservedNames, ", ")))
			return
		}
		if prev, dup := names[name]; dup {
			errs = append(errs, fmt.Errorf("%s: name %q is already used by %s; give every credential its own name", field, name, prev))
			return
		}
		names[name] = field
	}
	for i, t := range c.Tokens {
		f := fmt.Sprintf("webhook.tokens[%d]", i)
		if err := bus.CheckToken(f+".name", t.Name); err != nil {
			errs = append(errs, err)
		}
		seen(f, t.Name)
		switch {
		case t.Token == "":
			errs = append(errs, fmt.Errorf("%s.token: empty (is its ${ENV} variable set?)", f))
		case len(t.Token) < MinTokenLength:
			errs = append(errs, fmt.Errorf("%s.token: %d characters is too short; use at least %d random characters, e.g. `openssl rand -hex 32`", f, len(t.Token), MinTokenLength))
		case strings.ContainsAny(t.Token, " \t\r\n"):
			errs = append(errs, fmt.Errorf("%s.token: contains white space", f))
		}
		errs = append(errs, t.Grant.validate(f)...)
		if t.MCP != nil {
			for j, k := range t.MCP.Kinds {
				if !slices.Contains(MCPKinds, k) {
					errs = append(errs, fmt.Errorf("%s.mcp.kinds[%d]: %q: want one of %s", f, j, k, strings.Join(MCPKinds, ", ")))
				}
			}
			errs = append(errs, tools.Scope(t.MCP.Tools).Check(f+".mcp.tools"))
		}
	}
	for i, s := range c.Secrets {
		f := fmt.Sprintf("webhook.secrets[%d]", i)
		if err := bus.CheckToken(f+".name", s.Name); err != nil {
			errs = append(errs, err)
		}
		seen(f, s.Name)
		if _, err := DecodeSecret(s.Secret); err != nil {
			errs = append(errs, fmt.Errorf("%s.secret: %w", f, err))
		}
		errs = append(errs, s.Grant.validate(f)...)
	}
	return errors.Join(errs...)
}

func (g Grant) validate(field string) []error {
	var errs []error
	for j, s := range g.Sources {
		f := fmt.Sprintf("%s.sources[%d]", field, j)
		switch {
		case reserved(s):
			errs = append(errs, fmt.Errorf("%s: %q can never be requested through the webhook (reserved: %s)", f, s, strings.Join(Reserved, ", ")))
		case !validPattern(s):
			errs = append(errs, fmt.Errorf("%s: %q: want a source name of a-z, 0-9, _ and - or a glob such as \"deploy-*\"", f, s))
		}
	}
	switch {
	case g.Console != "" && !slices.Contains(g.Sources, api.KindConsole):
		errs = append(errs, fmt.Errorf("%s.console: %q needs sources: [console] (the console grant is spelled out, never a glob)", field, g.Console))
	case g.Console != "" && g.Console != api.ConsoleRead && g.Console != api.ConsoleWrite:
		errs = append(errs, fmt.Errorf("%s.console: %q: want read or write", field, g.Console))
	}
	for j, n := range g.Names {
		if !validPattern(n) {
			errs = append(errs, fmt.Errorf("%s.names[%d]: %q: want a name of a-z, 0-9, _ and - or a glob such as \"report-*\"", field, j, n))
		}
	}
	for j, t := range g.Targets {
		if err := checkTargetPattern(t); err != nil {
			errs = append(errs, fmt.Errorf("%s.targets[%d]: %q: %w", field, j, t, err))
		}
	}
	return errs
}

// checkTargetPattern checks the syntax of a grant's target: a connector
// name or glob, then optionally :<destination pattern>.
func checkTargetPattern(t string) error {
	name, dest, has := strings.Cut(t, ":")
	if !validPattern(name) {
		return errors.New("want a connector name (a-z, 0-9, _ and -) or a glob of names, optionally followed by :<destination pattern>, e.g. console, \"team:#ops\" or \"mail:*@example.com\"")
	}
	if !has {
		return nil
	}
	if err := connectors.CheckTarget("target", "x:"+dest); err != nil {
		return errors.New("the destination pattern after ':' must be 1-256 printable characters without spaces (* matches any characters, ? one)")
	}
	return nil
}

// validPattern accepts a token, or a glob whose literal characters are
// token characters.
func validPattern(p string) bool {
	if p == "" || len(p) > 64 {
		return false
	}
	if _, err := path.Match(p, ""); err != nil {
		return false
	}
	for _, r := range p {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-', r == '*', r == '?', r == '[', r == ']', r == '^':
		default:
			return false
		}
	}
	return true
}

// sources are the effective source patterns (default ["task"], but none
// for a token with an mcp or console section).
func (g Grant) sources() []string {
	if len(g.Sources) == 0 && !g.noTasks {
		return []string{bus.SourceTask}
	}
	return g.Sources
}

// grant is t's effective grant: a token made for the MCP server or the
// console (a dashboard's read-only token, an approver's) gets no task
// source by default; its sources must list task to send tasks.
func (t Token) grant() Grant {
	g := t.Grant
	g.noTasks = t.MCP != nil || g.Console != ""
	return g
}

// AllowsTarget reports whether g permits a task to name target (see
// Grant.Targets). Whether the connector exists is not its concern.
func (g Grant) AllowsTarget(target string) bool {
	name, dest, has := strings.Cut(target, ":")
	if len(g.Targets) == 0 {
		return !has
	}
	for _, p := range g.Targets {
		pn, pd, phas := strings.Cut(p, ":")
		if ok, err := path.Match(pn, name); err != nil || !ok || phas != has {
			continue
		}
		if !has || connectors.MatchDestination(pd, dest) {
			return true
		}
	}
	return false
}

// Allows reports whether g permits requesting source/name. Reserved
// sources are never allowed.
//
// Source console is the web console (api.KindConsole): name read is
// allowed when the sources list console itself, name write when Console
// is write too.
func (g Grant) Allows(source, name string) bool {
	if reserved(source) {
		return false
	}
	if source == api.KindConsole {
		return slices.Contains(g.Sources, api.KindConsole) &&
			(name == api.ConsoleRead || name == api.ConsoleWrite && g.Console == api.ConsoleWrite)
	}
	return matchAny(g.sources(), source) && (len(g.Names) == 0 || matchAny(g.Names, name))
}

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, err := path.Match(p, s); err == nil && ok {
			return true
		}
	}
	return false
}

// DecodeSecret returns the key bytes of a "whsec_<base64>" signing secret
// (stdwebhook.DecodeSecret).
func DecodeSecret(s string) ([]byte, error) { return stdwebhook.DecodeSecret(s) }
