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
	"testing"

	"github.com/vkern/vkern/op"
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
	shapes := verify.DefaultShapes(o, true)
	for _, spec := range extra {
		s, err := o.ParseShape(spec)
		if err != nil {
			t.Fatal(err)
		}
		shapes = append(shapes, s)
	}
	cases, err := verify.Plan{Ops: []*op.Op{o}, Shapes: shapes, Seed: 1, Trials: 2}.Cases()
	if err != nil {
		t.Fatal(err)
	}
	res := verify.Run(context.Background(), dev, cases, nil)
	for _, r := range res.Cases {
		if r.Verdict != verify.Passed {
			t.Errorf("%s: %s: %s", r.Case, r.Verdict, r.Reason)
		}
	}
	if res.Verdict != verify.Passed {
		t.Errorf("%s: %d cases, verdict %s", name, len(res.Cases), res.Verdict)
	}
}

// Gemm checks gemm on dev.
func Gemm(t *testing.T, dev verify.Device) { Op(t, dev, "gemm", "65x33x257") }

// GemmGradA checks gemm_grad_a on dev.
func GemmGradA(t *testing.T, dev verify.Device) { Op(t, dev, "gemm_grad_a", "65x33x257") }

// GemmGradB checks gemm_grad_b on dev.
func GemmGradB(t *testing.T, dev verify.Device) { Op(t, dev, "gemm_grad_b", "65x33x257") }

// Softmax checks softmax on dev.
func Softmax(t *testing.T, dev verify.Device) { Op(t, dev, "softmax", "3x33000") }

// SoftmaxGrad checks softmax_grad on dev.
func SoftmaxGrad(t *testing.T, dev verify.Device) { Op(t, dev, "softmax_grad", "3x33000") }

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
	plan := verify.Plan{Ops: []*op.Op{o}, Seed: 1}
	for _, spec := range m.Shapes {
		s, err := o.ParseShape(spec)
		if err != nil {
			t.Fatal(err)
		}
		plan.Shapes = append(plan.Shapes, s)
	}
	cases, err := plan.Cases()
	if err != nil {
		t.Fatal(err)
	}
	res := verify.Run(context.Background(), dev, cases, nil)
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
