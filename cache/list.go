package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// List returns the manifests of the store's entries, newest first. It reads
// manifests only and does not recheck binaries; Build does that before an
// entry is used. An entry whose manifest cannot be read is named in the
// error, which comes together with the manifests that could be read.
func (s *Store) List() ([]Manifest, error) {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil, fmt.Errorf("cache: listing %s: %w", s.Dir, err)
	}
	var manifests []Manifest
	var errs []error
	for _, e := range entries {
		if !isSHA256Hex(e.Name()) {
			continue // lock files, temporary folders, anything not ours
		}
		m, err := readManifest(filepath.Join(s.Dir, e.Name()), e.Name())
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Discarded since ReadDir.
		case err != nil:
			errs = append(errs, err)
		default:
			manifests = append(manifests, m)
		}
	}
	sort.Slice(manifests, func(i, j int) bool {
		a, b := manifests[i], manifests[j]
		if !a.BuiltAt.Equal(b.BuiltAt) {
			return a.BuiltAt.After(b.BuiltAt)
		}
		return a.Key < b.Key
	})
	return manifests, errors.Join(errs...)
}

// Clean removes every entry, the object cache, and the temporary folders,
// lock files and writability probes that killed processes leave behind, and
// returns how many entries it removed.
// Files in Dir that are not the store's own are left alone. A key that
// another process is building right now is left in place and named in the
// error.
func (s *Store) Clean() (removed int, err error) {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return 0, fmt.Errorf("cache: cleaning %s: %w", s.Dir, err)
	}
	var errs []error
	keys := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		switch {
		case isSHA256Hex(name):
			keys[name] = true
		case strings.HasSuffix(name, lockSuffix) && isSHA256Hex(strings.TrimSuffix(name, lockSuffix)):
			keys[strings.TrimSuffix(name, lockSuffix)] = true
		case strings.HasPrefix(name, buildPrefix) && len(name) > len(buildPrefix)+64 && isSHA256Hex(name[len(buildPrefix):][:64]):
			keys[name[len(buildPrefix):][:64]] = true
		case name == objectsDirName, strings.HasPrefix(name, trashPrefix), strings.HasPrefix(name, probePrefix):
			if err := os.RemoveAll(filepath.Join(s.Dir, name)); err != nil {
				errs = append(errs, fmt.Errorf("cache: %w", err))
			}
		}
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)

	var busy []string
	for _, key := range sorted {
		lock, err := tryLock(filepath.Join(s.Dir, key+lockSuffix))
		if errors.Is(err, errLockBusy) {
			busy = append(busy, key)
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := os.Lstat(filepath.Join(s.Dir, key)); err == nil {
			if err := s.discard(key); err != nil {
				errs = append(errs, fmt.Errorf("cache: removing entry %s: %w", key, err))
			} else {
				removed++
			}
		}
		if err := s.removeTemporary(buildPrefix + key + "-"); err != nil {
			errs = append(errs, fmt.Errorf("cache: %w", err))
		}
		lock.release()
	}
	if len(busy) > 0 {
		errs = append(errs, fmt.Errorf("cache: %d entries are being built by another vkern process right now and were left in place: %s; run clean again when it is done",
			len(busy), strings.Join(busy, ", ")))
	}
	return removed, errors.Join(errs...)
}
