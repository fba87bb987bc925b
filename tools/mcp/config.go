package mcp

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/agentwork/agentwork/internal/httpheader"
	"github.com/agentwork/agentwork/internal/secret"
)

// Defaults of ServerConfig.
const (
	// DefaultTimeout bounds one tool call.
	DefaultTimeout = 60 * time.Second
	// DefaultMaxOutput is how many bytes of a call's result reach the model.
	DefaultMaxOutput = 64 << 10
	// MinStartTimeout is the least time a server gets to start: to answer
	// the handshake and list its tools. A server's Timeout, if longer,
	// bounds the start instead (a first `npx` run downloads the package).
	MinStartTimeout = 60 * time.Second
)

// Limits of ServerConfig.
const (
	// MinMaxOutput and MaxMaxOutput bound max_output.
	MinMaxOutput = 1 << 10
	MaxMaxOutput = 1 << 20
	// MaxTimeout bounds timeout.
	MaxTimeout = time.Hour
)

// Config is the mcp section of agentwork.yaml:
//
//	mcp:
//	  servers:
//	    fs:
//	      command: npx
//	      args: ["-y", "@modelcontextprotocol/server-filesystem", "/srv/reports"]
//	    search:
//	      url: https://mcp.example.com/mcp
//	      headers:
//	        Authorization: Bearer ${SEARCH_TOKEN}
//
// Secrets come in resolved: the config loader expands ${VAR} references.
// Env values and header values are treated as secrets: never logged, and
// cut out of every error and status that could quote them.
type Config struct {
	// Servers are the MCP servers by name. A name is 1-32 characters of
	// a-z, 0-9, _ and -, without "__" and not ending in "_": the server's
	// tools are offered to the model as <name>__<tool>. The config loader
	// also refuses the names of built-in tool families (memory, http, ...;
	// CheckBuiltins).
	Servers map[string]ServerConfig `yaml:"servers" json:"servers,omitempty"`
}

// ServerConfig is one MCP server: a stdio server (Command) or a streamable
// HTTP server (URL), and the limits of its calls.
type ServerConfig struct {
	// Command starts a stdio server: the program, found in PATH unless it
	// has a slash. agentwork talks to it over its stdin and stdout (its
	// stderr is kept to explain a failed start) and restarts it when it
	// exits.
	Command string `yaml:"command,omitempty" json:"command,omitempty"`
	// Args are the program's arguments.
	Args []string `yaml:"args,omitempty" json:"args,omitempty"`
	// Env are environment variables of the program, added to the few it
	// inherits from agentwork (HOME, LOGNAME, PATH, SHELL, TERM, USER,
	// TMPDIR, LANG, LC_ALL, TZ): the rest of agentwork's environment, with
	// its API keys, is not passed on. Values are secret: write ${VAR}.
	Env map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	// Cwd is the program's working directory. Default: agentwork's.
	Cwd string `yaml:"cwd,omitempty" json:"cwd,omitempty"`

	// URL is a streamable HTTP server's endpoint, e.g.
	// https://mcp.example.com/mcp.
	URL string `yaml:"url,omitempty" json:"url,omitempty"`
	// Headers are sent with every HTTP request, e.g. Authorization.
	// Values are secret: write ${VAR}.
	Headers map[string]string `yaml:"headers,omitempty" json:"headers,omitempty"`

	// Timeout bounds one tool call; a call still running then is cancelled
	// and the model is told. Default 60s, at most 1h.
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty" jsonschema:"default=60s"`
	// MaxOutput is how many bytes of a call's result reach the model; a
	// longer result is cut, and the model is told it was. Default 65536
	// (64 KiB), 1024 to 1048576.
	MaxOutput int `yaml:"max_output,omitempty" json:"max_output,omitempty" jsonschema:"default=65536"`
	// IdempotentTools are the server's tools (by the server's own names)
	// that may be called again with the same arguments without harm, such
	// as a read: a call interrupted by a crash of agentwork may be made
	// again. The servers' own idempotentHint annotations are not trusted.
	IdempotentTools []string `yaml:"idempotent_tools,omitempty" json:"idempotent_tools,omitempty"`
}

