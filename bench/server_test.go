package bench

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildBinary builds cmd/agentwork into dir and returns its path.
func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "agentwork")
	build := exec.Command("go", "build", "-o", bin, "./cmd/agentwork")
	build.Dir = ".."
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, b)
	}
	return bin
}

// server is an agentwork serve process.
type server struct {
	cmd    *exec.Cmd
	exited chan error // receives the process's exit, once
	// stop sends SIGTERM and waits for the exit (a minute, then kills);
	// later calls do nothing. It is also called when the test ends.
	stop func()
}

// startServer runs bin serve with the config and data dir, the extra
// environment, and the output going to stdout and stderr.
func startServer(t *testing.T, bin, cfg, dataDir string, env []string, stdout, stderr io.Writer) *server {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--config", cfg, "--data-dir", dataDir)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, exited: make(chan error, 1)}
	go func() { s.exited <- cmd.Wait() }()
	s.stop = sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-s.exited
		}
	})
	t.Cleanup(s.stop)
	return s
}

// serverFiles writes the config cfg for a server in dir and creates its
// log file (closed when the test ends).
func serverFiles(t *testing.T, dir, cfg string) (cfgPath, logPath string, logs *os.File) {
	t.Helper()
	cfgPath = filepath.Join(dir, "agentwork.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath = filepath.Join(dir, "server.log")
	logs, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logs.Close() })
	return cfgPath, logPath, logs
}
