//go:build unix

package mcp

import (
	"os/exec"
	"syscall"
)

const (
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
)

// ownGroup puts the command in a process group of its own.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends sig to the command's process group. The group's id is
// the started process's pid, which the kernel does not hand out again
// while any process of the group lives.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process != nil && cmd.Process.Pid > 0 {
		_ = syscall.Kill(-cmd.Process.Pid, sig)
	}
}
