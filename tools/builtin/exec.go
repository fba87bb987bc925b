package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/tools"
)

// Defaults and limits of ExecConfig.
const (
	// DefaultExecTimeout bounds one exec call.
	DefaultExecTimeout = 30 * time.Second
	// MaxExecTimeout bounds timeout.
	MaxExecTimeout = time.Hour
	// DefaultMaxOutput is how many bytes of a command's output the model
	// gets.
	DefaultMaxOutput = 64 << 10
	// MinMaxOutput and MaxMaxOutput bound max_output.
	MinMaxOutput = 1 << 10
	MaxMaxOutput = 1 << 20
	// DefaultPath is the PATH of commands when neither path nor
	// agentwork's environment sets one.
	DefaultPath = "/usr/local/bin:/usr/bin:/bin"
)

// ExecConfig is tools.exec: which commands exec may run, in what
// environment, and the limits of a call.
//
//	exec:
//	  allow:
//	    - [df, -h]
//	    - [systemctl, status]
//	  env:
//	    LANG: C.UTF-8
//	  cwd: /srv
//	  timeout: 30s
//	  max_output: 65536
type ExecConfig struct {
	// Allow are argv prefixes: a call's argv must start with one of them,
	// element by element, exactly (["df", "-h"] allows df -h and df -h
	// /srv, not df or df -i). What follows the prefix is the model's, so
	// list a prefix only when every argument after it is safe. A prefix
	// whose program starts a program its arguments name, or runs code
	// given as one (a shell, sudo, env, python3 -c, awk, find, ...: see
	// runsAnything), is refused. Required: at least one.
	Allow [][]string `yaml:"allow" json:"allow"`
	// Env are the environment variables of the commands, besides PATH;
	// they get nothing else of agentwork's environment. Values are
	// secret: they are cut out of what the model gets.
	Env map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	// Path is the commands' PATH, where a program named without a slash
	// is looked for. Default: agentwork's PATH (else
	// /usr/local/bin:/usr/bin:/bin).
	Path string `yaml:"path,omitempty" json:"path,omitempty"`
	// Cwd is the commands' working directory; a relative one is relative
	// to the config file's directory. Default: agentwork's.
	Cwd string `yaml:"cwd,omitempty" json:"cwd,omitempty"`
	// Timeout bounds one call: a command still running then is killed,
	// with every process it started in its process group. Default 30s, at
	// most 1h.
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty" jsonschema:"default=30s"`
	// MaxOutput is how many bytes of a command's output (stdout and
	// stderr together) the model gets; the rest is read and dropped, and
	// the model is told. Default 65536 (64 KiB), 1024 to 1048576.
	MaxOutput int `yaml:"max_output,omitempty" json:"max_output,omitempty" jsonschema:"default=65536"`
}

// withDefaults returns c with zero limits set to their defaults.
func (c ExecConfig) withDefaults() ExecConfig {
	if c.Timeout <= 0 {
		c.Timeout = DefaultExecTimeout
	}
	if c.MaxOutput <= 0 {
		c.MaxOutput = DefaultMaxOutput
	}
	if c.Path == "" {
		c.Path = os.Getenv("PATH")
	}
	if c.Path == "" {
		c.Path = DefaultPath
	}
	return c
}

// Validate checks c without I/O; errors read "<field>: ...".
func (c ExecConfig) Validate() error { return errors.Join(c.validate("")...) }

