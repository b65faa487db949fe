package ckpt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nlpodyssey/safetensors"
)

func sample() *Checkpoint {
	return &Checkpoint{
		Config: json.RawMessage(`{"model_type": "gpt2"}`),
		Model: []Tensor{
			{Name: "a.weight", Shape: []int64{2, 3}, Data: []float32{1, 2, 3, 4, 5, -6.5}},
			{Name: "a.bias", Shape: []int64{3}, Data: []float32{0.25, 0, -1e-30}},
		},
		Optimizer: []Tensor{{Name: "a.weight.exp_avg", Shape: []int64{2, 3}, Data: []float32{9, 8, 7, 6, 5, 4}}},
		State:     json.RawMessage(`{"step": 7}`),
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	c := sample()
	if err := Save(context.Background(), dir, c); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range append(c.Model, c.Optimizer...) {
		ts := got.Model
		if strings.HasSuffix(want.Name, "exp_avg") {
			ts = got.Optimizer
		}
		g := Find(ts, want.Name)
		if g == nil || !reflect.DeepEqual(g.Shape, want.Shape) || !reflect.DeepEqual(g.Data, want.Data) {
			t.Errorf("%s read back as %+v, want %+v", want.Name, g, want)
		}
	}
	if string(got.State) != string(c.State) || string(got.Config) != string(c.Config) {
		t.Errorf("JSON files read back as %s and %s", got.Config, got.State)
	}
	// The folder is readable by others, as folders the user makes are (not
	// MkdirTemp's 0700).
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o755 {
		t.Errorf("the checkpoint folder has mode %v, want 0755", st.Mode().Perm())
	}
	// The safetensors metadata says "pt", which transformers requires.
	b, _ := os.ReadFile(filepath.Join(dir, ModelFile))
	_, meta, err := safetensors.ReadMetadata(b)
	if err != nil || meta.Metadata()["format"] != "pt" {
		t.Errorf("metadata %v (%v), want format pt", meta.Metadata(), err)
	}
}

func TestSaveReplacesAndKeepsOtherFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	c := sample()
	if err := Save(context.Background(), dir, c); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "loss.svg"), []byte("<svg/>"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Model[0].Data[0] = 42
	c.State = json.RawMessage(`{"step": 8}`)
	if err := Save(context.Background(), dir, c); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Model[0].Data[0] != 42 && Find(got.Model, "a.weight").Data[0] != 42 {
		t.Error("the second save did not replace the first")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "loss.svg")); err != nil || string(b) != "<svg/>" {
		t.Errorf("a file beside the checkpoint was lost: %q, %v", b, err)
	}
	// Nothing is left beside the folder.
	entries, _ := os.ReadDir(filepath.Dir(dir))
	if len(entries) != 1 {
		t.Errorf("the parent holds %d entries after two saves, want 1: %v", len(entries), entries)
	}
}

func TestSaveRefusesAFolderOfOtherFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Save(context.Background(), dir, sample())
	if err == nil || !strings.Contains(err.Error(), "no checkpoint") {
		t.Fatalf("saving over a folder of other files: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); string(b) != "mine" {
		t.Fatal("the user's file was touched")
	}
}

func TestACancelledSaveLeavesTheOldCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := Save(context.Background(), dir, sample()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := sample()
	c.State = json.RawMessage(`{"step": 99}`)
	if err := Save(ctx, dir, c); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled save: %v", err)
	}
	got, err := Load(dir)
	if err != nil || string(got.State) != `{"step": 7}` {
		t.Fatalf("after a cancelled save: %s, %v; want the old checkpoint whole", got.State, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(dir))
	if len(entries) != 1 {
		t.Errorf("a cancelled save left %d entries beside the folder", len(entries)-1)
	}
}

func TestLoadNamesTheBrokenFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := Save(context.Background(), dir, sample()); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, ModelFile)
	good, _ := os.ReadFile(model)
	for name, bad := range map[string][]byte{
		"truncated":  good[:len(good)-3],
		"empty":      {},
		"bad header": append(binary.LittleEndian.AppendUint64(nil, 5), []byte("{oops")...),
	} {
		if err := os.WriteFile(model, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(dir)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), model) {
			t.Errorf("%s: %v, want ErrCorrupt naming %s", name, err, model)
		}
	}
	os.WriteFile(model, good, 0o644)
	os.WriteFile(filepath.Join(dir, ConfigFile), []byte("{"), 0o644)
	if _, err := Load(dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), ConfigFile) {
		t.Errorf("a broken config.json: %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "nothing")); err == nil || !strings.Contains(err.Error(), "no checkpoint") {
		t.Errorf("a missing folder: %v", err)
	}
}

