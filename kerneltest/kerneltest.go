// Package kerneltest is the conformance suite every backend runs: one call
// per op checks a device against the oracle on the quick shapes and every
// distribution, so the cpu, cuda and hip backends are held to the same cases.
//
// It also lists the planted defects (Mutations) that each backend's tests
// build into their kernels by editing the real sources, to show that the
// verifier reports them as incorrect.
package kerneltest

import (
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
	"softmax": {"3x33000"}, "softmax_grad": {"3x33000"},
	"cross_entropy": {"3x65536", "3x65537:ignore_index=-100"},
	"add":           {"1000003"}, "gelu": {"1000003"}, "gelu_grad": {"1000003"},
	// T past the GPU's 64-row tiles, a head of 12 (not a multiple of 8: 2-byte
	// loads), and one of 160 (past the tensor-core kernels' 128: exact rows).
	"attention": {"1x129x64x1", "2x70x36x3", "1x40x160x1"}, "attention_grad": {"1x129x64x1", "2x70x36x3", "1x40x160x1"},
}

// extraChecks are what an op is held to beyond vkern verify's cases:
// behaviour verify cannot show (a refused input). Calls that share buffers
// (add in place) need the device's own buffers, and are checked by each
// backend's test in package vkern.
var extraChecks = map[string]func(t *testing.T, dev verify.Device){
	"cross_entropy": crossEntropyChecks,
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
	t.Run("every row ignored", func(t *testing.T) {
		s, _ := o.ParseShape("5x40:ignore_index=-100")
		buffers := crossEntropyBuffers(s, []int32{-100, -100, -100, -100, -100})
		if _, err := dev.RunOp(ctx, o, s, buffers); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			if v := math.Float32frombits(binary.LittleEndian.Uint32(buffers[2][4*i:])); v != 0 {
				t.Errorf("loss[%d] = %v, want 0", i, v)
			}
		}
		for i := 0; i < 5*40; i++ {
			if v := f16.ToFloat64(binary.LittleEndian.Uint16(buffers[3][2*i:])); v != 0 {
				t.Fatalf("dLogits[%d,%d] = %v, want 0", i/40, i%40, v)
			}
		}
	})
	t.Run("a label outside the classes", func(t *testing.T) {
		for _, tt := range []struct {
			shape  string
			labels []int32
			want   string
		}{
			{"4x5", []int32{0, 4, 5, 1}, "labels[2] = 5 is outside its domain: a class index in [0, V), or the ignore_index (set ignore_index to the label that marks rows to skip) (R=4, V=5, ignore_index=unset, grad_scale=1)"},
			{"4x5", []int32{0, -100, 1, 1}, "labels[1] = -100 is outside its domain: a class index in [0, V), or the ignore_index (set ignore_index to the label that marks rows to skip) (R=4, V=5, ignore_index=unset, grad_scale=1)"},
			{"4x5:ignore_index=-100", []int32{-100, 3, -1, 7}, "labels[2] = -1 is outside its domain: a class index in [0, V), or the ignore_index (set ignore_index to the label that marks rows to skip) (R=4, V=5, ignore_index=-100, grad_scale=1)"},
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

// Mutation is a planted defect: in source File, the text Old (which must
// occur exactly once) becomes New. The mutant must be reported incorrect
// for Op on Shapes (every distribution).
type Mutation struct {
	Name     string
	File     string
	Old, New string
	Op       string
	Shapes   []string
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
