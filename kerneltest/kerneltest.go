// Package kerneltest is the conformance suite every backend runs: one call
// per op checks a device against the oracle on the quick shapes and every
// distribution, so the cpu, cuda and hip backends are held to the same cases.
//
// It also lists the planted defects (Mutations) that each backend's tests
// build into their kernels by editing the real sources, to show that the
// verifier reports them as incorrect.
package kerneltest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/kserver"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
	"github.com/vkern/vkern/verify"
)

// Op checks one op on dev: every distribution, the quick default shapes plus
// extra, two seeds. Every case must pass.
func Op(t *testing.T, dev verify.Device, name string, extra ...string) {
	t.Helper()
	o, err := op.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	shapes := append(append([]string(nil), o.Shapes.Quick...), extra...)
	cases, err := verify.Plan{Ops: []*op.Op{o}, Shapes: shapes, Seed: 1, Trials: 2}.Cases()
	if err != nil {
		t.Fatal(err)
	}
	res, err := verify.Run(context.Background(), dev, cases, Options(t, dev))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Cases {
		if r.Verdict != verify.Passed {
			t.Errorf("%s: %s: %s", r.Case, r.Verdict, r.Reason)
		}
	}
	if res.Verdict != verify.Passed {
		t.Errorf("%s: %d cases, verdict %s", name, len(res.Cases), res.Verdict)
	}
}

