package cache

// The object cache: the compiled units of earlier builds, kept in
// <Dir>/objects/ so that a build whose sources differ from an earlier one's
// only in files some units do not read compiles just the units that read
// them. A planted defect edits one kernel file; before this, each of the
// test suites' hundred-odd mutant servers compiled every unit again.
//
// An object is found in two steps:
//
//   - The unit key hashes what the compile depends on besides the contents
//     of the files it reads: the compiler's fingerprint, target and backend,
//     the compile command, the unit's path and content, and the paths of all
//     the sources (a file added beside the others could change what an
//     include, or __has_include, finds). Its folder, objects/<unit key>/,
//     holds "deps": the files the unit's last compile read (below: from
//     the compiler's dependency file, or the sources' directives), the
//     sources by path and the compiler's own headers (outside the sources)
//     by absolute path.
//   - The dependency key hashes that list, each source's content in this
//     build, and each header's size and modification time now. The object
//     is <dependency key>.o in that folder, and <dependency key>.sum holds
//     its SHA-256, checked before the object is used; a mismatch is a miss.
//
// A miss compiles the unit and stores its object and deps. Every file is
// written to a temporary name in its folder and renamed, so a reader sees a
// whole file or none (short of a crash, after which the keys and the
// SHA-256 still refuse a damaged file), and two builds storing objects for
// one unit key at once both succeed. Objects are stored as soon as every
// unit has compiled, even when the link then fails: each is what its
// sources compile to. Rebuild, which replaces an entry found bad, compiles
// every unit without looking here. Clean removes the folder (objects is the
// store's name in Dir); nothing else does, so it grows by one object per
// unit for each new combination of what the unit reads, and by a whole set
// when a source file is added, removed or renamed.
//
// What this rests on: a compile reads only what its dependency file lists,
// or for cuda and hip what its sources' directives name (no assembler
// .incbin of a source file, no precompiled headers among the sources), and
// does not depend on the time (__DATE__, __TIME__ and __TIMESTAMP__, which
// no kernel file uses).
//
// Where a unit's dependencies come from (objectReuse):
//
//   - cpu: the dependency file g++ or clang writes (-MD -MF), so that a
//     changed header recompiles only the units that read it.
//   - cuda and hip: the sources themselves, with no change to the compile
//     command (nvcc's and hipcc's dependency files have not been checked on
//     those machines, and nvcc's may list only its host pass's includes).
//     A unit is taken to read itself and, transitively, every source whose
//     base name an #include, #import or #embed of a file it reads may name
//     (includeReads, includedNames: every # in the text read as a
//     directive could be, in code, comments, strings and #if 0 blocks
//     alike, so that no tokenizing can hide one); the toolkit's own
//     headers are the compiler's, which its fingerprint (its version and
//     the drivers' environment) names. A source with a directive the scan
//     cannot be sure of (a name made by a macro, include_next, and the
//     few texts it refuses) turns reuse off for the build.
//     So an edited kernel file recompiles that unit alone, or with the
//     units that include it (gemm_sm90.cu, which gemm.cuh includes), and
//     an edited header the units that include it, directly or through
//     other headers.
//
// Because an object is shared between builds of different sources, no unit
// may carry SourceSHA256 in its code: the builder writes one more unit,
// SourceUnit, which defines it, and compiles that one every time.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/vkern/vkern/toolchain"
)

const (
	// objectsDirName is the object cache's folder in Dir.
	objectsDirName = "objects"
	// objectFormat opens every unit key's hash input; change it whenever the
	// encoding or the folder's layout changes.
	objectFormat = "vkern-object/2"
	// depsName is the file of a unit key's folder that lists what the unit
	// read.
	depsName = "deps"
)

// SourceUnit is the unit the builder writes beside the sources. It defines
// the C symbol vkern_source_sha256, the sources' SourceSHA256 as a string,
// which the server reports in its HELLO. Request.Files may not use its path.
// A server built without the builder (a test's own g++ line) compiles
// SourceUnitText as one more unit.
const SourceUnit = "vkern_source.cc"

// SourceUnitText is SourceUnit's content for sources whose SourceSHA256 is sha.
func SourceUnitText(sha string) []byte {
	return []byte("// Written by vkern's builder (package cache): the SHA-256 of the sources\n" +
		"// this server was built from, which it reports in its HELLO.\n" +
		"extern \"C\" const char vkern_source_sha256[] = \"" + sha + "\";\n")
}

// reuseMode is where a build's units' dependencies come from.
type reuseMode int

const (
	noReuse      reuseMode = iota
	depFiles               // the compiler's dependency files (-MD -MF)
	includeNames           // the sources a unit's #include lines name, transitively
)

