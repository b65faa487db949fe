package cache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/vkern/vkern/toolchain"
)

const (
	// buildPrefix and trashPrefix start the names of the temporary folders
	// in Dir: .build-<key>-<random> while a build runs, .trash-<key>-<random>
	// while a discarded entry is deleted.
	buildPrefix = ".build-"
	trashPrefix = ".trash-"
	// srcDirName is the folder inside a build folder that holds the sources,
	// and objDirName the one that holds the units' objects.
	srcDirName = "src"
	objDirName = "obj"
	// buildTimeout bounds one compiler run (a unit's compile, or the link).
	buildTimeout = 10 * time.Minute
	// buildWaitDelay bounds how long the compiler's output pipes may stay
	// open after it exits or is killed.
	buildWaitDelay = 5 * time.Second
	// buildErrorTailLines is how much compiler output a BuildError quotes.
	buildErrorTailLines = 40
)

// BuildError is a failed build: the first unit whose compile failed (the
// others were stopped then), or the link. The build folder is gone by the
// time it is returned; the command and the output are all that is left of
// it.
type BuildError struct {
	// Unit is the unit whose compile failed, or "" when the link failed.
	Unit string
	// Command is the argv that failed, in the build folder: src/ held the
	// sources, obj/ the objects, and server was the link's output.
	Command []string
	// OutputTail is the last 40 lines of that command's stdout and stderr.
	OutputTail string
	// FirstError is the first line of the output that reports an error
	// ("file:line:col: error: …", nvcc's "file(line): error: …", a
	// linker's "undefined reference"), which the tail may have lost; empty
	// when none does.
	FirstError string
	// Err is why it failed: the exit status, a timeout, or a cancelled context.
	Err error
}

func (e *BuildError) Error() string {
	out := e.OutputTail
	if strings.TrimSpace(out) == "" {
		out = "(no output)"
	}
	first := ""
	if e.FirstError != "" {
		first = "\nfirst error: " + e.FirstError
	}
	step := "linking"
	if e.Unit != "" {
		step = "compiling " + e.Unit
	}
	return fmt.Sprintf("cache: build failed: %s: %v%s\ncommand: %s\ncompiler output (last %d lines at most):\n%s",
		step, e.Err, first, quoteArgs(e.Command), buildErrorTailLines, out)
}

func (e *BuildError) Unwrap() error { return e.Err }

// Build returns the artifact for r, compiling it only when the store does not
// have it yet.
//
// An existing entry is rechecked and returned. An entry that fails the recheck
// or whose manifest cannot be read is not used: Build returns an error wrapping
// ErrBadEntry (and ErrTampered or ErrCorrupt) that names the problem; call
// Rebuild to replace it. A missing entry is built under the key's lock: of many
// processes that build one key at once, one compiles and the others wait (as
// long as ctx allows) and return its result. A failed build leaves no entry
// (only the objects of units that compiled, in the object cache) and returns
// a *BuildError.
func (s *Store) Build(ctx context.Context, r Request) (*Artifact, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	key := Key(r)
	if a, err := s.load(key); !errors.Is(err, fs.ErrNotExist) {
		return a, err
	}
	lock, err := s.lockKey(ctx, key)
	if err != nil {
		return nil, err
	}
	defer lock.release()
	if a, err := s.load(key); !errors.Is(err, fs.ErrNotExist) {
		return a, err // built by the process that held the lock before us
	}
	return s.compile(ctx, key, r, "")
}

// Rebuild replaces a bad entry for r and returns the new one. Under the key's
// lock it rechecks the entry: one that passes (another process has rebuilt it
// meanwhile) is returned as it is; a bad one is deleted and built again, and
// the new manifest's Replaced field says what was wrong with the old one. With
// no entry at all, Rebuild is Build.
func (s *Store) Rebuild(ctx context.Context, r Request) (*Artifact, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	key := Key(r)
	lock, err := s.lockKey(ctx, key)
	if err != nil {
		return nil, err
	}
	defer lock.release()
	a, err := s.load(key)
	switch {
	case err == nil:
		return a, nil
	case errors.Is(err, fs.ErrNotExist):
		return s.compile(ctx, key, r, "")
	case errors.Is(err, ErrBadEntry):
		if derr := s.discard(key); derr != nil {
			return nil, fmt.Errorf("cache: removing the bad entry %s: %w (it was bad because: %v)", key, derr, err)
		}
		return s.compile(ctx, key, r, err.Error())
	default:
		return nil, err
	}
}