// Programs an allow-list entry may not end at, by family, as base names
// without a version (progName). What follows an entry is the model's
// (prefix matching), so each of these lets the model run anything.
var (
	// shells run any command they are given. A prefix that holds the
	// whole script, [sh, -c, "df -h | tail -1"], lets the model add only
	// arguments ($0, $1, ...): that is allowed (scriptShells).
	shells = []string{"sh", "bash", "dash", "zsh", "ksh", "mksh", "pdksh", "ash", "yash", "fish", "csh", "tcsh",
		"rc", "es", "elvish", "nu", "xonsh", "pwsh", "powershell", "cmd", "exec", "eval", "command", "builtin"}
	// scriptShells take a script as [shell, -c, SCRIPT], after which every
	// argument is a positional parameter.
	scriptShells = []string{"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash"}
	// wrappers start the program their arguments name. An entry that
	// names it, right after the wrapper's fixed operands with no option
	// before it ([sudo, systemctl, status], [timeout, 5, df]), is checked
	// as that program's entry; with an option (exec cannot tell where
	// options end) or without a program, it is refused. The value is how
	// many operands precede the program (env: its NAME=value too).
	wrappers = map[string]int{"sudo": 0, "doas": 0, "env": 0, "nice": 0, "nohup": 0, "setsid": 0, "time": 0,
		"timeout": 1, "ionice": 0, "chrt": 1, "taskset": 1, "flock": 1, "chroot": 1, "unshare": 0, "stdbuf": 0, "xargs": 0}
	// runners start a program, or run a command, their arguments name,
	// however the entry goes on: a command line through a shell (watch,
	// ssh, su, script, parallel), options anywhere or commands of their
	// own (the rest).
	runners = []string{"busybox", "toybox", "su", "runuser", "watch", "script", "ssh", "systemd-run", "nsenter",
		"strace", "ltrace", "gdb", "lldb", "valgrind", "perf", "parallel", "prlimit", "numactl", "cpulimit",
		"firejail", "bwrap", "proot", "fakeroot", "fakechroot", "catchsegv", "npx", "pnpx", "bunx", "uvx", "pipx", "make", "gmake"}
	// interpreters run code given as an argument (-c, -e, -r, ...). An
	// entry that names a script file right after the interpreter
	// ([python3, /opt/report.py]) lets the model add only the script's
	// arguments: that is allowed.
	interpreters = []string{"python", "pythonw", "pypy", "perl", "ruby", "irb", "node", "nodejs", "php", "lua", "luajit",
		"tclsh", "wish", "expect", "rscript", "osascript", "julia", "guile", "racket", "sbcl", "clisp", "ocaml",
		"ghci", "runghc", "escript", "elixir", "groovy", "jshell"}
	// evaluators run code (a program, a script, a command) given as an
	// argument or an option the model may add anywhere after the entry:
	// no entry of theirs is safe.
	evaluators = []string{"awk", "gawk", "mawk", "nawk", "sed", "gsed", "deno", "bun", "r",
		"sqlite3", "vi", "vim", "nvim", "ex", "emacs", "jrunscript"}
)

// progName is the name a program is known by: the base name of p, lower
// case, without .exe and a trailing version (python3.12, perl5.36,
// gawk-5.1: python, perl, gawk).
func progName(p string) string {
	n := strings.ToLower(filepath.Base(p))
	n = strings.TrimSuffix(n, ".exe")
	if t := strings.TrimRight(n, "0123456789.-"); t != "" {
		n = t
	}
	return n
}

