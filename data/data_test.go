package data

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeFiles writes n small text files under dir, file i holding
// "file i\n" repeated so each is distinguishable.
func writeFiles(t *testing.T, dir string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		body := strings.Repeat(fmt.Sprintf("file %03d\n", i), 4)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.txt", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func text(tokens []uint16) string {
	b := make([]byte, len(tokens))
	for i, x := range tokens {
		b[i] = byte(x)
	}
	return string(b)
}

func TestTextSplitEvery20thFile(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, 45)
	if err := os.Mkdir(filepath.Join(dir, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".git", "HEAD"), []byte("hidden"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(context.Background(), []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	if c.Files != 45 || c.Vocab != 256 {
		t.Fatalf("Files %d Vocab %d, want 45 and 256", c.Files, c.Vocab)
	}
	// Files 19 and 39 (the 20th and 40th, zero-based) are validation.
	wantVal := strings.Repeat("file 019\n", 4) + strings.Repeat("file 039\n", 4)
	if got := text(c.Val); got != wantVal {
		t.Fatalf("validation part %q, want %q", got, wantVal)
	}
	train := text(c.Train)
	if strings.Contains(train, "file 019") || strings.Contains(train, "hidden") || !strings.Contains(train, "file 044") {
		t.Fatalf("training part holds the wrong files: %q…", train[:40])
	}
	if len(c.Train)+len(c.Val) != 45*36 {
		t.Fatalf("%d + %d tokens, want %d", len(c.Train), len(c.Val), 45*36)
	}
}

func TestTextFewFilesSplitByPosition(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, 3)
	c, err := Load(context.Background(), []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	total := 3 * 36
	if len(c.Val) != total/20 || len(c.Train) != total-total/20 {
		t.Fatalf("train %d val %d tokens, want %d and %d", len(c.Train), len(c.Val), total-total/20, total/20)
	}
	if !strings.HasSuffix(strings.Repeat("file 002\n", 4), text(c.Val)) {
		t.Fatalf("validation part %q is not the end of the last file", text(c.Val))
	}
}

func TestBinRoundTripAndDamage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens.bin")
	tokens := make([]uint16, 1000)
	for i := range tokens {
		tokens[i] = uint16(i * 37 % 50257)
	}
	if err := WriteBin(path, tokens); err != nil {
		t.Fatal(err)
	}
	c, err := Load(context.Background(), []string{path})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(append(slices.Clone(c.Train), c.Val...), tokens) || len(c.Val) != 50 {
		t.Fatalf("read back %d + %d tokens, not the 950 + 50 written", len(c.Train), len(c.Val))
	}
	if want := int(slices.Max(tokens)) + 1; c.Vocab != want {
		t.Fatalf("Vocab %d, want %d", c.Vocab, want)
	}
	if err := c.Check(8, 50257); err != nil {
		t.Fatal(err)
	}
	if err := c.Check(8, 1000); err == nil || !strings.Contains(err.Error(), "vocabulary is 1000") {
		t.Fatalf("a vocabulary too small for the ids: %v", err)
	}

	b, _ := os.ReadFile(path)
	for _, tc := range []struct {
		name, want string
		bytes      []byte
	}{
		{"short", "less than the 1024-byte header", b[:100]},
		{"truncated", "truncated or damaged", b[:len(b)-1]},
		{"magic", "not a token file", append([]byte{1, 2, 3, 4}, b[4:]...)},
	} {
		bad := filepath.Join(dir, tc.name+".bin")
		if err := os.WriteFile(bad, tc.bytes, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(context.Background(), []string{bad}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := Load(context.Background(), []string{path, dir}); err == nil || !strings.Contains(err.Error(), "only --data path") {
		t.Errorf("a .bin beside other paths: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Load(ctx, []string{filepath.Join(t.TempDir(), "missing")}); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing path: %v", err)
	}
	if _, err := Load(ctx, []string{t.TempDir()}); err == nil || !strings.Contains(err.Error(), "no files under") {
		t.Errorf("an empty folder: %v", err)
	}
	// A folder holding a .bin of tokens is refused: its bytes are not text.
	bins := t.TempDir()
	writeFiles(t, bins, 2)
	os.WriteFile(filepath.Join(bins, "train_000.bin"), make([]byte, 2048), 0o644)
	if _, err := Load(ctx, []string{bins}); err == nil || !strings.Contains(err.Error(), "train_000.bin is a .bin of tokens") {
		t.Errorf("a folder with a .bin: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	dir := t.TempDir()
	writeFiles(t, dir, 2)
	if _, err := Load(cancelled, []string{dir}); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled load: %v", err)
	}
}

func TestCheckTooShort(t *testing.T) {
	c := &Corpus{Train: make([]uint16, 100), Val: make([]uint16, 10), Vocab: 256, Source: "test"}
	if err := c.Check(9, 256); err != nil {
		t.Fatal(err)
	}
	if err := c.Check(10, 256); !errors.Is(err, ErrTooShort) || !strings.Contains(err.Error(), "validation part") {
		t.Fatalf("a window longer than the validation part: %v", err)
	}
}

func TestBatchDeterministicAndShifted(t *testing.T) {
	c := &Corpus{Vocab: 256}
	for i := 0; i < 5000; i++ {
		c.Train = append(c.Train, uint16(i%251))
	}
	in1, tg1 := c.Batch(7, 3, 4, 16)
	c.Batch(7, 2, 4, 16) // another step in between changes nothing
	in2, tg2 := c.Batch(7, 3, 4, 16)
	if !slices.Equal(in1, in2) || !slices.Equal(tg1, tg2) {
		t.Fatal("the same (seed, step) gave different batches")
	}
	in3, _ := c.Batch(7, 4, 4, 16)
	in4, _ := c.Batch(8, 3, 4, 16)
	if slices.Equal(in1, in3) || slices.Equal(in1, in4) {
		t.Fatal("another step or seed gave the same batch")
	}
	for i := 0; i < 4; i++ {
		for j := 0; j < 16; j++ {
			x, y := in1[i*16+j], tg1[i*16+j]
			if y != (x+1)%251 {
				t.Fatalf("window %d position %d: target %d does not follow input %d", i, j, y, x)
			}
			if j > 0 && x != tg1[i*16+j-1] {
				t.Fatalf("window %d position %d: inputs are not the targets shifted", i, j)
			}
		}
	}
	// The window may start at the last possible offset and no further.
	short := &Corpus{Train: []uint16{1, 2, 3, 4, 5}}
	for s := int64(0); s < 50; s++ {
		in, tg := short.Batch(1, s, 2, 4)
		if in[0] != 1 || tg[3] != 5 {
			t.Fatalf("step %d: a corpus of exactly T + 1 tokens gave %v → %v", s, in, tg)
		}
	}
}

func TestGoSourceTreeDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the Go distribution's sources")
	}
	root, err := GoSourceTree()
	if err != nil {
		t.Skip(err)
	}
	files, err := listFiles(context.Background(), []string{filepath.Join(root, "errors")}, ".go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !strings.HasSuffix(f, ".go") {
			t.Fatalf("%s is not a .go file", f)
		}
	}
}
