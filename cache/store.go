// Package cache is vkern's content-addressed store of built kernel servers.
//
// A Request (kernel sources, the file to compile, a probed compiler) has a
// Key: the SHA-256 of the sources, the compiler's fingerprint, flags and
// target CPU, the backend and the main file. Store.Build returns the
// artifact under that key, compiling it only when it is not there yet. An
// entry is the folder <Dir>/<key> holding the binary "server", its
// "manifest.json" (what was built, from what, with what, and the binary's
// SHA-256) and the compiler's "build.log".
//
// Entries are published whole or not at all: the build runs in a temporary
// folder inside Dir that is fsynced and renamed to <key> only when complete,
// and builders of one key take an exclusive lock on <Dir>/<key>.lock, so any
// number of vkern processes started together compile once and share the
// result. Every Build rechecks the binary's SHA-256 against the manifest; an
// entry that fails (ErrTampered) or whose manifest is unreadable (ErrCorrupt)
// is reported, never used, and replaced by Rebuild. Callers recheck again
// with Artifact.Recheck right before they start the binary.
//
// The package does not find compilers (package toolchain does), does not run
// the binaries it stores, and does not evict old entries on its own: Clean
// removes them all, on request. It trusts the filesystem it is given to
// support flock(2) and atomic rename(2) within one folder, which local
// filesystems do and some network filesystems do not.
package cache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// probePrefix starts the name of the file Open writes to check the folder.
const probePrefix = ".probe-"

// Store is a cache folder. Its methods are safe to call from many goroutines
// and many processes at once.
type Store struct {
	// Dir is the absolute path of the cache folder.
	Dir string
}

// DefaultDir returns the cache folder vkern uses when told nothing else:
// $VKERN_CACHE when set, else vkern inside the user's cache folder
// ($XDG_CACHE_HOME or ~/.cache on Linux).
func DefaultDir() (string, error) {
	if d := os.Getenv("VKERN_CACHE"); d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			return "", fmt.Errorf("cache: VKERN_CACHE=%q: %w; set VKERN_CACHE to an absolute path", d, err)
		}
		return abs, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cache: VKERN_CACHE is unset and there is no user cache folder (%w); set VKERN_CACHE=/path/to/a/writable/folder", err)
	}
	return filepath.Join(base, "vkern"), nil
}

// Open creates dir if needed and checks that files can be created in it.
func Open(dir string) (*Store, error) {
	fix := "set VKERN_CACHE to a writable folder"
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("cache: folder %q: %w; %s", dir, err, fix)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("cache: cannot create the cache folder %s: %w; %s", abs, err, fix)
	}
	probe, err := os.CreateTemp(abs, probePrefix)
	if err != nil {
		return nil, fmt.Errorf("cache: the cache folder %s is not writable: %w; %s", abs, err, fix)
	}
	_, werr := probe.Write([]byte("vkern"))
	cerr := probe.Close()
	rerr := os.Remove(probe.Name())
	if err := errors.Join(werr, cerr, rerr); err != nil {
		return nil, fmt.Errorf("cache: the cache folder %s is not writable: %w; %s", abs, err, fix)
	}
	return &Store{Dir: abs}, nil
}
