package builtin

import (
	"errors"
	"fmt"

	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/tools"
)

// Names of the built-in tools.
const (
	// FetchName is the name of the http_fetch tool.
	FetchName = "http_fetch"
	// ExecName is the name of the exec tool.
	ExecName = "exec"
)

// Names are the names of every built-in tool but notify_user, which
// package tools provides and every runtime has.
var Names = []string{FetchName, ExecName}

// Config is the tools section of agentwork.yaml: the built-in tools, each
// off unless its key is set.
//
//	tools:
//	  http_fetch:
//	    allow:
//	      - prefix: https://api.github.com/repos/acme/
//	        headers:
//	          Authorization: Bearer ${GITHUB_TOKEN}
//	  exec:
//	    allow:
//	      - [df, -h]
//	      - [systemctl, status]
//
// A tool that is on is still offered only to the runs whose scope names
// it (runner.tools, heartbeat.tools, ...).
type Config struct {
	// HTTPFetch turns http_fetch on: GET, HEAD and POST to the URL
	// prefixes it lists. Default: off.
	HTTPFetch *FetchConfig `yaml:"http_fetch,omitempty" json:"http_fetch,omitempty"`
	// Exec turns exec on: the commands whose argv starts with one of the
	// prefixes it lists, without a shell. Default: off.
	Exec *ExecConfig `yaml:"exec,omitempty" json:"exec,omitempty"`
}

// Enabled returns the names of the tools c turns on.
func (c Config) Enabled() []string {
	var out []string
	if c.HTTPFetch != nil {
		out = append(out, FetchName)
	}
	if c.Exec != nil {
		out = append(out, ExecName)
	}
	return out
}

// Validate checks c without I/O. Errors read "tools.<tool>.<field>: ...",
// and never quote a header or env value.
func (c Config) Validate() error {
	var errs []error
	if c.HTTPFetch != nil {
		errs = append(errs, c.HTTPFetch.validate("tools."+FetchName)...)
	}
	if c.Exec != nil {
		errs = append(errs, c.Exec.validate("tools."+ExecName)...)
	}
	return errors.Join(errs...)
}

// New returns the tools c turns on. It validates c and does no I/O.
func New(c Config) ([]tools.Spec, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var specs []tools.Spec
	if c.HTTPFetch != nil {
		s, err := Fetch(*c.HTTPFetch)
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	if c.Exec != nil {
		s, err := Exec(*c.Exec)
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	return specs, nil
}

// secretsOf returns the parts of the values of m to cut out of what the
// tools return (secret.Words: each value, and the token of "Bearer
// <token>", of secret.Min bytes or more).
func secretsOf(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, secret.Words(v)...)
	}
	return out
}

// field joins a field path to its error.
func field(p, f string) string {
	if p == "" {
		return f
	}
	return p + "." + f
}

// failer collects the errors of one section, each prefixed with its field.
type failer struct {
	p    string
	errs []error
}

func (f *failer) fail(name, format string, args ...any) {
	f.errs = append(f.errs, fmt.Errorf(field(f.p, name)+": "+format, args...))
}
