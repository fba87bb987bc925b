//go:build unix

package builtin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/builtin"
)

func execTool(t *testing.T, c builtin.ExecConfig) *tools.Registry {
	t.Helper()
	spec, err := builtin.Exec(c)
	if err != nil {
		t.Fatalf("Exec(%+v) = %v", c, err)
	}
	reg, err := tools.NewRegistry(spec)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func execCall(t *testing.T, reg *tools.Registry, argv ...string) tools.Call {
	t.Helper()
	b, _ := json.Marshal(map[string][]string{"argv": argv})
	return reg.Call(t.Context(), "1", builtin.ExecName, string(b))
}

// exec is off unless configured: an empty tools section has no tools.
func TestExecOffByDefault(t *testing.T) {
	t.Parallel()
	specs, err := builtin.New(builtin.Config{})
	if err != nil || len(specs) != 0 {
		t.Errorf("New(no tools section) = %v, %v; want no tools", specs, err)
	}
	if got := (builtin.Config{}).Enabled(); len(got) != 0 {
		t.Errorf("Enabled() = %v, want none", got)
	}
	specs, err = builtin.New(builtin.Config{Exec: &builtin.ExecConfig{Allow: [][]string{{"df", "-h"}}}})
	if err != nil || len(specs) != 1 || specs[0].Name != builtin.ExecName {
		t.Errorf("New(exec configured) = %v, %v; want exec", specs, err)
	}
}

// An argv that does not start with an allowed prefix, element by
// element, runs nothing.
func TestExecAllowList(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	victim := filepath.Join(dir, "keep.txt")
	if err := os.WriteFile(victim, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := execTool(t, builtin.ExecConfig{Allow: [][]string{{"df", "-h"}, {"pwd"}}, Cwd: dir})
	for _, argv := range [][]string{
		{"rm", "-rf", dir},
		{"df"},
		{"df", "-i"},
		{"df -h"},
		{"/usr/bin/df", "-h"},
		{"sh", "-c", "rm -rf " + dir},
		{},
	} {
		c := execCall(t, reg, argv...)
		want := "is not allowed: an argv must start with one of [\"df\",\"-h\"], [\"pwd\"] (tools.exec.allow); nothing ran"
		if len(argv) == 0 {
			want = "argv is empty"
		}
		if c.Outcome != tools.OutcomeRefused || !strings.Contains(c.Error, want) {
			t.Errorf("exec(%q) = %+v, want refused: %q", argv, c, want)
		}
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("after the refused calls, %s: %v; want it still there", victim, err)
	}
	if c := execCall(t, reg, "df", "-h", dir); c.Outcome != tools.OutcomeOK || !strings.HasPrefix(c.Result, "exit code 0; output:\nFilesystem") {
		t.Errorf("exec(df -h dir) = %+v, want ok", c)
	}
	if c := execCall(t, reg, "pwd"); c.Result != "exit code 0; output:\n"+dir+"\n" {
		t.Errorf("exec(pwd) = %+v, want the working directory %s", c, dir)
	}
}

var pidRE = regexp.MustCompile(`output:\n(\d+)\n`)

// A command past its timeout is killed with the processes it started; a
// command that exits leaves none of its processes running either.
func TestExecKillsTheProcessGroup(t *testing.T) {
	t.Parallel()
	const (
		sleeper = "sleep 30 & echo $!; sleep 30"
		leaver  = "sleep 30 & echo $!"
	)
	reg := execTool(t, builtin.ExecConfig{Allow: [][]string{{"sh", "-c", sleeper}, {"sh", "-c", leaver}}, Timeout: 500 * time.Millisecond})
	for _, tc := range []struct {
		script, outcome, want string
	}{
		{sleeper, tools.OutcomeTimeout, "did not finish within 500ms (tools.exec.timeout), so it was killed with every process it started"},
		{leaver, tools.OutcomeOK, "exit code 0"},
	} {
		start := time.Now()
		c := execCall(t, reg, "sh", "-c", tc.script)
		took := time.Since(start)
		m := pidRE.FindStringSubmatch(c.Result + c.Error)
		if c.Outcome != tc.outcome || !strings.Contains(c.Result+c.Error, tc.want) || m == nil {
			t.Fatalf("exec(sh -c %q) = %+v, want %s: %q, and the pid of its child", tc.script, c, tc.outcome, tc.want)
		}
		if took > 5*time.Second {
			t.Errorf("exec(sh -c %q) took %s, want it back soon after it ended or timed out", tc.script, took)
		}
		pid, _ := strconv.Atoi(m[1])
		if !waitGone(t, pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("exec(sh -c %q): its child %d still runs, want it killed with the group", tc.script, pid)
		}
	}
}

// The output (stdout and stderr together) is capped, the model is told
// how much there was, and the exit code is in the result.
func TestExecOutput(t *testing.T) {
	t.Parallel()
	const key = "api-key-0123456789abcdef"
	reg := execTool(t, builtin.ExecConfig{
		Allow:     [][]string{{"seq"}, {"sh", "-c", "echo out; echo err >&2; exit 3"}, {"sh", "-c", "env"}},
		Env:       map[string]string{"API_KEY": key, "LANG": "C"},
		Path:      "/usr/bin:/bin",
		MaxOutput: 1024,
	})
	total := 0
	for i := 1; i <= 100000; i++ {
		total += len(strconv.Itoa(i)) + 1
	}
	c := execCall(t, reg, "seq", "100000")
	if c.Outcome != tools.OutcomeOK || !strings.HasPrefix(c.Result, "exit code 0; output:\n1\n2\n") ||
		!strings.HasSuffix(c.Result, fmt.Sprintf("\n[output cut: the first 1024 of %d bytes shown (tools.exec.max_output)]", total)) {
		t.Errorf("exec(seq 100000) = %.200q…, want the first 1024 bytes and a note", c.Result)
	}
	c = execCall(t, reg, "sh", "-c", "echo out; echo err >&2; exit 3")
	if c.Outcome != tools.OutcomeError || c.Error != "exit code 3; output:\nout\nerr\n" {
		t.Errorf("exec(exit 3) = %+v, want an error with the exit code and both streams", c)
	}
	c = execCall(t, reg, "sh", "-c", "env")
	if c.Outcome != tools.OutcomeOK || !strings.Contains(c.Result, "\nAPI_KEY=[redacted]\n") || !strings.Contains(c.Result, "\nPATH=/usr/bin:/bin\n") ||
		!strings.Contains(c.Result, "\nLANG=C\n") || strings.Contains(c.Result, "HOME=") || strings.Contains(c.Result, key) {
		t.Errorf("exec(env) = %q, want PATH, LANG and API_KEY (redacted) alone", c.Result)
	}
	if c := execCall(t, reg, "seq", "1", "\x00"); c.Outcome != tools.OutcomeRefused {
		t.Errorf("exec(a NUL byte) = %+v, want refused", c)
	}
	noSuch := execTool(t, builtin.ExecConfig{Allow: [][]string{{"no-such-program-x"}}})
	if c := execCall(t, noSuch, "no-such-program-x"); c.Outcome != tools.OutcomeError || !strings.Contains(c.Error, "no such program in PATH") {
		t.Errorf("exec(a program not in PATH) = %+v, want an error", c)
	}
}

func TestExecConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		c    builtin.ExecConfig
		want string
	}{
		{"no allow", builtin.ExecConfig{}, "allow: required"},
		{"empty", builtin.ExecConfig{Allow: [][]string{{}}}, "allow[0]: empty"},
		{"one string", builtin.ExecConfig{Allow: [][]string{{"systemctl status"}}}, `allow[0]: "systemctl status": want the program alone`},
		{"shell", builtin.ExecConfig{Allow: [][]string{{"bash"}}}, `allow[0]: ["bash"]: bash is a shell: it runs any command it is given`},
		{"shell -c", builtin.ExecConfig{Allow: [][]string{{"/bin/sh", "-c"}}}, `allow[0]: ["/bin/sh","-c"]: sh is a shell`},
		{"sudo", builtin.ExecConfig{Allow: [][]string{{"sudo"}}}, `["sudo"]: sudo starts the program named by its arguments`},
		{"twice", builtin.ExecConfig{Allow: [][]string{{"df"}, {"df"}}}, `allow[1]: ["df"] is allow[0] too`},
		{"env name", builtin.ExecConfig{Allow: [][]string{{"df"}}, Env: map[string]string{"1X": "y"}}, `env: "1X" is not an environment variable name`},
		{"path in env", builtin.ExecConfig{Allow: [][]string{{"df"}}, Env: map[string]string{"PATH": "/x"}}, "env: PATH is set by path"},
		{"timeout", builtin.ExecConfig{Allow: [][]string{{"df"}}, Timeout: 2 * time.Hour}, "timeout: 2h0m0s is longer than 1h0m0s"},
		{"max_output", builtin.ExecConfig{Allow: [][]string{{"df"}}, MaxOutput: 1 << 30}, "max_output: 1073741824: want 1024 to 1048576"},
	} {
		if err := tc.c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := (builtin.ExecConfig{Allow: [][]string{{"df", "-h"}, {"sh", "-c", "df -h | tail -1"}, {"sudo", "systemctl", "status"}}}).Validate(); err != nil {
		t.Errorf("Validate(good) = %v", err)
	}
}

// A command outside the allow-list is refused, and nothing runs.
func ExampleExec() {
	spec, err := builtin.Exec(builtin.ExecConfig{Allow: [][]string{{"df", "-h"}, {"systemctl", "status"}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	reg, _ := tools.NewRegistry(spec)
	c := reg.Call(context.Background(), "call_1", builtin.ExecName, `{"argv":["rm","-rf","/"]}`)
	fmt.Println(c.Outcome)
	fmt.Println(c.Error)
	// Output:
	// refused
	// ["rm","-rf","/"] is not allowed: an argv must start with one of ["df","-h"], ["systemctl","status"] (tools.exec.allow); nothing ran
}

// An allow-list entry whose program starts a program chosen by later
// arguments, or runs code given as one, lets the model run anything: a
// config error that names the entry and says why, wherever the program
// is (a directory, a version in its name, behind a wrapper).
func TestExecConfigRefusesRunners(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		argv []string
		want string
	}{
		// The shapes of the issue.
		{[]string{"env", "-i"}, `allow[0]: ["env","-i"]: env starts the program named by its arguments`},
		{[]string{"sudo", "-n"}, `["sudo","-n"]: sudo starts the program named by its arguments`},
		{[]string{"timeout", "5"}, `["timeout","5"]: timeout starts the program named by its arguments`},
		{[]string{"xargs", "-0"}, `["xargs","-0"]: xargs starts the program named by its arguments`},
		{[]string{"bash", "-lc"}, `["bash","-lc"]: bash is a shell`},
		{[]string{"sh", "-e"}, `["sh","-e"]: sh is a shell`},
		{[]string{"python3", "-c"}, `["python3","-c"]: python3 runs code given as an argument`},
		{[]string{"perl", "-e"}, `["perl","-e"]: perl runs code given as an argument`},
		{[]string{"awk"}, `["awk"]: awk runs code given as an argument`},
		{[]string{"find", ".", "-exec"}, `["find",".","-exec"]: find runs commands`},
		// Beside them.
		{[]string{"find", "/var/log", "-name", "*.log"}, "find runs commands"},
		{[]string{"/usr/bin/env"}, `["/usr/bin/env"]: env starts`},
		{[]string{"/usr/bin/python3.12", "-c"}, "python3.12 runs code"},
		{[]string{"perl5.36", "-e"}, "perl5.36 runs code"},
		{[]string{"busybox", "sh"}, "busybox starts the program named by its arguments"},
		{[]string{"nice", "-n", "5"}, "nice starts"},
		{[]string{"setsid", "-f"}, "setsid starts"},
		{[]string{"bash", "-x"}, "bash is a shell"},
		{[]string{"zsh"}, "zsh is a shell"},
		{[]string{"sh", "-c"}, "sh is a shell"},
		{[]string{"node", "-e"}, "node runs code"},
		{[]string{"ruby", "-e"}, "ruby runs code"},
		{[]string{"php", "-r"}, "php runs code"},
		{[]string{"gawk", "{print $1}"}, "gawk runs code"},
		{[]string{"sed", "-n", "p"}, "sed runs code"},
		{[]string{"Rscript", "-e"}, "Rscript runs code"},
		{[]string{"deno", "eval"}, "deno runs code"},
		{[]string{"watch", "df"}, "watch starts the program"},
		{[]string{"ssh", "host"}, "ssh starts the program"},
		{[]string{"script", "-q"}, "script starts the program"},
		{[]string{"stdbuf", "-oL"}, "stdbuf starts the program"},
		{[]string{"ionice"}, "ionice starts"},
		{[]string{"chrt", "1"}, "chrt starts"},
		{[]string{"taskset", "0x1"}, "taskset starts"},
		{[]string{"flock", "/tmp/l"}, "flock starts"},
		{[]string{"unshare"}, "unshare starts"},
		{[]string{"nsenter", "-t", "1"}, "nsenter starts"},
		{[]string{"chroot", "/"}, "chroot starts"},
		{[]string{"systemd-run"}, "systemd-run starts"},
		{[]string{"strace"}, "strace starts"},
		{[]string{"gdb"}, "gdb starts"},
		{[]string{"parallel"}, "parallel starts"},
		{[]string{"su", "root"}, "su starts"},
		{[]string{"runuser", "-u", "x"}, "runuser starts"},
		{[]string{"time"}, "time starts"},
		// A wrapper that names its program: that program is checked.
		{[]string{"sudo", "bash"}, `["sudo","bash"]: bash is a shell`},
		{[]string{"env", "A=1", "python3", "-c"}, `["env","A=1","python3","-c"]: python3 runs code`},
		{[]string{"timeout", "5", "/usr/bin/env", "-i"}, "env starts the program"},
	} {
		err := (builtin.ExecConfig{Allow: [][]string{tc.argv}}).Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(allow %q) = %v, want %q", tc.argv, err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), "allow the program") {
			t.Errorf("Validate(allow %q) = %v, want it to say what to allow instead", tc.argv, err)
		}
	}
	// What the model may only extend with arguments of a program the
	// entry names is fine.
	for _, argv := range [][]string{
		{"df", "-h"}, {"sh", "-c", "df -h | tail -1"}, {"sudo", "systemctl", "status"},
		{"timeout", "5", "df", "-h"}, {"env", "LANG=C", "df"}, {"nice", "du", "-sh"},
		{"python3", "/opt/report.py"}, {"/usr/bin/perl", "/opt/x.pl", "--quiet"},
	} {
		if err := (builtin.ExecConfig{Allow: [][]string{argv}}).Validate(); err != nil {
			t.Errorf("Validate(allow %q) = %v, want ok", argv, err)
		}
	}
}

// partOf returns the first run of secret.Min bytes of key that s holds,
// or "".
func partOf(s, key string) string {
	for i := 0; i+secret.Min <= len(key); i++ {
		if w := key[i : i+secret.Min]; strings.Contains(s, w) {
			return w
		}
	}
	return ""
}

// A secret across max_output, the tool's own (env) or the config's (the
// ones the tool loop hands its tools), at every offset: no part of it of
// secret.Min bytes is left at the cut.
func TestExecCutLeavesNoPartOfASecret(t *testing.T) {
	t.Parallel()
	const own, config = "own-key-0123456789abcdef", "cfg-key-fedcba9876543210"
	dir := t.TempDir()
	reg := execTool(t, builtin.ExecConfig{
		Allow: [][]string{{"cat"}}, Env: map[string]string{"API_KEY": own},
		Path: "/usr/bin:/bin", Cwd: dir, MaxOutput: 1024,
	})
	ctx := secret.NewContext(t.Context(), config)
	for _, key := range []string{own, config} {
		for off := 1024 - len(key); off <= 1024; off++ {
			name := fmt.Sprintf("%s-%d", key[:3], off)
			text := strings.Repeat("x", off) + key + strings.Repeat("y", 100)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(map[string][]string{"argv": {"cat", name}})
			c := reg.Call(ctx, "1", builtin.ExecName, string(b))
			if c.Outcome != tools.OutcomeOK || !strings.Contains(c.Result, "[output cut: ") {
				t.Fatalf("exec(cat %s) = %+v, want ok and cut", name, c)
			}
			if w := partOf(c.Result, key); w != "" {
				t.Errorf("exec(cat, %s at %d) = %q, keeps %q of it", key[:3], off, c.Result[off-10:], w)
			}
		}
	}
}

// An env value of secret.Min bytes is a secret: cut out of the output.
func TestExecCutsShortSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pw"), []byte("the password is hunter2, and Bearer short-1"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := execTool(t, builtin.ExecConfig{
		Allow: [][]string{{"cat"}}, Env: map[string]string{"PW": "hunter2", "AUTH": "Bearer short-1"}, Path: "/usr/bin:/bin", Cwd: dir,
	})
	c := execCall(t, reg, "cat", "pw")
	if want := "exit code 0; output:\nthe password is [redacted], and [redacted]"; c.Result != want {
		t.Errorf("exec(cat pw) = %q, want %q", c.Result, want)
	}
}
