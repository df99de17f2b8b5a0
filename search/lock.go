package search

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrInUse is an index another process holds open (a serve): reindex must
// not rebuild it underneath that process.
var ErrInUse = errors.New("the search index is in use by a running bgjobs serve; stop it first")

// lockDir takes an exclusive, non-blocking lock on dir's lock file for as
// long as the returned file stays open. The kernel drops it when the
// holder exits, however it exits.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s)", ErrInUse, dir)
		}
		return nil, err
	}
	return f, nil
}
