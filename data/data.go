// Package data turns text and token files into the token streams a model
// trains and is evaluated on: a training part, a held-out validation part,
// batches drawn deterministically from a seed, and evaluation windows.
//
// Tokens are bytes (a vocabulary of 256) read from text files, or uint16 ids
// read from a pre-tokenized file in llm.c's .bin layout (a 256 × int32
// header: magic 20240520, version 1, the token count; then the tokens), for
// BPE data prepared elsewhere. Without a path, the corpus is the Go
// distribution's own source tree: nothing to download.
//
// Every rule here is fixed and documented, so another tool can reproduce a
// batch or an evaluation from the same files and seed:
//
//   - Files are read in lexical order of their paths; folders recursively.
//   - The validation part of text is every 20th file (the 20th, 40th, …)
//     when there are 20 files or more, else the last 5% of the bytes; of a
//     .bin, the last 5% of the tokens.
//   - Batch s of a run with seed σ is B windows of T + 1 tokens of the
//     training part; window i starts at the i-th offset drawn, uniformly
//     over every start that leaves T + 1 tokens, from Go's math/rand/v2
//     PCG seeded (σ, s). The same (σ, s) always gives the same batch,
//     whatever came before, so a resumed run sees the batches an
//     uninterrupted one would.
//   - Evaluation uses the validation part (package gpt, EvalCorpus).
//
// It reads files and nothing else; it knows nothing of models or devices.
package data

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// Corpus is a stream of tokens split into a training and a validation part.
type Corpus struct {
	Train, Val []uint16
	// Vocab is the number of token ids in use: 256 for bytes, or a .bin's
	// largest id + 1. A model's vocabulary must cover it (see Check).
	Vocab int
	// Source says what was read, for reports: "1234 files, 95.1 MB, from
	// /usr/local/go/src" or a .bin's path.
	Source string
	Files  int
}

// binMagic and binVersion identify llm.c's token files.
const (
	binMagic      = 20240520
	binVersion    = 1
	binHeaderInts = 256
)

// valEvery: every valEvery-th text file is held out for validation.
const valEvery = 20

// Load reads the corpus at paths: text files and folders (bytes as tokens),
// or exactly one .bin of uint16 tokens. With no paths, the Go
// distribution's source tree ($(go env GOROOT)/src/**/*.go). It stops when
// ctx is done.
func Load(ctx context.Context, paths []string) (*Corpus, error) {
	if len(paths) == 0 {
		root, err := GoSourceTree()
		if err != nil {
			return nil, err
		}
		files, err := listFiles(ctx, []string{root}, ".go")
		if err != nil {
			return nil, err
		}
		return loadText(ctx, files, "the Go distribution's sources in "+root)
	}
	var bins []string
	for _, p := range paths {
		if strings.HasSuffix(p, ".bin") {
			bins = append(bins, p)
		}
	}
	switch {
	case len(bins) > 1 || (len(bins) == 1 && len(paths) > 1):
		return nil, fmt.Errorf("data: a .bin of tokens must be the only --data path; got %s", strings.Join(paths, ", "))
	case len(bins) == 1:
		return loadBin(bins[0])
	}
	files, err := listFiles(ctx, paths, "")
	if err != nil {
		return nil, err
	}
	return loadText(ctx, files, strings.Join(paths, ", "))
}

// GoSourceTree is the Go distribution's src folder: $GOROOT, else what
// `go env GOROOT` says, else the GOROOT this binary was built with.
func GoSourceTree() (string, error) {
	var tried []string
	candidates := []string{os.Getenv("GOROOT")}
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	// runtime.GOROOT is deprecated because a binary may run away from where
	// it was built; here it is only the last guess, after the two above,
	// and a path that does not exist is skipped below.
	//lint:ignore SA1019 the last of three guesses, checked before use
	candidates = append(candidates, runtime.GOROOT())
	for _, root := range candidates {
		if root == "" {
			continue
		}
		src := filepath.Join(root, "src")
		if st, err := os.Stat(src); err == nil && st.IsDir() {
			return src, nil
		}
		tried = append(tried, src)
	}
	return "", fmt.Errorf("data: no Go distribution found (tried %s) to train on by default; name a corpus with --data (text files or folders, or a .bin of tokens)",
		strings.Join(tried, ", "))
}

// listFiles lists the regular files under paths (files as given, folders
// recursively), in lexical order, keeping only names ending in ext when ext
// is set. Hidden folders (.git) are skipped.
func listFiles(ctx context.Context, paths []string, ext string) ([]string, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("data: %w; name text files, folders, or one .bin of tokens", err)
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			if d.IsDir() {
				if path != p && strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
				return nil
			}
			if ext == "" && strings.HasSuffix(path, ".bin") {
				// A folder is read as text, byte by byte: a .bin of tokens in
				// one (llm.c's train_000.bin) would be read as its bytes.
				return fmt.Errorf("%s is a .bin of tokens, which a folder's text would read as bytes; name the one .bin alone with --data", path)
			}
			if d.Type().IsRegular() && (ext == "" || strings.HasSuffix(path, ext)) {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("data: reading %s: %w", p, err)
		}
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("data: no files under %s", strings.Join(paths, ", "))
	}
	return files, nil
}