// compile builds r into a temporary folder and publishes it as the entry
// key. The caller holds the key's lock.
func (s *Store) compile(ctx context.Context, key string, r Request, replaced string) (*Artifact, error) {
	// A builder that was killed leaves its build folder; ours replaces it.
	// Failing to delete it only leaves it for Clean.
	_ = s.removeTemporary(buildPrefix + key + "-")
	tmp, err := os.MkdirTemp(s.Dir, buildPrefix+key+"-")
	if err != nil {
		return nil, fmt.Errorf("cache: creating a build folder in %s: %w; set VKERN_CACHE to a writable folder", s.Dir, err)
	}
	published := false
	defer func() {
		if !published {
			os.RemoveAll(tmp)
		}
	}()

	src := filepath.Join(tmp, srcDirName)
	sourceSHA := SourceSHA256(r.Files)
	if err := writeSources(src, r.Files); err != nil {
		return nil, err
	}
	if err := writeFileSync(filepath.Join(src, SourceUnit), SourceUnitText(sourceSHA)); err != nil {
		return nil, err
	}
	// Every unit, then the one that carries the sources' SHA-256; each
	// unit's object from the object cache where it has one (objects.go),
	// otherwise compiled, writing its dependencies for the cache.
	units := append(append([]string(nil), r.Units...), SourceUnit)
	// Rebuild replaces an entry found bad: it trusts no stored object.
	reuse, lookups := objectReuse(r.Compiler), replaced == ""
	var reads map[string][]string // includeNames: what each unit reads
	if reuse == includeNames {
		var ok bool
		if reads, ok = includeReads(r.Files, r.Units); !ok {
			reuse = noReuse
		}
	}
	cached, hashed := s.objects(), newSources(r.Files) // each source's SHA-256, taken once for every unit's keys
	start := time.Now()
	objects := make([]string, len(units))
	commands := make([][]string, len(units), len(units)+1)
	unitKeys := make([]string, len(units))
	reused := make([]string, len(units)) // where a reused unit's object came from
	var compile []int                    // the units to compile, by index
	for i, u := range units {
		objects[i] = path.Join(objDirName, u+".o")
		if err := os.MkdirAll(filepath.Join(tmp, filepath.FromSlash(path.Dir(objects[i]))), 0o755); err != nil {
			return nil, fmt.Errorf("cache: making the object folder for %s: %w", u, err)
		}
		commands[i] = r.Compiler.CompileCommand(srcDirName, u, objects[i])
		if reuse == noReuse || u == SourceUnit {
			compile = append(compile, i)
			continue
		}
		unitKeys[i] = unitKey(r.Compiler, commands[i], hashed, u)
		if lookups {
			if from := cached.lookup(unitKeys[i], hashed, filepath.Join(tmp, filepath.FromSlash(objects[i]))); from != "" {
				reused[i] = from
				continue
			}
		}
		if reuse == depFiles {
			// The dependency flags go before the unit, the command's last word.
			argv := commands[i]
			commands[i] = append(append(argv[:len(argv)-1:len(argv)-1], depFlags(objects[i]+".d")...), argv[len(argv)-1])
		}
		compile = append(compile, i)
	}
	compiledUnits, compiledCommands, compiledObjects := make([]string, len(compile)), make([][]string, len(compile)), make([]string, len(compile))
	for j, i := range compile {
		compiledUnits[j], compiledCommands[j], compiledObjects[j] = units[i], commands[i], objects[i]
	}
	compiledOutputs, compiledSeconds, err := compileUnits(ctx, tmp, compiledUnits, compiledCommands, compiledObjects)
	if err != nil {
		return nil, err
	}
	outputs := make([][]byte, len(units), len(units)+1)
	unitSeconds := make([]float64, len(units))
	var reusedUnits []string
	for i, u := range units {
		if reused[i] != "" {
			outputs[i] = []byte("(not run: the object is the object cache's " + reused[i] + ")\n")
			reusedUnits = append(reusedUnits, u)
		}
	}
	for j, i := range compile {
		outputs[i], unitSeconds[i] = compiledOutputs[j], compiledSeconds[j]
		if unitKeys[i] == "" {
			continue
		}
		deps, ok := reads[units[i]], true
		if reuse == depFiles {
			deps, ok = depFileDeps(filepath.Join(tmp, filepath.FromSlash(objects[i]+".d")), units[i], src) // absolute, as Store.Dir is
		}
		if ok {
			cached.store(unitKeys[i], deps, filepath.Join(tmp, filepath.FromSlash(objects[i])), hashed)
		}
	}
	link := r.Compiler.LinkCommand(objects, binaryName)
	commands = append(commands, link)
	linkOutput, linkSeconds, err := runCompiler(ctx, tmp, link)
	outputs = append(outputs, linkOutput)
	if err != nil {
		return nil, &BuildError{Command: link, OutputTail: lastLines(linkOutput, buildErrorTailLines), FirstError: firstError(linkOutput), Err: err}
	}
	seconds := time.Since(start).Seconds()
	for _, dir := range []string{src, filepath.Join(tmp, objDirName)} {
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("cache: removing the sources and objects from the build folder: %w", err)
		}
	}
	binarySHA, err := syncAndHash(filepath.Join(tmp, binaryName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &BuildError{Command: link, OutputTail: lastLines(linkOutput, buildErrorTailLines),
			Err: fmt.Errorf("the compiler exited 0 but wrote no %s", binaryName)}
	}
	if err != nil {
		return nil, fmt.Errorf("cache: reading the built binary: %w", err)
	}

	c := r.Compiler
	m := Manifest{
		Format:        manifestFormat,
		Key:           key,
		Backend:       c.Backend,
		Units:         units,
		ReusedUnits:   reusedUnits,
		SourceSHA256:  sourceSHA,
		BinarySHA256:  binarySHA,
		Compiler:      CompilerInfo{Name: c.Name, Path: c.Path, Version: c.Version, Fingerprint: c.Fingerprint},
		Flags:         append([]string(nil), c.Flags...),
		Target:        c.Target,
		BuildCommands: commands,
		BuiltAt:       time.Now().UTC(),
		BuildSeconds:  seconds,
		UnitSeconds:   unitSeconds,
		LinkSeconds:   linkSeconds,
		Replaced:      replaced,
	}
	manifest, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("cache: encoding the manifest: %w", err)
	}
	if err := writeFileSync(filepath.Join(tmp, buildLogName), buildLog(commands, outputs)); err != nil {
		return nil, err
	}
	if err := writeFileSync(filepath.Join(tmp, manifestName), append(manifest, '\n')); err != nil {
		return nil, err
	}
	if err := syncDir(tmp); err != nil {
		return nil, err
	}

	final := filepath.Join(s.Dir, key)
	if err := os.Rename(tmp, final); err != nil {
		// Only a builder that bypassed the lock can have got here first;
		// its entry is as good as ours if it passes the recheck.
		if a, lerr := s.load(key); lerr == nil {
			return a, nil
		}
		return nil, fmt.Errorf("cache: publishing %s: %w", final, err)
	}
	published = true
	if err := syncDir(s.Dir); err != nil {
		return nil, err
	}
	return &Artifact{Key: key, Dir: final, Binary: filepath.Join(final, binaryName), Manifest: m}, nil
}

