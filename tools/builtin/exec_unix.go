//go:build unix

package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// execSupported: exec needs process groups, to kill what a command
// started.
const execSupported = true

// drainAfterExit bounds how long the output is read once the command and
// its process group are gone: a process that left the group (setsid) and
// holds the output open is not waited for.
const drainAfterExit = time.Second

// run runs prog with argv in a process group of its own, with env and
// dir, stdin from /dev/null and stdout and stderr into one pipe, of which
// it keeps the first max bytes. After timeout, or when ctx ends, it kills
// the group; when the command exits it kills what is left of the group
// too, so no process a call started outlives it.
func run(ctx context.Context, prog string, argv, env []string, dir string, timeout time.Duration, max int) (result, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return result{}, err
	}
	cmd := &exec.Cmd{
		Path: prog, Args: argv, Env: env, Dir: dir,
		// An *os.File is handed to the child as it is: Wait returns when
		// the command exits, whoever else holds the pipe.
		Stdout: w, Stderr: w,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		return result{}, fmt.Errorf("did not start: %w; nothing ran", err)
	}
	// The group's id is the command's pid, which the kernel does not hand
	// out again while a process of the group lives.
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out := &capped{max: max}
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.Copy(out, r)
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var res result
	var werr error
	select {
	case werr = <-waited:
	case <-timer.C:
		res.timedOut = true
		kill()
		werr = <-waited
	case <-ctx.Done():
		kill()
		werr = <-waited
	}
	// What the command left behind in its group. Its leader is reaped
	// now, so the group's id is free for the kernel to give out again once
	// the group is empty: signal it only while it has members (kill with
	// signal 0 fails with ESRCH for an empty group), which leaves a window
	// of microseconds against a pid counter that must wrap round to reuse it.
	if syscall.Kill(-cmd.Process.Pid, 0) == nil {
		kill()
	}
	select {
	case <-read:
	case <-time.After(drainAfterExit):
	}
	_ = r.Close()
	<-read
	res.out, res.total = out.buf, out.total

	if err := ctx.Err(); err != nil && !res.timedOut {
		return res, fmt.Errorf("cancelled, so it was killed: %w", err)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.signal = ws.Signal().String()
		return res, nil
	}
	if _, ok := errors.AsType[*exec.ExitError](werr); werr != nil && !ok {
		return res, werr
	}
	res.code = cmd.ProcessState.ExitCode()
	return res, nil
}