// loadText reads files as bytes and splits them (see the package doc).
func loadText(ctx context.Context, files []string, where string) (*Corpus, error) {
	c := &Corpus{Vocab: 256, Files: len(files)}
	var bytes int64
	var whole []uint16 // fewer than valEvery files: split by position
	for i, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
		bytes += int64(len(b))
		dst := &c.Train
		switch {
		case len(files) < valEvery:
			dst = &whole
		case (i+1)%valEvery == 0:
			dst = &c.Val
		}
		for _, x := range b {
			*dst = append(*dst, uint16(x))
		}
	}
	if len(files) < valEvery {
		cut := len(whole) - len(whole)/valEvery
		c.Train, c.Val = whole[:cut], whole[cut:]
	}
	c.Source = fmt.Sprintf("%d files, %.1f MB, from %s", len(files), float64(bytes)/1e6, where)
	return c, nil
}

// loadBin reads an llm.c token file.
func loadBin(path string) (*Corpus, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	header := 4 * binHeaderInts
	if len(b) < header {
		return nil, fmt.Errorf("data: %s has %d bytes, less than the %d-byte header of a token file (llm.c's .bin layout)", path, len(b), header)
	}
	magic, version := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
	count := int64(binary.LittleEndian.Uint32(b[8:]))
	if magic != binMagic || version != binVersion {
		return nil, fmt.Errorf("data: %s is not a token file: magic %d and version %d, want %d and %d (llm.c's .bin layout)", path, magic, version, binMagic, binVersion)
	}
	if want := int64(header) + 2*count; int64(len(b)) != want {
		return nil, fmt.Errorf("data: %s declares %d tokens, which take %d bytes with the header; the file has %d (truncated or damaged)", path, count, want, len(b))
	}
	tokens := make([]uint16, count)
	vocab := 0
	for i := range tokens {
		tokens[i] = binary.LittleEndian.Uint16(b[header+2*i:])
		vocab = max(vocab, int(tokens[i])+1)
	}
	cut := len(tokens) - len(tokens)/valEvery
	return &Corpus{Train: tokens[:cut], Val: tokens[cut:], Vocab: vocab, Source: fmt.Sprintf("%d tokens from %s", count, path), Files: 1}, nil
}

// WriteBin writes tokens in llm.c's .bin layout (for tests and for data
// prepared by other tools to be read back).
func WriteBin(path string, tokens []uint16) error {
	b := make([]byte, 4*binHeaderInts+2*len(tokens))
	binary.LittleEndian.PutUint32(b, binMagic)
	binary.LittleEndian.PutUint32(b[4:], binVersion)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(tokens)))
	for i, t := range tokens {
		binary.LittleEndian.PutUint16(b[4*binHeaderInts+2*i:], t)
	}
	return os.WriteFile(path, b, 0o644)
}

// ErrTooShort: a part of the corpus holds fewer tokens than one window.
var ErrTooShort = errors.New("data: too few tokens")

// Check says whether both parts hold at least one window of t + 1 tokens
// and every token is below vocab (the model's vocabulary).
func (c *Corpus) Check(t, vocab int) error {
	for _, part := range []struct {
		name   string
		tokens []uint16
	}{{"training", c.Train}, {"validation", c.Val}} {
		if len(part.tokens) < t+1 {
			return fmt.Errorf("%w: the %s part of %s has %d tokens, fewer than one window of T + 1 = %d; give more data or a model with a shorter context",
				ErrTooShort, part.name, c.Source, len(part.tokens), t+1)
		}
	}
	if c.Vocab > vocab {
		return fmt.Errorf("data: %s has token ids up to %d, but the model's vocabulary is %d; choose a model whose V covers them", c.Source, c.Vocab-1, vocab)
	}
	return nil
}

// Batch returns the inputs and targets of batch step of a run with seed:
// b windows of t + 1 tokens from the training part (b·t each, row-major),
// targets the inputs shifted by one. Window i of the batch starts at an
// offset drawn from PCG(seed, step) as the i-th draw, uniform over every
// start that leaves t + 1 tokens. Check(t, …) must have passed.
func (c *Corpus) Batch(seed uint64, step int64, b, t int) (inputs, targets []int32) {
	rng := rand.New(rand.NewPCG(seed, uint64(step)))
	inputs, targets = make([]int32, b*t), make([]int32, b*t)
	starts := int64(len(c.Train) - t)
	for i := 0; i < b; i++ {
		at := rng.Int64N(starts)
		window := c.Train[at : at+int64(t)+1]
		for j := 0; j < t; j++ {
			inputs[i*t+j] = int32(window[j])
			targets[i*t+j] = int32(window[j+1])
		}
	}
	return inputs, targets
}
