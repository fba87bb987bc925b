//go:build !unix

package bus

type dirLock struct{}

// lockDir is a no-op where flock is not available.
func lockDir(string) (*dirLock, error) { return &dirLock{}, nil }

func (*dirLock) release() error { return nil }

// exclusive is false: without a lock, another process may share the dir.
func (*dirLock) exclusive() bool { return false }
