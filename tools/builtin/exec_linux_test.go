package builtin_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// waitGone waits up to 5s for pid to end (a SIGKILL takes effect soon
// after it is sent, not at once): a pidfd of the process becomes readable
// when it exits, reaped or not.
func waitGone(t *testing.T, pid int) bool {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return true // gone before we looked
	}
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 5000)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll pidfd %d: %v", pid, err)
		}
		return n == 1
	}
}