// compileUnits runs the compile commands argvs[i] of units[i] in dir, at
// once, at most runtime.NumCPU() at a time, started in the units' order,
// and returns each one's output and how long it ran. The first compile to
// fail stops the others (each in its own process group, killed whole) and
// is returned as a *BuildError naming its unit; a compile that exits 0
// without writing its object objects[i] is such a failure too. A cancelled
// or expired ctx stops them all and is returned (wrapped) in a *BuildError.
func compileUnits(ctx context.Context, dir string, units []string, argvs [][]string, objects []string) (outputs [][]byte, seconds []float64, err error) {
	uctx, stop := context.WithCancel(ctx)
	defer stop()
	outputs = make([][]byte, len(argvs))
	seconds = make([]float64, len(argvs))
	var (
		mu    sync.Mutex
		first *BuildError
	)
	fail := func(e *BuildError) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = e
			stop()
		}
	}
	next := make(chan int, len(argvs))
	for i := range argvs {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(runtime.NumCPU(), len(argvs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if uctx.Err() != nil {
					return
				}
				out, secs, err := runCompiler(uctx, dir, argvs[i])
				outputs[i], seconds[i] = out, secs
				switch {
				case err != nil && ctx.Err() == nil && uctx.Err() != nil:
					// Stopped because another unit failed first: not this unit's error.
				case err != nil:
					fail(&BuildError{Unit: units[i], Command: argvs[i], OutputTail: lastLines(out, buildErrorTailLines), FirstError: firstError(out), Err: err})
				default:
					if _, serr := os.Stat(filepath.Join(dir, filepath.FromSlash(objects[i]))); serr != nil {
						fail(&BuildError{Unit: units[i], Command: argvs[i], OutputTail: lastLines(out, buildErrorTailLines),
							Err: fmt.Errorf("the compiler exited 0 but wrote no %s", objects[i])})
					}
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, nil, first
	}
	if ctx.Err() != nil {
		// Stopped between two compiles, before one could report it.
		return nil, nil, &BuildError{Unit: units[0], Command: argvs[0], Err: fmt.Errorf("stopped: %w", ctx.Err())}
	}
	return outputs, seconds, nil
}

// buildLog is the build.log of an entry: each command, as a shell would
// read it back, followed by its output, in the order of commands.
func buildLog(commands [][]string, outputs [][]byte) []byte {
	var b bytes.Buffer
	for i, argv := range commands {
		fmt.Fprintf(&b, "$ %s\n", quoteArgs(argv))
		b.Write(outputs[i])
		if len(outputs[i]) > 0 && !bytes.HasSuffix(outputs[i], []byte("\n")) {
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// runCompiler runs argv in dir and returns its combined output and how long
// it ran. The compiler's TMPDIR is a folder of its own under dir, removed
// when it ends: a compiler killed mid-build (Ctrl-C, a timeout) cannot
// clean up its temporary files, and they would stay in the system's.
func runCompiler(ctx context.Context, dir string, argv []string) (output []byte, seconds float64, err error) {
	bctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	tmp, err := os.MkdirTemp(dir, ".tmp-")
	if err != nil {
		return nil, 0, fmt.Errorf("a temporary folder for the compiler: %w", err)
	}
	defer os.RemoveAll(tmp)
	cmd := toolchain.GroupCommand(bctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.WaitDelay = buildWaitDelay
	start := time.Now()
	err = cmd.Run()
	seconds = time.Since(start).Seconds()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		err = fmt.Errorf("stopped: %w", ctx.Err())
	case bctx.Err() != nil:
		err = fmt.Errorf("the compiler did not finish within %v: %w", buildTimeout, bctx.Err())
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		if _, serr := os.Stat(argv[0]); serr != nil {
			err = fmt.Errorf("%w; the compiler %s is gone: detect it again (check CXX)", err, argv[0])
		}
	}
	return out.Bytes(), seconds, err
}

// writeSources writes files under dir.
func writeSources(dir string, files map[string][]byte) error {
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("cache: writing source %s: %w", p, err)
		}
		if err := os.WriteFile(full, content, 0o644); err != nil {
			return fmt.Errorf("cache: writing source %s: %w", p, err)
		}
	}
	return nil
}

// syncAndHash flushes the file at path to disk and returns its hex SHA-256.
func syncAndHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return "", err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeFileSync writes data to a new file at path and flushes it to disk.
func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("cache: writing %s: %w", path, err)
	}
	return nil
}

// syncDir flushes a folder's entries (new names, renames) to disk.
func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	serr := d.Sync()
	cerr := d.Close()
	if err := errors.Join(serr, cerr); err != nil {
		return fmt.Errorf("cache: syncing folder %s: %w", path, err)
	}
	return nil
}