// objectReuse says where c's units' dependencies come from.
func objectReuse(c *toolchain.Compiler) reuseMode {
	switch c.Backend {
	case toolchain.BackendCPU:
		return depFiles
	case toolchain.BackendCUDA, toolchain.BackendHIP:
		return includeNames
	}
	return noReuse
}

// includeReads are, for includeNames, the sources each unit is taken to
// read: itself and, transitively, every source whose base name a directive
// of a file it reads may name (includedNames, which errs toward more). ok is
// false when a source has a directive the scan cannot be sure of.
func includeReads(files map[string][]byte, units []string) (reads map[string][]string, ok bool) {
	byBase := map[string][]string{} // the sources of each base name
	names := map[string][]string{}  // the base names each source's directives name
	for p, data := range files {
		byBase[path.Base(p)] = append(byBase[path.Base(p)], p)
		if names[p], ok = includedNames(data); !ok {
			return nil, false
		}
	}
	reads = make(map[string][]string, len(units))
	for _, u := range units {
		seen := map[string]bool{u: true}
		for queue := []string{u}; len(queue) > 0; queue = queue[1:] {
			for _, name := range names[queue[0]] {
				for _, p := range byBase[name] {
					if !seen[p] {
						seen[p] = true
						queue = append(queue, p)
					}
				}
			}
		}
		reads[u] = slices.Sorted(maps.Keys(seen))
	}
	return reads, true
}

// depFlags are the compile flags that make the compiler write the
// dependency file dep of the unit it compiles.
func depFlags(dep string) []string { return []string{"-MD", "-MF", dep} }

// sources is what the object cache reads of a build's source files, taken
// once per build: each file's SHA-256, and one digest of all their paths.
type sources struct {
	sums  map[string][sha256.Size]byte
	paths string
}

func newSources(files map[string][]byte) sources {
	src := sources{sums: make(map[string][sha256.Size]byte, len(files))}
	paths := slices.Sorted(maps.Keys(files))
	h := sha256.New()
	writeCount(h, len(paths))
	for _, p := range paths {
		src.sums[p] = sha256.Sum256(files[p])
		writeBytes(h, []byte(p))
	}
	src.paths = hex.EncodeToString(h.Sum(nil))
	return src
}

// unitKey is the unit key of unit, compiled by c with argv (the command
// without the dependency flags), among src.
func unitKey(c *toolchain.Compiler, argv []string, src sources, unit string) string {
	h := sha256.New()
	writeBytes(h, []byte(objectFormat))
	writeBytes(h, []byte(c.Fingerprint))
	writeBytes(h, []byte(c.Target))
	writeBytes(h, []byte(c.Backend))
	writeCount(h, len(argv))
	for _, a := range argv {
		writeBytes(h, []byte(a))
	}
	writeBytes(h, []byte(src.paths))
	writeBytes(h, []byte(unit))
	sum := src.sums[unit]
	h.Write(sum[:])
	return hex.EncodeToString(h.Sum(nil))
}

// depsKey is the dependency key of deps: each source (a relative path) by
// its content's SHA-256 in src, each header of the compiler's (an absolute
// path) by its size and modification time now; false when a source is not
// among src or a header cannot be read.
func depsKey(deps []string, src sources) (string, bool) {
	h := sha256.New()
	writeCount(h, len(deps))
	for _, d := range deps {
		writeBytes(h, []byte(d))
		if filepath.IsAbs(d) {
			info, err := os.Stat(d)
			if err != nil {
				return "", false
			}
			writeCount(h, int(info.Size()))
			writeCount(h, int(info.ModTime().UnixNano()))
			continue
		}
		sum, ok := src.sums[d]
		if !ok {
			return "", false
		}
		h.Write(sum[:])
	}
	return hex.EncodeToString(h.Sum(nil)), true
}