// WithDefaults returns c with zero limits set to their defaults.
func (c ServerConfig) WithDefaults() ServerConfig {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxOutput <= 0 {
		c.MaxOutput = DefaultMaxOutput
	}
	return c
}

// Transport names, as Status reports them.
const (
	TransportStdio     = "stdio"
	TransportHTTP      = "http"
	TransportInProcess = "inprocess"
)

// transport is the kind of server c configures.
func (c ServerConfig) transport() string {
	if c.URL != "" {
		return TransportHTTP
	}
	return TransportStdio
}

var serverNameRE = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// CheckServerName reports whether name may name a server.
func CheckServerName(name string) error {
	switch {
	case !serverNameRE.MatchString(name):
		return errors.New("the name must be 1-32 characters of a-z, 0-9, _ and - (the server's tools are offered as <name>__<tool>)")
	case strings.Contains(name, Separator) || strings.HasSuffix(name, "_"):
		return fmt.Errorf("the name may not contain %q or end in _: %q separates the server from the tool in the names the model sees", Separator, Separator)
	}
	return nil
}

// CheckBuiltins reports whether a server called name would pass for
// built-in tools, whose names are builtins: a server may not be called
// like a built-in tool's family, the word before the tool name's first _
// (memory for memory_read, exec for exec), nor start with one and _
// (memory_graph), so that memory__delete_entities is never read as one of
// the memory tools.
func CheckBuiltins(name string, builtins []string) error {
	family := func(n string) string { f, _, _ := strings.Cut(n, "_"); return f }
	for _, b := range builtins {
		f := family(b)
		if name != f && !strings.HasPrefix(name, f+"_") {
			continue
		}
		same := slices.DeleteFunc(slices.Clone(builtins), func(n string) bool { return family(n) != f })
		which := "tool " + same[0]
		if len(same) > 1 {
			which = "tools " + strings.Join(same, ", ")
		}
		if name == f {
			return fmt.Errorf("%q is taken by the built-in %s: rename the server, e.g. to %s-mcp", name, which, name)
		}
		do := "does"
		if len(same) > 1 {
			do = "do"
		}
		return fmt.Errorf("%q starts with %q, as the built-in %s %s: rename the server, e.g. to %s", name, f+"_", which, do, strings.ReplaceAll(name, "_", "-"))
	}
	return nil
}

// Validate checks c without I/O. Errors read "mcp.servers.<name>.<field>:
// ..." and never quote an env or header value.
func (c Config) Validate() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c.Servers)) {
		p := "mcp.servers." + name
		if err := CheckServerName(name); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		errs = append(errs, c.Servers[name].validate(p)...)
	}
	return errors.Join(errs...)
}

// Validate checks one server's config; errors are prefixed with "mcp.servers.<name>."
// by Config.Validate, and read "<field>: ..." here.
func (c ServerConfig) Validate() error { return errors.Join(c.validate("")...) }