// runsAnything returns why the allow-list entry argv lets the model run a
// program or code of its choosing, with what to allow instead; "" when it
// does not.
func runsAnything(argv []string) string {
	base, name := filepath.Base(argv[0]), progName(argv[0])
	const instead = "allow the program itself instead, with its first arguments ([df, -h], [systemctl, status])"
	switch {
	case slices.Contains(shells, name):
		if slices.Contains(scriptShells, name) && len(argv) >= 3 && argv[1] == "-c" && strings.TrimSpace(argv[2]) != "" {
			return ""
		}
		return base + " is a shell: it runs any command it is given, and exec runs no shell; allow the programs themselves ([df, -h]), or the whole script as [sh, -c, \"df -h | tail -1\"]"
	case slices.Contains(evaluators, name):
		return base + " runs code given as an argument, and the model may add arguments after the entry; " + instead
	case name == "find":
		return "find runs commands (-exec, -execdir, -ok, -okdir) and deletes files (-delete), and the model may add those after the entry; " + instead + ", e.g. [ls, -l] or [du, -sh]"
	case slices.Contains(interpreters, name):
		if len(argv) >= 2 && argv[1] != "" && !strings.HasPrefix(argv[1], "-") {
			return "" // a script: what follows is its arguments
		}
		return base + " runs code given as an argument (-c, -e, ...); allow the program you need instead, or a script of yours as [" + base + ", /path/to/script]"
	case slices.Contains(runners, name):
		return base + " starts the program named by its arguments, which the model chooses; " + instead
	}
	skip, ok := wrappers[name]
	if !ok {
		return ""
	}
	i := 1
	for ; i < len(argv) && (i <= skip || name == "env" && strings.Contains(argv[i], "=")); i++ {
		if strings.HasPrefix(argv[i], "-") {
			break
		}
	}
	if i >= len(argv) || strings.HasPrefix(argv[i], "-") || argv[i] == "" {
		return base + " starts the program named by its arguments, which the model chooses; " + instead +
			", or name it in the entry with no option before it ([" + base + ", df, -h])"
	}
	return runsAnything(argv[i:])
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (c ExecConfig) validate(p string) []error {
	f := &failer{p: p}
	if len(c.Allow) == 0 {
		f.fail("allow", "required: list the commands exec may run, each as an argv prefix ([df, -h])")
	}
	seen := map[string]int{}
	for i, argv := range c.Allow {
		ap := fmt.Sprintf("allow[%d]", i)
		if len(argv) == 0 || argv[0] == "" {
			f.fail(ap, "empty; want a program and maybe its first arguments, e.g. [df, -h]")
			continue
		}
		if strings.TrimSpace(argv[0]) != argv[0] || (len(argv) == 1 && strings.ContainsRune(argv[0], ' ')) {
			f.fail(ap, "%q: want the program alone in the first element; its arguments are elements of their own ([systemctl, status], not [\"systemctl status\"])", argv[0])
		}
		for j, a := range argv {
			if strings.ContainsRune(a, 0) {
				f.fail(fmt.Sprintf("%s[%d]", ap, j), "contains a NUL byte")
			}
		}
		if why := runsAnything(argv); why != "" {
			f.fail(ap, "%s: %s", quoteArgv(argv), why)
		}
		key := quoteArgv(argv)
		if j, dup := seen[key]; dup {
			f.fail(ap, "%s is allow[%d] too; list each prefix once", key, j)
		}
		seen[key] = i
	}
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		switch {
		case !envNameRE.MatchString(k):
			f.fail("env", "%q is not an environment variable name (want letters, digits and _, not starting with a digit)", k)
		case k == "PATH":
			f.fail("env", "PATH is set by path; move it there")
		case strings.ContainsRune(c.Env[k], 0):
			f.fail("env."+k, "the value contains a NUL byte (check the ${...} reference)")
		}
	}
	if strings.ContainsRune(c.Path, 0) {
		f.fail("path", "contains a NUL byte")
	}
	if strings.ContainsRune(c.Cwd, 0) {
		f.fail("cwd", "contains a NUL byte")
	}
	switch {
	case c.Timeout < 0:
		f.fail("timeout", "%s is negative (want e.g. 30s; 0 for the default %s)", c.Timeout, DefaultExecTimeout)
	case c.Timeout > MaxExecTimeout:
		f.fail("timeout", "%s is longer than %s", c.Timeout, MaxExecTimeout)
	}
	if c.MaxOutput != 0 && (c.MaxOutput < MinMaxOutput || c.MaxOutput > MaxMaxOutput) {
		f.fail("max_output", "%d: want %d to %d bytes (0 for the default %d)", c.MaxOutput, MinMaxOutput, MaxMaxOutput, DefaultMaxOutput)
	}
	return f.errs
}

// quoteArgv writes argv as the model and the config write it: a JSON
// array.
func quoteArgv(argv []string) string {
	b, _ := json.Marshal(argv)
	return string(b)
}

// ExecArgs are the arguments of exec.
type ExecArgs struct {
	Argv []string `json:"argv" jsonschema:"minItems=1,description=The program and its arguments, one per element; no shell runs them (no pipes, globs, variables or quoting). It must start with one of the prefixes this tool lists."`
}

// executor is the exec tool.
type executor struct {
	cfg     ExecConfig
	env     []string
	secrets []string
}

// Exec returns the exec tool of c. It validates c and does no I/O.
func Exec(c ExecConfig) (tools.Spec, error) {
	if err := errors.Join(c.validate("tools." + ExecName)...); err != nil {
		return tools.Spec{}, err
	}
	if !execSupported {
		return tools.Spec{}, errors.New("tools.exec: not available on this system (it needs process groups)")
	}
	c = c.withDefaults()
	e := &executor{cfg: c, env: []string{"PATH=" + c.Path}, secrets: secretsOf(c.Env)}
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		e.env = append(e.env, k+"="+c.Env[k])
	}
	var b strings.Builder
	b.WriteString("Run a command on the host, without a shell, and get its exit code and output (stdout and stderr together). ")
	b.WriteString("Its argv must start with one of these prefixes, element by element; anything else is refused:")
	for _, argv := range c.Allow {
		fmt.Fprintf(&b, "\n- %s", quoteArgv(argv))
	}
	fmt.Fprintf(&b, "\nIt is killed after %s; output beyond %d bytes is cut.", c.Timeout, c.MaxOutput)
	return tools.Func(ExecName, b.String(), e.call), nil
}