// parseDeps reads a make-style dependency file (what -MD -MF writes: a
// target, a colon, then the files, with backslash-newline continuations
// and backslash-escaped spaces) and returns its files, cleaned, sorted and
// without repeats: the sources relative to the source folder (those under
// srcPrefix, "src/" as the build's commands name it, or absSrc, the same
// folder named absolutely), the compiler's own headers by absolute path. A
// relative path outside the source folder is an error: it could not be
// found again once the build folder is gone.
func parseDeps(data []byte, srcPrefix, absSrc string) ([]string, error) {
	text := strings.ReplaceAll(string(data), "\\\r\n", " ")
	text = strings.ReplaceAll(text, "\\\n", " ")
	// The first rule's prerequisites: what follows the target's colon (a
	// colon followed by a space or the end; a drive letter's is not).
	colon := -1
	for i := 0; i < len(text); i++ {
		if text[i] == ':' && (i+1 == len(text) || text[i+1] == ' ' || text[i+1] == '\t' || text[i+1] == '\n') {
			colon = i
			break
		}
	}
	if colon < 0 {
		return nil, fmt.Errorf("no target in the dependency file")
	}
	rest := text[colon+1:]
	if end := strings.IndexByte(rest, '\n'); end >= 0 {
		rest = rest[:end] // -MD may add rules after the first; the first has them all
	}
	seen := map[string]bool{}
	var out []string
	var bad error
	var tok strings.Builder
	flush := func() {
		if tok.Len() == 0 {
			return
		}
		p := strings.ReplaceAll(tok.String(), "$$", "$")
		tok.Reset()
		clean := path.Clean(filepath.ToSlash(p))
		var dep string
		switch {
		case strings.HasPrefix(clean, srcPrefix):
			dep = strings.TrimPrefix(clean, srcPrefix)
		case absSrc != "" && strings.HasPrefix(clean, filepath.ToSlash(absSrc)+"/"):
			dep = strings.TrimPrefix(clean, filepath.ToSlash(absSrc)+"/")
		case filepath.IsAbs(p):
			dep = filepath.Clean(p)
		default:
			bad = fmt.Errorf("the dependency %q is neither a source nor an absolute path", p)
			return
		}
		if !seen[dep] {
			seen[dep] = true
			out = append(out, dep)
		}
	}
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; {
		case c == '\\' && i+1 < len(rest) && (rest[i+1] == ' ' || rest[i+1] == '#'):
			tok.WriteByte(rest[i+1])
			i++
		case c == ' ' || c == '\t' || c == '\r':
			flush()
		default:
			tok.WriteByte(c)
		}
	}
	flush()
	if bad != nil {
		return nil, bad
	}
	sort.Strings(out)
	return out, nil
}

// objectCache is the object cache of one store.
type objectCache struct{ dir string }

func (s *Store) objects() objectCache { return objectCache{dir: filepath.Join(s.Dir, objectsDirName)} }

// lookup copies unit key ukey's object for files to dst and says which it
// copied (its path in the store and its SHA-256), or "" for a miss: its
// deps are unknown, a source among them is not among files, a header has
// changed, or the object's SHA-256 is not the one stored beside it. A miss
// is never an error: the unit is compiled instead.
func (o objectCache) lookup(ukey string, src sources, dst string) string {
	folder := filepath.Join(o.dir, ukey)
	deps, err := os.ReadFile(filepath.Join(folder, depsName))
	if err != nil || len(deps) == 0 {
		return ""
	}
	dkey, ok := depsKey(strings.Split(strings.TrimSuffix(string(deps), "\n"), "\n"), src)
	if !ok {
		return ""
	}
	sum, err := os.ReadFile(filepath.Join(folder, dkey+".sum"))
	if err != nil {
		return ""
	}
	obj, err := os.ReadFile(filepath.Join(folder, dkey+".o"))
	if err != nil || len(obj) == 0 {
		return ""
	}
	got := sha256.Sum256(obj)
	if hex.EncodeToString(got[:]) != strings.TrimSpace(string(sum)) || os.WriteFile(dst, obj, 0o644) != nil {
		return ""
	}
	return path.Join(objectsDirName, ukey, dkey+".o") + ", sha256 " + hex.EncodeToString(got[:])
}

// depFileDeps is what the dependency file dep of unit says its compile
// read (parseDeps), or false when it cannot be read or does not name unit.
func depFileDeps(dep, unit, absSrc string) ([]string, bool) {
	data, err := os.ReadFile(dep)
	if err != nil {
		return nil, false
	}
	deps, err := parseDeps(data, srcDirName+"/", absSrc)
	if err != nil || !slices.Contains(deps, unit) {
		return nil, false
	}
	return deps, true
}

// store keeps the object at obj, compiled from src as unit key ukey,
// whose compile read deps. Failing to keep one is not an error (the next
// build compiles the unit again).
func (o objectCache) store(ukey string, deps []string, obj string, src sources) {
	dkey, ok := depsKey(deps, src)
	if !ok {
		return
	}
	object, err := os.ReadFile(obj)
	if err != nil || len(object) == 0 {
		return
	}
	folder := filepath.Join(o.dir, ukey)
	if err := os.MkdirAll(folder, 0o755); err != nil {
		return
	}
	sum := sha256.Sum256(object)
	// The object and its sum first, then the deps that lead to them.
	if writeRenamed(folder, dkey+".o", object) != nil ||
		writeRenamed(folder, dkey+".sum", []byte(hex.EncodeToString(sum[:])+"\n")) != nil {
		return
	}
	_ = writeRenamed(folder, depsName, []byte(strings.Join(deps, "\n")+"\n"))
}

// writeRenamed writes data to folder/name through a temporary file renamed
// over it.
func writeRenamed(folder, name string, data []byte) error {
	f, err := os.CreateTemp(folder, ".tmp-")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr != nil || cerr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("cache: writing %s: %v %v", name, werr, cerr)
	}
	if err := os.Rename(f.Name(), filepath.Join(folder, name)); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