// discard takes the entry key out of the store: first renamed out of the
// way in one step, so no reader sees it half deleted, then deleted.
func (s *Store) discard(key string) error {
	trash, err := os.MkdirTemp(s.Dir, trashPrefix+key+"-")
	if err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(s.Dir, key), filepath.Join(trash, key)); err != nil {
		os.Remove(trash)
		return err
	}
	// The entry is gone from its key now; if deleting the files fails,
	// Clean deletes the leftover .trash- folder later.
	os.RemoveAll(trash)
	return nil
}

// removeTemporary deletes the folders in Dir whose names start with prefix.
func (s *Store) removeTemporary(prefix string) error {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			errs = append(errs, os.RemoveAll(filepath.Join(s.Dir, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// errorLine matches a compiler's or linker's error line.
var errorLine = regexp.MustCompile(`(?i)(\berror\b\s*:|undefined reference to)`)

// firstError returns the first line of out that reports an error.
func firstError(out []byte) string {
	for _, line := range strings.Split(string(bytes.ToValidUTF8(out, []byte("?"))), "\n") {
		if errorLine.MatchString(line) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// lastLines returns the last n lines of out.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(bytes.ToValidUTF8(out, []byte("?"))), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// quoteArgs joins argv for display the way a POSIX shell would read it
// back, single-quoting the arguments that need it.
func quoteArgs(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`*?[]{}()<>|&;#~") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		} else {
			q[i] = a
		}
	}
	return strings.Join(q, " ")
}
