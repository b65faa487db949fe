// Package ckpt reads and writes checkpoints: a folder that Hugging Face's
// transformers loads as a model (config.json and model.safetensors) and
// that holds, beside them, what resuming a run needs (optimizer.safetensors
// and train_state.json).
//
// The safetensors format is read and written by
// github.com/nlpodyssey/safetensors, a port of Hugging Face's own Rust
// reader that validates the header and every tensor's offsets. This
// package adds what a training run needs on top: tensors as float32 (F32,
// F16 and BF16 files are read), a named error for every file, tensor and
// expectation, and a save that can be killed at any instant without
// leaving a broken checkpoint behind.
//
// # Atomic saves
//
// Save writes the new checkpoint into a sibling folder, syncs every file
// and the folder, and then exchanges the two folders in one
// renameat2(RENAME_EXCHANGE), so the checkpoint folder is at every instant
// either the old checkpoint or the new one, whole. The old one is then
// removed. Other files in the folder (a loss curve, a report) are carried
// over by hard link. On a file system without RENAME_EXCHANGE the old
// folder is renamed aside before the new one is renamed in; a kill between
// the two leaves the old one as DIR.old-*, which Load names in its error.
package ckpt

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/nlpodyssey/safetensors"
	"golang.org/x/sys/unix"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/internal/le"
)

// The files of a checkpoint.
const (
	ConfigFile    = "config.json"
	ModelFile     = "model.safetensors"
	OptimizerFile = "optimizer.safetensors"
	StateFile     = "train_state.json"
)

// Tensor is a named float32 array of a shape, row-major.
type Tensor struct {
	Name  string
	Shape []int64
	Data  []float32
	// Read, where Data is nil, fills dst (the tensor's values) when Save
	// reaches the tensor in its file, so that a save holds one tensor's
	// values at a time, not every tensor's (package gpt reads them from the
	// device so). An error fails the save, which then leaves the folder as
	// it was. Load never sets it.
	Read func(dst []float32) error
	// DType is the file's type for the tensor when read: F32, F16 and BF16
	// are converted into Data; any other (an integer mask an old
	// transformers saved) leaves Data nil, for the caller to skip.
	DType string
}

// Checkpoint is what a folder holds. Optimizer and State may be empty: a
// model saved by transformers has neither.
type Checkpoint struct {
	Config    json.RawMessage // config.json
	Model     []Tensor        // model.safetensors
	Optimizer []Tensor        // optimizer.safetensors
	State     json.RawMessage // train_state.json
}

// ErrCorrupt marks a file that is not a valid checkpoint file.
var ErrCorrupt = errors.New("ckpt: corrupt checkpoint")

// f32View is a Tensor as safetensors.View, encoded when the writer asks
// for its bytes: Data fills the file's one scratch slice, which
// safetensors.SerializeToWriter writes out before it asks for the next
// tensor's. A file is never held encoded whole (a 124M-parameter model's
// optimizer file is 1 GB), only its largest tensor.
// A tensor given by Read is read into the file's one float32 scratch
// slice first; since Data cannot return an error, a failed read is kept in
// the file's *failed and the save stops after the file is written.
type f32View struct {
	file, name string
	shape      []uint64
	n          int
	values     []float32                 // nil: read
	read       func(dst []float32) error // where values is nil
	scratch    *[]byte
	floats     *[]float32
	failed     *error
}

func (v f32View) DType() safetensors.DType { return safetensors.F32 }
func (v f32View) Shape() []uint64          { return v.shape }
func (v f32View) DataLen() uint64          { return 4 * uint64(v.n) }
func (v f32View) Data() []byte {
	values := v.values
	if values == nil && v.n > 0 {
		if cap(*v.floats) < v.n {
			*v.floats = make([]float32, v.n)
		}
		values = (*v.floats)[:v.n]
		if err := v.read(values); err != nil && *v.failed == nil {
			*v.failed = fmt.Errorf("ckpt: %s: reading tensor %s: %w", v.file, v.name, err)
		}
	}
	if cap(*v.scratch) < 4*v.n {
		*v.scratch = make([]byte, 4*v.n)
	}
	b := (*v.scratch)[:4*v.n]
	le.PutFloat32s(b, values)
	return b
}

// views checks tensors and makes their views for file, with one scratch
// slice of each kind between them and one place for a failed read.
func views(file string, tensors []Tensor, failed *error) (map[string]f32View, error) {
	out := make(map[string]f32View, len(tensors))
	scratch, floats := new([]byte), new([]float32)
	for _, t := range tensors {
		n := int64(1)
		shape := make([]uint64, len(t.Shape))
		for i, d := range t.Shape {
			if d < 0 {
				return nil, fmt.Errorf("ckpt: %s: tensor %s has a negative dimension %v", file, t.Name, t.Shape)
			}
			n *= d
			shape[i] = uint64(d)
		}
		if (t.Data != nil || t.Read == nil) && n != int64(len(t.Data)) {
			return nil, fmt.Errorf("ckpt: %s: tensor %s of shape %v holds %d values, want %d", file, t.Name, t.Shape, len(t.Data), n)
		}
		if _, dup := out[t.Name]; dup {
			return nil, fmt.Errorf("ckpt: %s: tensor %s named twice", file, t.Name)
		}
		out[t.Name] = f32View{file: file, name: t.Name, shape: shape, n: int(n), values: t.Data, read: t.Read,
			scratch: scratch, floats: floats, failed: failed}
	}
	return out, nil
}