// allowed reports whether argv starts with one of the allowed prefixes.
func (e *executor) allowed(argv []string) bool {
	for _, pre := range e.cfg.Allow {
		if len(argv) >= len(pre) && slices.Equal(argv[:len(pre)], pre) {
			return true
		}
	}
	return false
}

func (e *executor) call(ctx context.Context, a ExecArgs) (string, error) {
	// Its own and the config's (the tool loop's): both are cut out before
	// the output is cut to max_output.
	secrets := append(slices.Clip(e.secrets), secret.FromContext(ctx)...)
	out, err := e.exec(ctx, a.Argv, secrets)
	if err != nil {
		return "", redacted{err, secrets}
	}
	return secret.Redact(out, secrets), nil
}

func (e *executor) exec(ctx context.Context, argv, secrets []string) (string, error) {
	if len(argv) == 0 || argv[0] == "" {
		return "", refusal(errors.New("argv is empty: want the program and its arguments, e.g. [\"df\", \"-h\"]; nothing ran"))
	}
	if !e.allowed(argv) {
		var have []string
		for _, pre := range e.cfg.Allow {
			have = append(have, quoteArgv(pre))
		}
		return "", refusal(fmt.Errorf("%s is not allowed: an argv must start with one of %s (tools.exec.allow); nothing ran",
			quoteArgv(argv), strings.Join(have, ", ")))
	}
	for _, a := range argv {
		if strings.ContainsRune(a, 0) {
			return "", refusal(errors.New("an argument contains a NUL byte; nothing ran"))
		}
	}
	prog, err := e.lookPath(argv[0])
	if err != nil {
		return "", err
	}
	// Read past the cap by the longest form of a secret, so one across
	// the cap is seen whole and cut out before the output is cut.
	res, err := run(ctx, prog, argv, e.env, e.cfg.Cwd, e.cfg.Timeout, e.cfg.MaxOutput+secret.Margin(secrets))
	if err != nil {
		return "", fmt.Errorf("%s: %w", argv[0], err)
	}
	text := res.text(e.cfg.MaxOutput, secrets)
	switch {
	case res.timedOut:
		return "", timeout(fmt.Errorf("%s did not finish within %s (tools.exec.timeout), so it was killed with every process it started; %s",
			quoteArgv(argv), e.cfg.Timeout, text))
	case res.signal != "":
		return "", fmt.Errorf("killed by a signal (%s); %s", res.signal, text)
	case res.code != 0:
		return "", fmt.Errorf("exit code %d; %s", res.code, text)
	}
	return "exit code 0; " + text, nil
}

// lookPath finds the program name in the configured PATH, as a shell
// would, but skipping relative directories; a name with a slash is taken
// as it is (relative to cwd).
func (e *executor) lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(e.cfg.Path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: no such program in PATH %s (tools.exec.path); nothing ran", name, e.cfg.Path)
}

// result is how a command ended and what it wrote.
type result struct {
	out      []byte // the first bytes, max_output and a margin
	total    int64  // bytes written in all
	code     int
	signal   string
	timedOut bool
}

// text is the output as the model gets it: secrets cut out, then cut to
// max bytes (secret.Cut: no part of a secret is left at the cut).
func (r result) text(max int, secrets []string) string {
	if r.total == 0 {
		return "no output"
	}
	more := r.total > int64(len(r.out))
	out, whole := secret.Cut(string(r.out), max, more, secrets)
	s := "output:\n" + strings.ToValidUTF8(out, "\uFFFD")
	if more || len(out) < whole {
		s += fmt.Sprintf("\n[output cut: the first %d of %d bytes shown (tools.exec.max_output)]", len(out), r.total)
	}
	return s
}

// capped keeps the first max bytes written to it and counts them all.
type capped struct {
	buf   []byte
	max   int
	total int64
}

func (c *capped) Write(p []byte) (int, error) {
	c.total += int64(len(p))
	if room := c.max - len(c.buf); room > 0 {
		c.buf = append(c.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}