// Options describes dev to verify.Run: the arithmetic its kernels state
// when dev states it (vkern.Device does, from its server's handshake), so
// that the suite holds each backend to the bounds of its own structure.
func Options(t *testing.T, dev verify.Device) verify.Options {
	t.Helper()
	var opts verify.Options
	if d, ok := dev.(interface {
		Arithmetic(context.Context) (oracle.Arithmetic, error)
	}); ok {
		arith, err := d.Arithmetic(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		opts.Arithmetic = arith
	}
	return opts
}

// extraShapes are the shapes, beyond its quick ones, each op is held to:
// sizes that cross a GPU kernel's tile or on-chip limits.
var extraShapes = map[string][]string{
	"gemm": {"65x33x257"}, "gemm_grad_a": {"65x33x257"}, "gemm_grad_b": {"65x33x257"},
	// Odd row lengths, so that consecutive rows start at every offset from a
	// 16-byte boundary, on each row path of the GPU kernels: a warp a row,
	// a block a row (softmax_grad staged in shared memory), a cluster of
	// blocks, and segments (524,289: past the largest cluster).
	"softmax":      {"3x33000", "16x9", "16x13", "16x1001", "16x50257", "9x100001", "8x524289"},
	"softmax_grad": {"3x33000", "16x9", "16x13", "16x1001", "16x50257", "9x100001", "8x524289"},
	// 300x40001: more rows than a GPU holds blocks of its row kernel at
	// once, across ignored rows.
	"cross_entropy": {"3x65536", "3x65537:ignore_index=-100", "16x9", "16x13", "16x1001:ignore_index=-100",
		"16x50257", "300x40001:ignore_index=-100", "9x100001"},
	"add": {"1000003"}, "gelu": {"1000003"}, "gelu_grad": {"1000003"},
	"layernorm":      {"3x4099", "2x20000", "3000x64"},
	"layernorm_grad": {"3x4099", "2x9000", "3000x64"},
	"global_norm":    {"1000003"}, "adamw": {"1000003"},
	// Several column tiles of the GPU kernels, edge tiles, an unaligned
	// row; bias_grad's combine over many row blocks and strands.
	"linear":        {"65x33x257", "130x1000x72"},
	"linear_nt":     {"65x33x257", "130x1000x72", "130x1000x75"},
	"linear_grad_w": {"65x33x257:accumulate=0", "72x1000x136"},
	"bias_grad":     {"4100x40", "130x4098"},
	// T past the GPU's 64-row tiles, a head of 12 (not a multiple of 8: 2-byte
	// loads), and one of 160 (past the tensor-core kernels' 128: exact rows).
	"attention": {"1x129x64x1", "2x70x36x3", "1x40x160x1"}, "attention_grad": {"1x129x64x1", "2x70x36x3", "1x40x160x1"},
}

// extraChecks are what an op is held to beyond vkern verify's cases:
// behaviour verify cannot show (a refused input). Calls that share buffers
// (add in place) need the device's own buffers, and are checked by each
// backend's test in package vkern.
var extraChecks = map[string]func(t *testing.T, dev verify.Device){
	"cross_entropy":  crossEntropyChecks,
	"layernorm_grad": layerNormGradChecks,
	"embedding":      embeddingChecks,
	"embedding_grad": embeddingGradChecks,
	"gelu":           func(t *testing.T, dev verify.Device) { everyHalfChecks(t, dev, op.GELU) },
	"gelu_grad":      func(t *testing.T, dev verify.Device) { everyHalfChecks(t, dev, op.GELUGrad) },
}

// All checks every registered op on dev: Op at its quick and extra shapes,
// then its extra checks, each in a subtest named for the op.
func All(t *testing.T, dev verify.Device) {
	for _, o := range op.All() {
		t.Run(o.Name, func(t *testing.T) {
			Op(t, dev, o.Name, extraShapes[o.Name]...)
			if check := extraChecks[o.Name]; check != nil {
				check(t, dev)
			}
		})
	}
}

// crossEntropyChecks: a call with every row ignored, which must give zeros
// and no NaN; and labels that are neither a class nor the ignore_index,
// which the server must refuse with INVALID_ARGUMENT naming the row, the
// value and the valid range, and then serve on.
func crossEntropyChecks(t *testing.T, dev verify.Device) {
	o := op.CrossEntropy
	ctx := context.Background()
	// 300 rows of 40,001: more rows than a GPU holds blocks of its row
	// kernel at once, so blocks skip some rows and compute others.
	for _, shape := range []string{"5x40:ignore_index=-100", "300x40001:ignore_index=-100"} {
		t.Run("every row ignored "+shape, func(t *testing.T) {
			s, err := o.ParseShape(shape)
			if err != nil {
				t.Fatal(err)
			}
			r, v := int(s.Dims[0]), int(s.Dims[1])
			labels := make([]int32, r)
			for i := range labels {
				labels[i] = -100
			}
			buffers := crossEntropyBuffers(s, labels)
			if _, err := dev.RunOp(ctx, o, s, buffers); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < r; i++ {
				if v := math.Float32frombits(binary.LittleEndian.Uint32(buffers[2][4*i:])); v != 0 {
					t.Fatalf("loss[%d] = %v, want 0", i, v)
				}
			}
			for i := 0; i < r*v; i++ {
				if x := f16.ToFloat64(binary.LittleEndian.Uint16(buffers[3][2*i:])); x != 0 {
					t.Fatalf("dLogits[%d,%d] = %v, want 0", i/v, i%v, x)
				}
			}
		})
	}
	t.Run("a label outside the classes", func(t *testing.T) {
		for _, tt := range []struct {
			shape  string
			labels []int32
			want   string
		}{
			{"4x5", []int32{0, 4, 5, 1}, "labels[2] = 5 is outside its domain: a class index in [0, V), or the ignore_index (set ignore_index to the label that marks rows to skip) (R=4, V=5, ignore_index=unset, grad_scale=1)"},
			{"4x5", []int32{0, -100, 1, 1}, "labels[1] = -100 is outside its domain: a class index in [0, V), or the ignore_index (set ignore_index to the label that marks rows to skip) (R=4, V=5, ignore_index=unset, grad_scale=1)"},
			{"4x5:ignore_index=-100", []int32{-100, 3, -1, 7}, "labels[2] = -1 is outside its domain: a class index in [0, V), or the ignore_index (set ignore_index to the label that marks rows to skip) (R=4, V=5, ignore_index=-100, grad_scale=1)"},
			{"3x40001", []int32{0, 40000, 40001}, "labels[2] = 40001 is outside its domain: a class index in [0, V)"},
			{"3x70000", []int32{0, 69999, 70000}, "labels[2] = 70000 is outside its domain: a class index in [0, V)"},
		} {
			s, err := o.ParseShape(tt.shape)
			if err != nil {
				t.Fatal(err)
			}
			_, err = dev.RunOp(ctx, o, s, crossEntropyBuffers(s, tt.labels))
			var se *kserver.ServerError
			if !errors.As(err, &se) || se.StatusName != "INVALID_ARGUMENT" || !strings.Contains(err.Error(), tt.want) ||
				!strings.Contains(err.Error(), "fix the labels") {
				t.Errorf("%s, labels %v: error %v, want INVALID_ARGUMENT containing %q and the fix", tt.shape, tt.labels, err, tt.want)
			} else {
				t.Logf("%s: %v", tt.shape, err)
			}
			// The server serves on: the same call with valid labels runs.
			ok := append([]int32(nil), tt.labels...)
			for i, l := range ok {
				if l < 0 || int64(l) >= s.Dims[1] {
					ok[i] = 0
				}
			}
			if _, err := dev.RunOp(ctx, o, s, crossEntropyBuffers(s, ok)); err != nil {
				t.Errorf("%s: a valid call after the refused one failed: %v", tt.shape, err)
			}
		}
	})
}

// crossEntropyBuffers makes the buffers of one cross_entropy call at s:
// N(0, 1)-like logits, the labels, and poisoned outputs.
func crossEntropyBuffers(s op.Shape, labels []int32) [][]byte {
	r, v := int(s.Dims[0]), int(s.Dims[1])
	if len(labels) != r {
		panic(fmt.Sprintf("kerneltest: %d labels for %d rows", len(labels), r))
	}
	logits := make([]byte, 2*r*v)
	for i := 0; i < r*v; i++ {
		binary.LittleEndian.PutUint16(logits[2*i:], f16.FromFloat64(math.Sin(float64(i))*3))
	}
	lab := make([]byte, 4*r)
	for i, l := range labels {
		binary.LittleEndian.PutUint32(lab[4*i:], uint32(l))
	}
	loss, grad := make([]byte, 4*r), make([]byte, 2*r*v)
	verify.Poison(op.F32, loss)
	verify.Poison(op.F16, grad)
	return [][]byte{logits, lab, loss, grad}
}

// layerNormGradChecks: two calls on the same inputs give the same bits, at
// a shape where each block of a GPU kernel sums many rows' dw, db and dxs,
// so that an accumulation whose order changes from run to run (atomics)
// shows.
func layerNormGradChecks(t *testing.T, dev verify.Device) {
	o := op.LayerNormGrad
	s, err := o.ParseShape("3000x768:dx_sum=1")
	if err != nil {
		t.Fatal(err)
	}
	inputs, err := oracle.Generate(o, s, oracle.Normal, 7)
	if err != nil {
		t.Fatal(err)
	}
	run := func() [][]byte {
		buffers, _ := callBuffers(o, s, inputs)
		if _, err := dev.RunOp(context.Background(), o, s, buffers); err != nil {
			t.Fatal(err)
		}
		return buffers
	}
	first, second := run(), run()
	for i, p := range o.Operands {
		if p.Writes() && !bytes.Equal(first[i], second[i]) {
			t.Errorf("layernorm_grad %s: %s differs between two runs on the same inputs; its sums must not depend on the order work finishes in", s, p.Name)
		}
	}
}

// everyHalfChecks runs an elementwise op on every f16 value of x at once
// (NaNs and infinities included), with dy = 1 where the op has a dy (so
// dx is the derivative itself) and then with dy drawn from a normal
// distribution, and checks each result under its bound: the kernels'
// transcendentals are approximations of their own, and this is every
// argument they can meet.
func everyHalfChecks(t *testing.T, dev verify.Device, o *op.Op) {
	t.Helper()
	ctx := context.Background()
	s, err := o.ParseShape("65536")
	if err != nil {
		t.Fatal(err)
	}
	arith := Options(t, dev).Arithmetic
	random, err := oracle.Generate(o, s, oracle.Normal, 11)
	if err != nil {
		t.Fatal(err)
	}
	for _, dy := range []string{"1", "normal"} {
		inputs := make([]oracle.Input, len(o.Inputs()))
		for i, p := range o.Inputs() {
			v := make([]uint16, 65536)
			for j := range v {
				switch {
				case p.Name == "x" && uint16(j)|0x0200 == 0xffff:
					// The two NaNs whose quieted bits are the poison
					// pattern would read as never written: another NaN.
					v[j] = 0xfe00
				case p.Name == "x":
					v[j] = uint16(j)
				case dy == "1":
					v[j] = 0x3c00
				default:
					v[j] = random[i].F16[j]
				}
			}
			inputs[i] = oracle.Input{F16: v}
		}
		buffers, outs := callBuffers(o, s, inputs)
		if _, err := dev.RunOp(ctx, o, s, buffers); err != nil {
			t.Fatal(err)
		}
		got, err := verify.Check(ctx, o, s, inputs, outs, arith, verify.CheckOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := got.Stats
		if st.Checked != st.Elements || st.Wrong > 0 || st.Unwritten > 0 {
			t.Errorf("%s on every f16 x (dy %s): %d of %d checked, %d wrong, %d unwritten; worst %.3g of the bound; %s",
				o.Name, dy, st.Checked, st.Elements, st.Wrong, st.Unwritten, st.MaxErrorOverBound, st.FirstWrong)
		}
		if len(o.Inputs()) == 1 {
			break // no dy
		}
	}
}

// CallBuffers is callBuffers' buffers: the bytes of every operand of one
// call of o at s on inputs, in wire order, Out operands poisoned.
func CallBuffers(o *op.Op, s op.Shape, inputs []oracle.Input) [][]byte {
	buffers, _ := callBuffers(o, s, inputs)
	return buffers
}

// callBuffers lays out the buffers of one call of o, whose operands are
// inputs (Out operands aside): each input's bytes in wire order, and each
// Out operand filled with the poison pattern; outs are the Out buffers.
func callBuffers(o *op.Op, s op.Shape, inputs []oracle.Input) (buffers, outs [][]byte) {
	for _, p := range o.Operands {
		if p.Role == op.Out {
			b := make([]byte, s.Bytes(p))
			verify.Poison(p.DType, b)
			buffers = append(buffers, b)
			outs = append(outs, b)
			continue
		}
		buffers = append(buffers, operandBytes(inputs[len(buffers)-len(outs)]))
	}
	return buffers, outs
}

// operandBytes encodes an input's elements as the wire's little-endian
// bytes.
func operandBytes(in oracle.Input) []byte {
	var b []byte
	for _, h := range in.F16 {
		b = binary.LittleEndian.AppendUint16(b, h)
	}
	for _, v := range in.F32 {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	for _, v := range in.I32 {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}

// embeddingChecks: token ids outside [0, V), which the server must refuse
// with INVALID_ARGUMENT naming the first of them, and then serve on.
func embeddingChecks(t *testing.T, dev verify.Device) {
	refusedTokenChecks(t, dev, op.Embedding)
}

// embeddingGradChecks: the same bits from two runs on the same inputs, at
// shapes with long runs of one token and with many tokens; and refused
// token ids, as embedding's.
func embeddingGradChecks(t *testing.T, dev verify.Device) {
	o := op.EmbeddingGrad
	ctx := context.Background()
	t.Run("the same bits on every run", func(t *testing.T) {
		for _, shape := range []string{"8x512x64x3", "4x1024x768x2000", "3x700x9x50"} {
			s, err := o.ParseShape(shape)
			if err != nil {
				t.Fatal(err)
			}
			inputs, err := oracle.Generate(o, s, oracle.Normal, 7)
			if err != nil {
				t.Fatal(err)
			}
			var first [][]byte
			for run := 0; run < 2; run++ {
				buffers := embeddingGradBuffers(inputs)
				if _, err := dev.RunOp(ctx, o, s, buffers); err != nil {
					t.Fatal(err)
				}
				if run == 0 {
					first = buffers
					continue
				}
				for k, name := range []string{"dwte", "dwpe"} {
					if a, b := first[2+k], buffers[2+k]; !bytes.Equal(a, b) {
						i := 0
						for i+4 <= len(a) && bytes.Equal(a[i:i+4], b[i:i+4]) {
							i += 4
						}
						t.Errorf("%s: %s differs between two runs on the same inputs, first at element %d (%#08x, then %#08x)",
							shape, name, i/4, binary.LittleEndian.Uint32(a[i:]), binary.LittleEndian.Uint32(b[i:]))
					}
				}
			}
		}
	})
	refusedTokenChecks(t, dev, o)
}

// embeddingGradBuffers makes the buffers of one embedding_grad call from
// its inputs (dx, tokens, and the initial dwte and dwpe, which it adds
// into).
func embeddingGradBuffers(inputs []oracle.Input) [][]byte {
	dx := make([]byte, 2*len(inputs[0].F16))
	for i, h := range inputs[0].F16 {
		binary.LittleEndian.PutUint16(dx[2*i:], h)
	}
	buffers := [][]byte{dx, tokenBytes(inputs[1].I32)}
	for _, in := range inputs[2:] {
		b := make([]byte, 4*len(in.F32))
		for i, v := range in.F32 {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		buffers = append(buffers, b)
	}
	return buffers
}

func tokenBytes(tokens []int32) []byte {
	b := make([]byte, 4*len(tokens))
	for i, id := range tokens {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(id))
	}
	return b
}

// refusedTokenChecks runs o (embedding or embedding_grad) on token ids
// outside [0, V): the server must refuse each call with INVALID_ARGUMENT
// naming the first bad position, its value and the valid range, and then
// run the same call with the bad ids replaced.
func refusedTokenChecks(t *testing.T, dev verify.Device, o *op.Op) {
	ctx := context.Background()
	t.Run("a token id outside the vocabulary", func(t *testing.T) {
		for _, tt := range []struct {
			shape string
			bad   map[int]int32 // position: id, over ids drawn in range
			want  string
		}{
			{"2x3x4x5", map[int]int32{2: 5}, "tokens[2] = 5 is outside its domain: a token id in [0, V) (B=2, T=3, C=4, V=5)"},
			{"2x3x4x5", map[int]int32{4: -1, 5: 7}, "tokens[4] = -1 is outside its domain: a token id in [0, V) (B=2, T=3, C=4, V=5)"},
			{"1x3x8x4", map[int]int32{2: 4}, "tokens[2] = 4 is outside its domain: a token id in [0, V)"},
			{"3x1000x8x10", map[int]int32{2600: -2147483648, 2500: 10, 2999: 11}, "tokens[2500] = 10 is outside its domain: a token id in [0, V)"},
		} {
			s, err := o.ParseShape(tt.shape)
			if err != nil {
				t.Fatal(err)
			}
			inputs, err := oracle.Generate(o, s, oracle.Integer, 1)
			if err != nil {
				t.Fatal(err)
			}
			tokens := 0
			if o == op.EmbeddingGrad {
				tokens = 1
			}
			valid := inputs[tokens].I32
			inputs[tokens].I32 = append([]int32(nil), valid...)
			for p, id := range tt.bad {
				inputs[tokens].I32[p] = id
			}
			_, err = dev.RunOp(ctx, o, s, embeddingBuffers(o, s, inputs))
			var se *kserver.ServerError
			if !errors.As(err, &se) || se.StatusName != "INVALID_ARGUMENT" || !strings.Contains(err.Error(), tt.want) ||
				!strings.Contains(err.Error(), "fix the tokens") {
				t.Errorf("%s %s, bad ids %v: error %v, want INVALID_ARGUMENT containing %q and the fix", o.Name, tt.shape, tt.bad, err, tt.want)
			} else {
				t.Logf("%v", err)
			}
			// The server serves on: the same call with valid ids runs.
			inputs[tokens].I32 = valid
			if _, err := dev.RunOp(ctx, o, s, embeddingBuffers(o, s, inputs)); err != nil {
				t.Errorf("%s %s: a valid call after the refused one failed: %v", o.Name, tt.shape, err)
			}
		}
	})
}

// embeddingBuffers makes the buffers of one embedding or embedding_grad
// call from its inputs, embedding's output x poisoned.
func embeddingBuffers(o *op.Op, s op.Shape, inputs []oracle.Input) [][]byte {
	if o == op.EmbeddingGrad {
		return embeddingGradBuffers(inputs)
	}
	buffers := [][]byte{tokenBytes(inputs[0].I32)}
	for _, in := range inputs[1:] {
		b := make([]byte, 2*len(in.F16))
		for i, h := range in.F16 {
			binary.LittleEndian.PutUint16(b[2*i:], h)
		}
		buffers = append(buffers, b)
	}
	x, _ := o.Operand("x")
	out := make([]byte, s.Bytes(x))
	verify.Poison(op.F16, out)
	return append(buffers, out)
}

// Mutation is a planted defect: in source File, the text Old (which must
// occur exactly once) becomes New. The mutant must be reported incorrect
// for Op on Shapes (every distribution). Setup, when set, are edits made
// first, each as Old and New are (once), of the same file or of the one an
// Edit names, that put the defect on the path the call takes: a kernel
// variant switched on.
type Mutation struct {
	Name     string
	File     string
	Old, New string
	Op       string
	Shapes   []string
	Setup    []Edit
}

// Edit is a replacement of text that occurs exactly once, in File when
// set, else in the Mutation's File.
type Edit struct{ Old, New, File string }

// Planted checks that the verifier catches each defect: open builds a
// device from sources edited by the defect (Plant), as vkern.Open does
// with Options{EditSources: edit, QuickBuild: true} (edit is nil for the
// unmutated sources, which Planted opens first), and Run must find its
// op incorrect there. Each defect is a parallel subtest named for it.
// Declared ops are planted in as built-in ones are: a Mutation's File is
// the path the kernel file was declared by.
func Planted(t *testing.T, open func(t *testing.T, edit func(files map[string][]byte) error) verify.Device, defects []Mutation) {
	t.Helper()
	// The unmutated server first, before the mutants build at once: its
	// units' objects go to the build cache's object cache, so each mutant
	// compiles only the unit its defect edits. (Not a subtest, which a -run
	// pattern naming defects would leave out.)
	open(t, nil)
	for _, m := range defects {
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			m.Run(t, open(t, m.Plant()))
		})
	}
}

// Run checks that dev, built with m planted, is caught: the verdict over
// m's cases must be incorrect.
func (m Mutation) Run(t *testing.T, dev verify.Device) {
	t.Helper()
	o, err := op.Lookup(m.Op)
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range m.Shapes {
		if _, err := o.ParseShape(spec); err != nil {
			t.Fatal(err)
		}
	}
	cases, err := verify.Plan{Ops: []*op.Op{o}, Seed: 1, Shapes: m.Shapes}.Cases()
	if err != nil {
		t.Fatal(err)
	}
	res, err := verify.Run(context.Background(), dev, cases, Options(t, dev))
	if err != nil {
		t.Fatal(err)
	}
	caught := 0
	for _, r := range res.Cases {
		if r.Verdict == verify.Incorrect {
			caught++
			if caught == 1 {
				t.Logf("caught by %s: %.240s", r.Case, r.Reason)
			}
		}
	}
	if res.Verdict != verify.Incorrect {
		t.Errorf("planted defect %q in %s: verdict %s over %d cases, want incorrect", m.Name, m.Op, res.Verdict, len(res.Cases))
	} else {
		t.Logf("%d of %d cases caught it", caught, len(res.Cases))
	}
}