// fileMetadata is every safetensors file's metadata: {"format": "pt"},
// which transformers requires.
var fileMetadata = map[string]string{"format": "pt"}

// decode parses a safetensors file's bytes into float32 tensors.
func decode(path string, b []byte) ([]Tensor, error) {
	st, err := safetensors.Deserialize(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s (%d bytes) is not a valid safetensors file: %v", ErrCorrupt, path, len(b), err)
	}
	var out []Tensor
	for _, nt := range st.Tensors() {
		shape := make([]int64, len(nt.TensorView.Shape()))
		for i, d := range nt.TensorView.Shape() {
			if d > math.MaxInt32 {
				return nil, fmt.Errorf("%w: %s: tensor %s has dimension %d", ErrCorrupt, path, nt.Name, d)
			}
			shape[i] = int64(d)
		}
		raw := nt.TensorView.Data()
		var data []float32
		switch dt := nt.TensorView.DType(); dt {
		case safetensors.F32:
			data = make([]float32, len(raw)/4)
			le.Float32s(data, raw)
		case safetensors.F16:
			data = make([]float32, len(raw)/2)
			for i := range data {
				data[i] = float32(f16.ToFloat64(binary.LittleEndian.Uint16(raw[2*i:])))
			}
		case safetensors.BF16:
			data = make([]float32, len(raw)/2)
			for i := range data {
				data[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
			}
		}
		out = append(out, Tensor{Name: nt.Name, Shape: shape, Data: data, DType: nt.TensorView.DType().String()})
	}
	return out, nil
}

// Save writes c into dir atomically (see the package doc), creating dir if
// needed. dir must be absent, empty, or a checkpoint: Save refuses to
// replace a folder that holds other files but no StateFile or ModelFile,
// so a mistyped --out cannot swallow a folder of the user's.
func Save(ctx context.Context, dir string, c *Checkpoint) error {
	dir = filepath.Clean(dir)
	if err := checkTarget(dir); err != nil {
		return err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("ckpt: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".saving-")
	if err != nil {
		return fmt.Errorf("ckpt: making a folder beside %s to save into: %w", dir, err)
	}
	// MkdirTemp makes it 0700; the checkpoint it becomes is a folder like
	// any other the user makes.
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("ckpt: %w", err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	bytesOf := func(b []byte) func(io.Writer) error {
		if b == nil {
			return nil
		}
		return writeAll(b)
	}
	tensorsOf := func(file string, ts []Tensor) (func(io.Writer) error, error) {
		var failed error
		vs, err := views(file, ts, &failed)
		if err != nil {
			return nil, err
		}
		return func(w io.Writer) error {
			if err := safetensors.SerializeToWriter(vs, fileMetadata, w); err != nil {
				return err
			}
			return failed
		}, nil
	}
	model, err := tensorsOf(ModelFile, c.Model)
	if err != nil {
		return err
	}
	var optimizer func(io.Writer) error // none without an optimizer's state
	if c.Optimizer != nil {
		if optimizer, err = tensorsOf(OptimizerFile, c.Optimizer); err != nil {
			return err
		}
	}
	files := []struct {
		name  string
		write func(io.Writer) error // nil: no such file
	}{
		{ConfigFile, bytesOf(c.Config)},
		{ModelFile, model},
		{OptimizerFile, optimizer},
		{StateFile, bytesOf(c.State)},
	}
	ours := map[string]bool{}
	for _, f := range files {
		ours[f.name] = true
		if err := ctx.Err(); err != nil {
			return err
		}
		if f.write == nil {
			continue
		}
		if err := writeSynced(filepath.Join(tmp, f.name), f.write); err != nil {
			return err
		}
	}
	// Carry the folder's other files over (hard links, else copies).
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			if ours[e.Name()] || !e.Type().IsRegular() {
				continue
			}
			src, dst := filepath.Join(dir, e.Name()), filepath.Join(tmp, e.Name())
			if os.Link(src, dst) != nil {
				b, err := os.ReadFile(src)
				if err == nil {
					err = writeSynced(dst, writeAll(b))
				}
				if err != nil {
					return fmt.Errorf("ckpt: carrying %s over: %w", src, err)
				}
			}
		}
	}
	if err := syncDir(tmp); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := swap(tmp, dir); err != nil {
		return err
	}
	done = true
	return nil
}

// CheckTarget tells, before any work, whether Save could write into dir:
// dir is absent, an empty folder or a checkpoint, and a folder can be made
// beside it (Save writes there, then swaps). It makes dir's parent folders
// if they are missing, as Save would.
func CheckTarget(dir string) error {
	dir = filepath.Clean(dir)
	if err := checkTarget(dir); err != nil {
		return err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("ckpt: cannot make the folder %s to save into: %w; name a folder you can write", parent, err)
	}
	probe, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".probe-")
	if err != nil {
		return fmt.Errorf("ckpt: cannot save into %s: folder %s is not writable: %w; name a folder you can write", dir, parent, err)
	}
	return os.Remove(probe)
}

// checkTarget refuses a dir that is a file, or holds files but is not a
// checkpoint.
func checkTarget(dir string) error {
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return fmt.Errorf("ckpt: %s is a file; a checkpoint is a folder: name a folder", dir)
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ckpt: cannot read the folder %s: %w; name a folder you can write", dir, err)
	}
	if len(entries) == 0 {
		return nil
	}
	for _, e := range entries {
		if e.Name() == StateFile || e.Name() == ModelFile {
			return nil
		}
	}
	return fmt.Errorf("ckpt: %s holds %d files but no checkpoint; save into a new or empty folder", dir, len(entries))
}

