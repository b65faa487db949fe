package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The files of an entry, <Dir>/<key>/…
const (
	binaryName   = "server"
	manifestName = "manifest.json"
	buildLogName = "build.log"
)

// manifestFormat is Manifest.Format for manifests this package writes.
const manifestFormat = 2

// oldestManifestFormat is the oldest Manifest.Format this package reads.
// Format 1, from before units (one main file, one build command), is only
// ever at keys of key format 1, which no build computes now: such an entry
// is listed and cleaned, never used.
const oldestManifestFormat = 1

var (
	// ErrBadEntry is wrapped by every error about an entry that exists but
	// cannot be trusted; both ErrTampered and ErrCorrupt wrap it. Such an
	// entry is never run; Store.Rebuild replaces it.
	ErrBadEntry = errors.New("bad cache entry")
	// ErrTampered means an entry's binary is missing or its SHA-256 is not
	// the one its manifest records.
	ErrTampered = fmt.Errorf("%w: binary does not match its manifest", ErrBadEntry)
	// ErrCorrupt means an entry's manifest is missing, unreadable, or
	// describes another entry.
	ErrCorrupt = fmt.Errorf("%w: manifest missing or unreadable", ErrBadEntry)
)

// Manifest describes one entry; it is stored as manifest.json beside the binary.
type Manifest struct {
	// Format is the manifest layout version (2).
	Format int `json:"format"`
	// Key is the entry's key, the name of its folder.
	Key string `json:"key"`
	// Backend is the backend the binary serves ("cpu").
	Backend string `json:"backend"`
	// Units are the translation units, each compiled to an object of its
	// own (or taken from the object cache) and linked in this order:
	// Request.Units, then the builder's own vkern_source.cc.
	Units []string `json:"units"`
	// ReusedUnits are the units whose objects came from the object cache
	// (objects.go) instead of a compile.
	ReusedUnits []string `json:"reused_units,omitempty"`
	// SourceSHA256 is SourceSHA256 of the sources; vkern_source.cc defines
	// it as the C string vkern_source_sha256, which the binary reports in
	// its HELLO.
	SourceSHA256 string `json:"source_sha256"`
	// BinarySHA256 is the hex SHA-256 of the binary as built.
	BinarySHA256 string `json:"binary_sha256"`
	// Compiler identifies the compiler that built it.
	Compiler CompilerInfo `json:"compiler"`
	// Flags are the compiler flags of the build.
	Flags []string `json:"flags"`
	// Target is the CPU the binary was built for (toolchain.Compiler.Target).
	Target string `json:"target"`
	// BuildCommands are the argvs that built it, run in the build folder,
	// so their paths are relative to that folder ("src/…", "obj/…",
	// "server"): one compile per unit, in Units' order (for a reused unit,
	// the command that compiles it), then the link.
	BuildCommands [][]string `json:"build_commands"`
	// BuiltAt is when the build finished.
	BuiltAt time.Time `json:"built_at"`
	// BuildSeconds is how long the build took, from the first compile's
	// start to the link's end.
	BuildSeconds float64 `json:"build_seconds"`
	// UnitSeconds is how long each unit's compile ran, in Units' order (0
	// for a reused unit). The
	// units compile at once, as many as there are CPUs, so with CPUs enough
	// the build takes about the largest of these plus LinkSeconds.
	UnitSeconds []float64 `json:"unit_seconds"`
	// LinkSeconds is how long the link ran.
	LinkSeconds float64 `json:"link_seconds"`
	// Replaced says why a previous entry under this key was discarded by
	// Rebuild; empty when there was none.
	Replaced string `json:"replaced,omitempty"`
}

// CompilerInfo is the part of toolchain.Compiler recorded in a manifest.
type CompilerInfo struct {
	Name        string `json:"name"`
	Path        string `json:"path"`
	Version     string `json:"version"`
	Fingerprint string `json:"fingerprint"`
}

// Artifact is a built entry.
type Artifact struct {
	// Key names the entry.
	Key string
	// Dir is the entry's folder, <Store.Dir>/<Key>.
	Dir string
	// Binary is the path of the kernel server binary.
	Binary string
	// Manifest is the entry's manifest.json.
	Manifest Manifest
}

// Recheck hashes the binary and compares the result with the manifest. An
// error wraps ErrTampered, names the path and both hashes, and means the
// binary must not be run.
func (a *Artifact) Recheck() error {
	got, err := fileSHA256(a.Binary)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cache: %w: %s is missing, manifest records sha256 %s; not running it: Rebuild replaces the entry (or run `vkern cache clean`)",
			ErrTampered, a.Binary, a.Manifest.BinarySHA256)
	}
	if err != nil {
		return fmt.Errorf("cache: %w: %s cannot be read (%v), manifest records sha256 %s; not running it: Rebuild replaces the entry (or run `vkern cache clean`)",
			ErrTampered, a.Binary, err, a.Manifest.BinarySHA256)
	}
	if got != a.Manifest.BinarySHA256 {
		return fmt.Errorf("cache: %w: %s has sha256 %s, but %s records %s; not running it: Rebuild replaces the entry (or run `vkern cache clean`)",
			ErrTampered, a.Binary, got, filepath.Join(a.Dir, manifestName), a.Manifest.BinarySHA256)
	}
	return nil
}

// readManifest reads and checks <dir>/manifest.json for the entry key.
// A missing entry folder gives an error wrapping fs.ErrNotExist; anything
// wrong inside an existing folder wraps ErrCorrupt.
func readManifest(dir, key string) (Manifest, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return Manifest{}, err
	}
	if !fi.IsDir() {
		return Manifest{}, fmt.Errorf("cache: %w: %s is not a folder; Rebuild replaces it (or run `vkern cache clean`)", ErrCorrupt, dir)
	}
	path := filepath.Join(dir, manifestName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, fmt.Errorf("cache: %w: %s has no %s; Rebuild replaces the entry (or run `vkern cache clean`)", ErrCorrupt, dir, manifestName)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("cache: %w: %v; Rebuild replaces the entry (or run `vkern cache clean`)", ErrCorrupt, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("cache: %w: %s: %v; Rebuild replaces the entry (or run `vkern cache clean`)", ErrCorrupt, path, err)
	}
	switch {
	case m.Format < oldestManifestFormat || m.Format > manifestFormat:
		err = fmt.Errorf("format %d, want %d to %d", m.Format, oldestManifestFormat, manifestFormat)
	case m.Key != key:
		err = fmt.Errorf("it is for key %q, not %q", m.Key, key)
	case !isSHA256Hex(m.BinarySHA256):
		err = fmt.Errorf("binary_sha256 %q is not a SHA-256", m.BinarySHA256)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("cache: %w: %s: %v; Rebuild replaces the entry (or run `vkern cache clean`)", ErrCorrupt, path, err)
	}
	return m, nil
}

// load returns the entry for key after a Recheck. A missing entry gives an
// error wrapping fs.ErrNotExist; a bad one, an error wrapping ErrBadEntry.
func (s *Store) load(key string) (*Artifact, error) {
	dir := filepath.Join(s.Dir, key)
	m, err := readManifest(dir, key)
	if err != nil {
		return nil, err
	}
	a := &Artifact{Key: key, Dir: dir, Binary: filepath.Join(dir, binaryName), Manifest: m}
	if err := a.Recheck(); err != nil {
		return nil, err
	}
	return a, nil
}

// fileSHA256 returns the hex SHA-256 of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