// f16View serializes raw 16-bit data, as transformers may save.
type rawView struct {
	dt    safetensors.DType
	shape []uint64
	data  []byte
}

func (v rawView) DType() safetensors.DType { return v.dt }
func (v rawView) Shape() []uint64          { return v.shape }
func (v rawView) Data() []byte             { return v.data }
func (v rawView) DataLen() uint64          { return uint64(len(v.data)) }

func TestHalfPrecisionFilesAreRead(t *testing.T) {
	b, err := safetensors.Serialize(map[string]rawView{
		"h": {safetensors.F16, []uint64{2}, []byte{0x00, 0x3c, 0x00, 0xc0}}, // 1, −2
		"b": {safetensors.BF16, []uint64{1}, []byte{0x80, 0x3f}},            // 1
		"m": {safetensors.U8, []uint64{2}, []byte{1, 0}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := decode("x.safetensors", b)
	if err != nil {
		t.Fatal(err)
	}
	if h := Find(ts, "h"); h == nil || !reflect.DeepEqual(h.Data, []float32{1, -2}) {
		t.Errorf("F16 read as %+v", h)
	}
	if bf := Find(ts, "b"); bf == nil || !reflect.DeepEqual(bf.Data, []float32{1}) {
		t.Errorf("BF16 read as %+v", bf)
	}
	if m := Find(ts, "m"); m == nil || m.Data != nil || m.DType != "U8" {
		t.Errorf("an integer tensor read as %+v, want no data and DType U8", m)
	}
}

// A file whose writing fails is reported, not synced and swapped in as if
// whole (Save then keeps the old checkpoint).
func TestWriteSyncedReportsAFailedWrite(t *testing.T) {
	dir := t.TempDir()
	failing := errors.New("disk full")
	err := writeSynced(filepath.Join(dir, "a"), func(w io.Writer) error {
		if _, err := w.Write([]byte("partial")); err != nil {
			return err
		}
		return failing
	})
	if !errors.Is(err, failing) {
		t.Errorf("writeSynced with a failing writer: %v, want %v", err, failing)
	}
}

// TestTensorsReadWhenWritten: tensors given by Read, not Data, are read as
// the writer reaches them and make the same files, byte for byte; a read
// that fails fails the save, naming the file and the tensor, and the
// folder keeps the checkpoint it held.
func TestTensorsReadWhenWritten(t *testing.T) {
	ctx := context.Background()
	byData, byRead := filepath.Join(t.TempDir(), "data"), filepath.Join(t.TempDir(), "read")
	c := sample()
	if err := Save(ctx, byData, c); err != nil {
		t.Fatal(err)
	}
	lazy := func(ts []Tensor, fail string) []Tensor {
		out := make([]Tensor, len(ts))
		for i, x := range ts {
			data := x.Data
			out[i] = Tensor{Name: x.Name, Shape: x.Shape, Read: func(dst []float32) error {
				if x.Name == fail {
					return errors.New("the device is gone")
				}
				if len(dst) != len(data) {
					return errors.New("asked for the wrong number of values")
				}
				copy(dst, data)
				return nil
			}}
		}
		return out
	}
	r := sample()
	r.Model, r.Optimizer = lazy(c.Model, ""), lazy(c.Optimizer, "")
	if err := Save(ctx, byRead, r); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{ModelFile, OptimizerFile} {
		a, errA := os.ReadFile(filepath.Join(byData, f))
		b, errB := os.ReadFile(filepath.Join(byRead, f))
		if errA != nil || errB != nil || string(a) != string(b) {
			t.Errorf("%s differs when its tensors are read (%v, %v)", f, errA, errB)
		}
	}
	broken := sample()
	broken.Model, broken.Optimizer = lazy(c.Model, "a.bias"), lazy(c.Optimizer, "")
	broken.State = json.RawMessage(`{"step": 8}`)
	err := Save(ctx, byRead, broken)
	if err == nil || !strings.Contains(err.Error(), "model.safetensors: reading tensor a.bias: the device is gone") {
		t.Fatalf("a save whose read fails: %v, want the file, the tensor and the cause named", err)
	}
	if got, err := Load(byRead); err != nil || string(got.State) != `{"step": 7}` {
		t.Errorf("after the failed save the folder holds %v (%v), want the step-7 checkpoint", got, err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(byRead), ".read.saving-*")); len(leftovers) > 0 {
		t.Errorf("the failed save left %v behind", leftovers)
	}
}
