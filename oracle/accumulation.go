package oracle

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Arithmetic is what a backend states about how its kernels compute, so that
// a bound can follow the structure the kernels actually have rather than
// every structure they might have. A backend states it in its handshake
// (PROTOCOL.md, HELLO); the zero value claims nothing, and every bound then
// holds for any order of evaluation.
type Arithmetic struct {
	// Dot is how the GEMM kernels sum the products of each dot product.
	Dot Accumulation
}

// AccumulationKind names a summation structure; see Accumulation.
type AccumulationKind uint8

const (
	// AnyOrder claims nothing about the order, the rounding direction or
	// fused multi-term additions.
	AnyOrder AccumulationKind = iota
	// RNBlocked sums in ascending k within depth blocks of Block terms, each
	// block's sum starting from zero, every addition a binary32 addition
	// rounded to nearest; the block sums are then added in order (the cpu
	// backend's packed micro-kernel).
	RNBlocked
	// TCFused adds Block products at a time to the running binary32 sum in
	// one fused step, ascending in k from k = 0: the terms are aligned to the
	// largest keeping at least 24 + Guard bits (the rest truncated), summed
	// exactly, and the sum truncated to binary32 (tensor cores).
	TCFused
)

// Accumulation describes how a backend's kernels sum the exact products of
// each dot product. MatMul derives its bound from it.
type Accumulation struct {
	Kind  AccumulationKind
	Block int // RNBlocked: terms per depth block; TCFused: products per fused step
	Guard int // TCFused: extra alignment bits beyond binary32's 24
}

// chunk is the length of the stretches of the reduction after which MatMul
// looks at the partial sums: a TCFused step, or a divisor of an RNBlocked
// block. Keeping it at 16 or a divisor of the block keeps the structural
// terms cheap next to the products themselves.
func (a Accumulation) chunk() int {
	switch a.Kind {
	case TCFused:
		return a.Block
	case RNBlocked:
		for c := 16; c > 1; c /= 2 {
			if a.Block%c == 0 {
				return c
			}
		}
		return 1
	}
	return 16
}

// String writes the accumulation in the handshake's grammar: "any",
// "rn-blocked:256" or "tc-fused:16:2".
func (a Accumulation) String() string {
	switch a.Kind {
	case RNBlocked:
		return "rn-blocked:" + strconv.Itoa(a.Block)
	case TCFused:
		return fmt.Sprintf("tc-fused:%d:%d", a.Block, a.Guard)
	}
	return "any"
}

// Describe says in words what the accumulation claims, for reports.
func (a Accumulation) Describe() string {
	switch a.Kind {
	case RNBlocked:
		return fmt.Sprintf("each dot product summed in ascending order in blocks of %d terms from zero, binary32 round-to-nearest, then the block sums in order", a.Block)
	case TCFused:
		return fmt.Sprintf("each dot product summed %d products at a time in fused steps aligned with at least %d extra bits and truncated to binary32 (tensor cores)", a.Block, a.Guard)
	}
	return "no summation order claimed: the bound holds for any order, rounding direction and fused step"
}

// ParseAccumulation reads the handshake's dot_accumulation value. An empty
// string is AnyOrder (a server that states nothing).
func ParseAccumulation(s string) (Accumulation, error) {
	kind, args, _ := strings.Cut(s, ":")
	var params []int
	if args != "" {
		for _, field := range strings.Split(args, ":") {
			n, err := strconv.Atoi(field)
			if err != nil || n < 0 || n > 1<<20 {
				return Accumulation{}, fmt.Errorf("oracle: dot accumulation %q: parameter %q is not a whole number in [0, 2^20]", s, field)
			}
			params = append(params, n)
		}
	}
	want := func(n int, syntax string) error {
		if len(params) != n {
			return fmt.Errorf("oracle: dot accumulation %q: want %s", s, syntax)
		}
		return nil
	}
	switch kind {
	case "", "any":
		if err := want(0, `"any"`); err != nil {
			return Accumulation{}, err
		}
		return Accumulation{}, nil
	case "rn-blocked":
		if err := want(1, `"rn-blocked:B" with B ≥ 1 terms per block`); err != nil {
			return Accumulation{}, err
		}
		if params[0] < 1 {
			return Accumulation{}, fmt.Errorf("oracle: dot accumulation %q: a block needs at least 1 term", s)
		}
		return Accumulation{Kind: RNBlocked, Block: params[0]}, nil
	case "tc-fused":
		if err := want(2, `"tc-fused:B:G" with B ≥ 1 products per step and G extra alignment bits`); err != nil {
			return Accumulation{}, err
		}
		if params[0] < 1 || params[1] > 64 {
			return Accumulation{}, fmt.Errorf("oracle: dot accumulation %q: want at least 1 product per step and at most 64 extra bits", s)
		}
		return Accumulation{Kind: TCFused, Block: params[0], Guard: params[1]}, nil
	}
	return Accumulation{}, fmt.Errorf("oracle: unknown dot accumulation %q: want any, rn-blocked:B or tc-fused:B:G", s)
}

