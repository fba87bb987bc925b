//go:build unix

package bus

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

type dirLock struct{ f *os.File }

// lockDir takes an exclusive, non-blocking flock on <dir>/agentwork.lock.
// The kernel drops it when the process dies, so a crash never leaves a
// stale lock behind.
func lockDir(dir string) (*dirLock, error) {
	p := filepath.Join(dir, "agentwork.lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("bus: open lock %s: %w", p, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(p)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := strings.TrimSpace(string(pid))
			if _, perr := strconv.Atoi(holder); perr == nil {
				return nil, fmt.Errorf("%w: %s is locked by pid %s; stop that process or use another --data-dir", ErrLocked, dir, holder)
			}
			return nil, fmt.Errorf("%w: %s is locked; stop that process or use another --data-dir", ErrLocked, dir)
		}
		return nil, fmt.Errorf("bus: lock %s: %w", p, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return &dirLock{f: f}, nil
}

func (l *dirLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	return l.f.Close()
}

// exclusive reports whether the lock is held: no other live process uses
// the dir.
func (l *dirLock) exclusive() bool { return l != nil && l.f != nil }
