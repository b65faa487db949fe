package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

const (
	lockSuffix = ".lock"
	// lockPollMin and lockPollMax bound the wait between two attempts to
	// take a busy lock; the wait doubles from the first to the second.
	lockPollMin = 5 * time.Millisecond
	lockPollMax = 100 * time.Millisecond
)

// errLockBusy means another holder has the lock right now.
var errLockBusy = errors.New("lock busy")

// keyLock is an exclusive flock(2) on <Dir>/<key>.lock.
//
// The holder deletes the lock file before letting go, so finished builds
// leave no lock files behind. That is safe because a taker, after flock
// succeeds, checks that the path still names the file it locked; if the
// holder deleted it meanwhile, the taker lets go and tries again on the new
// file. So at any time at most one process holds a lock on the file the path
// names.
type keyLock struct {
	f    *os.File
	path string
}

// lockKey takes the lock for key, waiting for other holders as long as ctx
// allows.
func (s *Store) lockKey(ctx context.Context, key string) (*keyLock, error) {
	path := filepath.Join(s.Dir, key+lockSuffix)
	wait := lockPollMin
	for {
		l, err := tryLock(path)
		if !errors.Is(err, errLockBusy) {
			return l, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("cache: waiting for %s (another vkern process is building this entry): %w", path, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, lockPollMax)
	}
}

// tryLock takes the lock at path without waiting, or returns errLockBusy.
func tryLock(path string) (*keyLock, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("cache: opening the lock file: %w", err)
		}
		for {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
			if err != unix.EINTR {
				break
			}
		}
		if err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, errLockBusy
			}
			return nil, fmt.Errorf("cache: locking %s: %w", path, err)
		}
		held, herr := f.Stat()
		named, nerr := os.Stat(path)
		if herr == nil && nerr == nil && os.SameFile(held, named) {
			return &keyLock{f: f, path: path}, nil
		}
		// The previous holder deleted the file between our open and flock.
		f.Close()
		if herr != nil {
			return nil, fmt.Errorf("cache: locking %s: %w", path, herr)
		}
		if nerr != nil && !errors.Is(nerr, fs.ErrNotExist) {
			return nil, fmt.Errorf("cache: locking %s: %w", path, nerr)
		}
	}
}

// release deletes the lock file and lets go of the lock. Safe to call on nil.
func (l *keyLock) release() {
	if l == nil {
		return
	}
	os.Remove(l.path)
	l.f.Close()
}