func (c ServerConfig) validate(p string) []error {
	var errs []error
	fail := func(field, format string, args ...any) {
		if p != "" {
			field = p + "." + field
		}
		errs = append(errs, fmt.Errorf(field+": "+format, args...))
	}
	switch {
	case c.Command != "" && c.URL != "":
		fail("command", "set command (a stdio server) or url (a streamable HTTP server), not both")
	case c.Command == "" && c.URL == "":
		fail("command", "required: set command (a stdio server, e.g. npx) or url (a streamable HTTP server)")
	}
	if c.URL != "" {
		for _, f := range []struct {
			name string
			set  bool
		}{{"args", len(c.Args) > 0}, {"env", len(c.Env) > 0}, {"cwd", c.Cwd != ""}} {
			if f.set {
				fail(f.name, "only for a stdio server (command); an HTTP server (url) takes headers")
			}
		}
		if err := checkURL(c.URL); err != nil {
			fail("url", "%v", err)
		}
	}
	if c.Command != "" {
		if len(c.Headers) > 0 {
			fail("headers", "only for an HTTP server (url); a stdio server (command) takes env")
		}
		if strings.ContainsRune(c.Command, 0) || strings.TrimSpace(c.Command) != c.Command {
			fail("command", "%q: want a program name or path, without spaces around it (arguments go in args)", c.Command)
		}
		for i, a := range c.Args {
			if strings.ContainsRune(a, 0) {
				fail(fmt.Sprintf("args[%d]", i), "contains a NUL byte")
			}
		}
		for _, k := range slices.Sorted(maps.Keys(c.Env)) {
			if !envNameRE.MatchString(k) {
				fail("env", "%q is not an environment variable name (want letters, digits and _, not starting with a digit)", k)
			} else if strings.ContainsRune(c.Env[k], 0) {
				fail("env."+k, "the value contains a NUL byte (check the ${...} reference)")
			}
		}
		if strings.ContainsRune(c.Cwd, 0) {
			fail("cwd", "contains a NUL byte")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Headers)) {
		switch {
		case !httpheader.ValidName(k):
			fail("headers", "%q is not a header name", k)
		case reservedHeaders[http.CanonicalHeaderKey(k)]:
			fail("headers", "%q is set by the MCP client itself; remove it", k)
		case !httpheader.ValidValue(c.Headers[k]):
			fail("headers."+k, "the value contains a control character (check the ${...} reference or the file it reads)")
		}
	}
	switch {
	case c.Timeout < 0:
		fail("timeout", "%s is negative (want e.g. 30s; 0 for the default %s)", c.Timeout, DefaultTimeout)
	case c.Timeout > MaxTimeout:
		fail("timeout", "%s is longer than %s", c.Timeout, MaxTimeout)
	}
	if c.MaxOutput != 0 && (c.MaxOutput < MinMaxOutput || c.MaxOutput > MaxMaxOutput) {
		fail("max_output", "%d: want %d to %d bytes (0 for the default %d)", c.MaxOutput, MinMaxOutput, MaxMaxOutput, DefaultMaxOutput)
	}
	seen := map[string]bool{}
	for i, n := range c.IdempotentTools {
		switch {
		case strings.TrimSpace(n) == "":
			fail(fmt.Sprintf("idempotent_tools[%d]", i), "empty; want a tool name as the server lists it")
		case seen[n]:
			fail(fmt.Sprintf("idempotent_tools[%d]", i), "%q is listed twice", n)
		}
		seen[n] = true
	}
	return errs
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedHeaders are set by the SDK's streamable HTTP transport.
var reservedHeaders = map[string]bool{
	"Accept": true, "Content-Type": true, "Mcp-Session-Id": true, "Mcp-Protocol-Version": true, "Last-Event-Id": true,
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want an http(s) URL such as https://mcp.example.com/mcp", secret.URL(s))
	}
	if u.User != nil {
		return fmt.Errorf("%q: put credentials in headers (e.g. Authorization: Bearer ${TOKEN}), not in the URL", secret.URL(s))
	}
	if u.Fragment != "" {
		return fmt.Errorf("%q: want no fragment", secret.URL(s))
	}
	return nil
}

// secrets returns the values c says are secret: env and header values and
// the URL's query values, split by secret.Words (each value, and the token
// of "Bearer <token>", of secret.Min bytes or more).
func (c ServerConfig) secrets() []string {
	var out []string
	for _, v := range c.Env {
		out = append(out, secret.Words(v)...)
	}
	for _, v := range c.Headers {
		out = append(out, secret.Words(v)...)
	}
	if u, err := url.Parse(c.URL); err == nil {
		for _, vs := range u.Query() {
			for _, v := range vs {
				out = append(out, secret.Words(v)...)
			}
		}
	}
	return out
}
