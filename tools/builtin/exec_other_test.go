//go:build unix && !linux

package builtin_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitGone waits up to 5s for pid to end. Without pidfds (not Linux) there
// is no event to wait on for a process that is not our child: it looks
// every 10ms.
func waitGone(t *testing.T, pid int) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// gone reports whether the process pid has ended (it may wait, a zombie,
// for a parent that does not reap it).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return os.IsNotExist(err)
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(stat)
	return strings.HasPrefix(s[strings.LastIndexByte(s, ')')+1:], " Z")
}
