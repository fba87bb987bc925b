package tools

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// ServerSeparator separates an MCP server's name from its tool's in the
// names the model sees: fs__read_text_file. A built-in tool's name has
// none; a server's name cannot hold one.
const ServerSeparator = "__"

// Scope is which tools a run may use: a list of globs over tool names, in
// path.Match syntax. `*` matches any run of characters (tool names have
// no '/'), `?` one character, `[...]` one of a class: "notify_user" is one
// tool, "fs__*" every tool of the MCP server fs, "*__read_*" the read
// tools of every server, "*" every tool. A name that no glob matches is
// out of scope: the model is not offered it, and a call to it runs
// nothing (fail-closed). An empty Scope allows nothing.
//
// Built-in tools and servers' tools (<server>__<tool>) are two namespaces
// that no glob crosses, except one of only `*`: a glob without "__"
// matches only built-in tools ("memory_*" is the memory tools, never the
// tools of a server called memory), and one with "__" only servers' tools.
type Scope []string

// DefaultScope is the scope of a runtime that sets none: notify_user.
var DefaultScope = Scope{NotifyName}

// Allows reports whether name is in scope.
func (s Scope) Allows(name string) bool {
	return slices.ContainsFunc(s, func(g string) bool { return match(g, name) })
}

// match reports whether the glob g matches name, within its namespace.
func match(g, name string) bool {
	if strings.Trim(g, "*") != "" && !strings.Contains(g, ServerSeparator) && strings.Contains(name, ServerSeparator) {
		return false // a built-in glob, a server's tool
	}
	ok, err := path.Match(g, name)
	return err == nil && ok
}

// Select returns the specs whose names are in scope, in order.
func (s Scope) Select(specs []Spec) []Spec {
	var out []Spec
	for _, sp := range specs {
		if s.Allows(sp.Name) {
			out = append(out, sp)
		}
	}
	return out
}

// globRE is what a glob may hold: the characters of tool names and the
// path.Match operators.
var globRE = regexp.MustCompile(`^[a-zA-Z0-9_\-*?\[\]^!]{1,128}$`)

// Check checks the globs as written at field (e.g. "runner.tools"):
// every one non-empty, of tool-name characters and glob operators, and
// well-formed. Errors read "<field>[i]: ...".
func (s Scope) Check(field string) error {
	var errs []error
	for i, g := range s {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch _, err := path.Match(g, ""); {
		case g == "":
			errs = append(errs, fmt.Errorf("%s: empty; want a tool name such as notify_user or a glob such as fs__*", f))
		case !globRE.MatchString(g):
			errs = append(errs, fmt.Errorf("%s: %q: want a tool name or a glob of a-z, A-Z, 0-9, _ and - with * ? [ ] (e.g. fs__*)", f, g))
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %q is not a well-formed glob (an unclosed [?)", f, g))
		}
	}
	return errors.Join(errs...)
}