// swap puts the folder tmp at dir, atomically where the file system can.
func swap(tmp, dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.Rename(tmp, dir); err != nil {
			return fmt.Errorf("ckpt: %w", err)
		}
		return syncDir(filepath.Dir(dir))
	}
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	if err == nil {
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return err
		}
		return os.RemoveAll(tmp) // now the old checkpoint
	}
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("ckpt: exchanging %s with the new checkpoint: %w", dir, err)
	}
	old, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".old-")
	if err != nil {
		return fmt.Errorf("ckpt: %w", err)
	}
	os.Remove(old)
	if err := os.Rename(dir, old); err != nil {
		return fmt.Errorf("ckpt: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("ckpt: the previous checkpoint is at %s; putting the new one at %s: %w", old, dir, err)
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return err
	}
	return os.RemoveAll(old)
}

// writeAll is a writeSynced write that writes b.
func writeAll(b []byte) func(io.Writer) error {
	return func(w io.Writer) error { _, err := w.Write(b); return err }
}

// writeSynced makes the file path with what write writes, through a
// buffer, and syncs it.
func writeSynced(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("ckpt: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("ckpt: writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("ckpt: syncing %s: %w", path, err)
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("ckpt: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("ckpt: syncing %s: %w", dir, err)
	}
	return nil
}

// Load reads the checkpoint in dir: config.json and model.safetensors
// must be there; optimizer.safetensors and train_state.json are read when
// present.
func Load(dir string) (*Checkpoint, error) {
	dir = filepath.Clean(dir)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if olds, _ := filepath.Glob(dir + ".old-*"); len(olds) > 0 {
			return nil, fmt.Errorf("ckpt: no checkpoint at %s, but %s holds the one before an interrupted save; rename it to %s to use it",
				dir, olds[0], filepath.Base(dir))
		}
		return nil, fmt.Errorf("ckpt: no checkpoint at %s", dir)
	}
	_, cerr := os.Stat(filepath.Join(dir, ConfigFile))
	_, merr := os.Stat(filepath.Join(dir, ModelFile))
	if errors.Is(cerr, fs.ErrNotExist) && errors.Is(merr, fs.ErrNotExist) {
		return nil, fmt.Errorf("ckpt: %s is not a checkpoint (it has neither %s nor %s); name the folder a run saved into", dir, ConfigFile, ModelFile)
	}
	c := &Checkpoint{}
	var err error
	if c.Config, err = readJSON(filepath.Join(dir, ConfigFile), true); err != nil {
		return nil, err
	}
	if c.State, err = readJSON(filepath.Join(dir, StateFile), false); err != nil {
		return nil, err
	}
	if c.Model, err = readTensors(filepath.Join(dir, ModelFile), true); err != nil {
		return nil, err
	}
	if c.Optimizer, err = readTensors(filepath.Join(dir, OptimizerFile), false); err != nil {
		return nil, err
	}
	return c, nil
}

func readJSON(path string, required bool) (json.RawMessage, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !required {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ckpt: %w", err)
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%w: %s is not valid JSON", ErrCorrupt, path)
	}
	return b, nil
}

func readTensors(path string, required bool) ([]Tensor, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !required {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ckpt: %w", err)
	}
	return decode(path, b)
}

// Find returns the tensor called name, or nil.
func Find(ts []Tensor, name string) *Tensor {
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i]
		}
	}
	return nil
}

// ShapeString writes a shape as [a, b].
func ShapeString(s []int64) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
