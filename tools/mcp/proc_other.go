//go:build !unix

package mcp

import (
	"os"
	"os/exec"
)

var (
	sigTerm os.Signal = os.Kill
	sigKill os.Signal = os.Kill
)

// ownGroup does nothing where process groups are not available.
func ownGroup(*exec.Cmd) {}

// signalGroup kills the process itself where process groups are not
// available.
func signalGroup(cmd *exec.Cmd, _ os.Signal) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