// u24 is the unit roundoff of binary32 round-to-nearest.
const u24 = 0x1p-24

// subnormalStep is the spacing of binary32 subnormals: a truncation to
// binary32 below 2⁻¹²⁶ loses less than it.
const subnormalStep = 0x1p-149

// dotTracker follows one dot product through the chunks of the reduction
// and gathers F, the structural part of its bound (see boundOf). MatMul keeps
// one per output column of a panel.
type dotTracker struct {
	f          float64 // the sum the model's bound is made of, before the correction for computed operands
	prev       float64 // the exact partial sum before the current chunk
	blockStart float64 // RNBlocked: the exact partial sum where the current block began
}

// chunkDone records a chunk of terms products, ending at reduction index
// end (exclusive), with exact partial sum after and the chunk's magnitude
// p = Σ|products|.
func (t *dotTracker) chunkDone(a Accumulation, terms, end int, after, p float64) {
	switch a.Kind {
	case RNBlocked:
		// Every addition in the chunk has a result within |a_j| + p of
		// zero, where a_j is the block's partial sum before the chunk.
		t.f += float64(terms) * (math.Abs(t.prev-t.blockStart) + p)
		if end%a.Block == 0 {
			if end > a.Block {
				t.f += math.Abs(after) // this block's sum added to the ones before
			}
			t.blockStart = after
		}
	case TCFused:
		// The step aligns ŝ and the chunk's products: the largest term is at
		// most max(|s_{j−1}|, p) (+ the error so far, see boundOf).
		t.f += float64(terms)*math.Ldexp(1+U32, -a.Guard)*math.Max(math.Abs(t.prev), p) + math.Abs(after)
	}
	t.prev = after
}

// boundOf is the bound on |ĉ − c| for a dot product of length l whose
// products have magnitudes summing to s, given its tracker t. It holds for
// the structure a describes, and never exceeds the AnyOrder bound, which is
// sound for every structure.
//
// The oracle's partial sums carry float64 error of at most γ₆₄(l)·s each;
// their effect on the structural terms is added, and the float64 sums that
// make up the bound are inflated by γ₆₄ of their length.
func (a Accumulation) boundOf(t *dotTracker, l int64, s float64) float64 {
	g64 := Gamma(l, U64)
	anyOrder := Gamma(2*l, U32) * s * (1 + 2*g64)
	steps := float64((l + int64(a.chunk()) - 1) / int64(a.chunk()))
	var structural float64
	switch a.Kind {
	case RNBlocked:
		// n additions, each within u₂₄ of its result, which is the exact
		// partial sum plus the error so far. Each partial sum in f is a
		// float64 difference of float64 sums, off by at most 4·γ₆₄(l)·s.
		blocks := (l + int64(a.Block) - 1) / int64(a.Block)
		n := float64(l + blocks)
		f := u24 * (t.f*(1+Gamma(int64(3*steps)+blocks+2, U64)) + 4*n*g64*s)
		if shrink := 1 - n*u24; shrink > 0 {
			structural = f / shrink
		} else {
			structural = math.Inf(1)
		}
		// Depth: a product passes through at most min(l, B) − 1 additions
		// in its block and blocks − 1 between blocks.
		depth := min(l, int64(a.Block)) - 1 + blocks - 1
		anyOrder = min(anyOrder, Gamma(depth, u24)*s*(1+2*g64))
	case TCFused:
		guard := math.Ldexp(1+U32, -a.Guard)
		weight := float64(l)*guard + steps
		f := U32*(t.f*(1+Gamma(int64(3*steps+2), U64))+2*weight*g64*s) + steps*subnormalStep
		if shrink := 1 - U32*weight; shrink > 0 {
			structural = f / shrink
		} else {
			structural = math.Inf(1)
		}
	default:
		return anyOrder
	}
	return min(structural, anyOrder)
}
