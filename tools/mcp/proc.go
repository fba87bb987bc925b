package mcp

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// inheritedEnv are the variables a stdio server gets from agentwork's own
// environment; Env adds to them. The same few the MCP TypeScript SDK
// passes on, and the locale and temporary directory: nothing else, so an
// API key of agentwork does not reach a server it was not meant for.
var inheritedEnv = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "TMPDIR", "LANG", "LC_ALL", "TZ"}

// environ returns the environment of a stdio server: the inherited
// variables of base that are set, then extra (which wins), sorted.
func environ(base []string, extra map[string]string) []string {
	vars := map[string]string{}
	for _, kv := range base {
		k, v, ok := strings.Cut(kv, "=")
		if ok && slices.Contains(inheritedEnv, k) {
			vars[k] = v
		}
	}
	for k, v := range extra {
		vars[k] = v
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// stopGrace is how long a stdio server has to exit after its stdin is
// closed, and again after SIGTERM, before it is killed.
const stopGrace = 5 * time.Second

// proc is a stdio server's process, in a process group of its own, so
// that a Ctrl-C at agentwork's terminal does not kill it behind the
// Manager's back and stopping it stops its children too.
type proc struct {
	cmd    *exec.Cmd
	stdin  *os.File // our end: the server reads it
	stdout *os.File // our end: the server writes it
	stderr *tail
	done   chan struct{} // closed once the process has exited and been reaped
	err    error         // cmd.Wait's, set before done is closed
}

// startProc starts c's command. The pipes are made here rather than by
// exec.Cmd, so that reaping the process does not close stdout under the
// reader before it has read what the server wrote last.
func startProc(c ServerConfig) (*proc, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, err
	}
	p := &proc{stdin: inW, stdout: outR, stderr: &tail{max: 4 << 10}, done: make(chan struct{})}
	p.cmd = exec.Command(c.Command, c.Args...)
	p.cmd.Env = environ(os.Environ(), c.Env)
	p.cmd.Dir = c.Cwd
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = inR, outW, p.stderr
	// A child that keeps stderr open must not keep Wait from returning.
	p.cmd.WaitDelay = time.Second
	ownGroup(p.cmd)
	err = p.cmd.Start()
	closeAll(inR, outW) // the child's ends: it has them now
	if err != nil {
		closeAll(inW, outR)
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited describes how the process ended: "exit status 3", "signal: killed".
// Call it after done is closed.
func (p *proc) exited() string {
	if p.cmd.ProcessState != nil {
		return p.cmd.ProcessState.String()
	}
	if p.err != nil {
		return p.err.Error()
	}
	return "exited"
}

// stop ends the process the way the MCP spec asks: close its stdin, wait,
// SIGTERM, wait, SIGKILL; then it kills what is left of its process group.
// It returns once the process is reaped.
func (p *proc) stop() {
	_ = p.stdin.Close()
	if !waitFor(p.done, stopGrace) {
		signalGroup(p.cmd, sigTerm)
		if !waitFor(p.done, stopGrace) {
			signalGroup(p.cmd, sigKill)
			<-p.done
		}
	}
	signalGroup(p.cmd, sigKill) // children it left behind
	_ = p.stdout.Close()
}

func waitFor(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// tail keeps the last max bytes written to it: a server's stderr, quoted
// (redacted) when it fails to start or exits.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

// last returns up to n bytes of the last lines written, on one line:
// control characters and invalid UTF-8 replaced, white space folded.
func (t *tail) last(n int) string {
	t.mu.Lock()
	s := string(t.buf)
	t.mu.Unlock()
	s = strings.ToValidUTF8(s, "?")
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	if len(s) > n {
		s = s[len(s)-n:]
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
		s = "..." + s
	}
	return s
}
