package verify

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// goKernels is a Device whose kernels are plain Go binary32 code, written
// independently of the oracle. A mutate hook plants a defect, so the tests
// can show which defects the verifier catches without a C++ compiler. The
// C++ kernels get the same treatment through source mutation in package
// vkern's tests. in holds the inputs as float32 (labels too: the tests'
// labels are small integers); out holds the outputs one after the other
// (cross_entropy: R losses, then the R×V gradient).
type goKernels struct {
	mutate func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool)
	round  func(float32) uint16 // f16 outputs; nil: round to nearest, ties to even
	err    error
}

func (g goKernels) RunOp(ctx context.Context, o *op.Op, s op.Shape, buffers [][]byte) (time.Duration, error) {
	if g.err != nil {
		return 0, g.err
	}
	if !slices.Contains(goOps, o) {
		return 0, fmt.Errorf("goKernels has no %s", o.Name)
	}
	// The buffers of the inputs (an operand the op adds into among them)
	// and of the outputs, in the order of o.Inputs() and o.Outputs().
	var inBuf, outBuf []int
	for k, p := range o.Operands {
		if p.Reads() {
			inBuf = append(inBuf, k)
		}
		if p.Writes() {
			outBuf = append(outBuf, k)
		}
	}
	in := make([][]float32, len(o.Inputs()))
	for i, p := range o.Inputs() {
		in[i] = make([]float32, s.Elements(p))
		b := buffers[inBuf[i]]
		for j := range in[i] {
			switch p.DType {
			case op.I32:
				in[i][j] = float32(int32(binary.LittleEndian.Uint32(b[4*j:])))
			case op.F32:
				in[i][j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
			default:
				in[i][j] = f16.ToFloat32(binary.LittleEndian.Uint16(b[2*j:]))
			}
		}
	}
	var n int64
	for _, p := range o.Outputs() {
		n += s.Elements(p)
	}
	out := make([]float32, n)
	write := make([]bool, n)
	for i := range write {
		write[i] = true
	}
	goKernel(o, s, in, out)
	if g.mutate != nil {
		g.mutate(o, s, in, out, write)
	}
	at := 0
	for k, p := range o.Outputs() {
		dst := buffers[outBuf[k]]
		for i := 0; i < int(s.Elements(p)); i, at = i+1, at+1 {
			if !write[at] {
				continue
			}
			switch {
			case p.DType == op.F32:
				binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(out[at]))
			case g.round != nil:
				binary.LittleEndian.PutUint16(dst[2*i:], g.round(out[at]))
			default:
				binary.LittleEndian.PutUint16(dst[2*i:], f16.FromFloat32(out[at]))
			}
		}
	}
	return time.Microsecond, nil
}

// goGELU and goGELUGrad are GPT-2's tanh GELU and its derivative in
// float32, tanh rounded from float64's.
func goGELU(x float32) float32 {
	t := float32(0.7978845608) * (x + float32(0.044715)*x*x*x)
	return 0.5 * x * (1 + float32(math.Tanh(float64(t))))
}

func goGELUGrad(x float32) float32 {
	T := float32(math.Tanh(float64(float32(0.7978845608) * (x + float32(0.044715)*x*x*x))))
	return 0.5*(1+T) + 0.5*x*(1-T*T)*float32(0.7978845608)*(1+3*float32(0.044715)*x*x)
}

func goKernel(o *op.Op, s op.Shape, in [][]float32, out []float32) {
	switch o {
	case op.Linear:
		m, n, k := int(s.Dims[0]), int(s.Dims[1]), int(s.Dims[2])
		bias, gelu, residual := s.Int("bias") == 1, s.Int("gelu") == 1, s.Int("residual") == 1
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var acc float32
				for t := 0; t < k; t++ {
					acc += in[0][i*k+t] * in[1][t*n+j]
				}
				if bias {
					acc += in[2][j]
				}
				if residual {
					acc += in[3][i*n+j]
				}
				if gelu { // pre, the output after y
					out[m*n+i*n+j], acc = acc, goGELU(acc)
				}
				out[i*n+j] = acc
			}
		}
	case op.LinearGradW:
		m, n, k := int(s.Dims[0]), int(s.Dims[1]), int(s.Dims[2])
		accumulate := s.Int("accumulate") == 1
		for i := 0; i < k; i++ {
			for j := 0; j < n; j++ {
				var acc float32
				for t := 0; t < m; t++ {
					acc += in[0][t*k+i] * in[1][t*n+j]
				}
				if accumulate {
					acc = in[2][i*n+j] + acc
				}
				out[i*n+j] = acc
			}
		}
		if s.Int("bias") == 1 { // db after dW: bias_grad's blocks of rows
			for j := 0; j < n; j++ {
				var total float32
				for b0 := 0; b0 < m; b0 += oracle.BiasGradRowBlock {
					var block float32
					for t := b0; t < min(m, b0+oracle.BiasGradRowBlock); t++ {
						block += in[1][t*n+j]
					}
					total += block
				}
				out[k*n+j] = in[3][j] + total
			}
		}
	case op.Gemm, op.GemmGradA, op.GemmGradB, op.LinearGradX:
		m, n, k := int(s.Dims[0]), int(s.Dims[1]), int(s.Dims[2])
		// Every op as rows×cols outputs, each a sum of length l of x(i,t)·y(t,j).
		var rows, cols, l int
		var x, y func(i, t int) float32
		switch o {
		case op.Gemm:
			rows, cols, l = m, n, k
			x = func(i, t int) float32 { return in[0][i*k+t] }
			y = func(t, j int) float32 { return in[1][t*n+j] }
		case op.GemmGradA, op.LinearGradX:
			rows, cols, l = m, k, n
			x = func(i, t int) float32 { return in[0][i*n+t] }
			y = func(t, j int) float32 { return in[1][j*n+t] }
		case op.GemmGradB:
			rows, cols, l = k, n, m
			x = func(i, t int) float32 { return in[0][t*k+i] }
			y = func(t, j int) float32 { return in[1][t*n+j] }
		}
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				var acc float32
				for t := 0; t < l; t++ {
					acc += x(i, t) * y(t, j)
				}
				if o == op.LinearGradX && s.Int("gelu") == 1 {
					acc *= goGELUGrad(in[2][i*cols+j])
				}
				out[i*cols+j] = acc
			}
		}
	case op.Softmax:
		r, c := int(s.Dims[0]), int(s.Dims[1])
		for i := 0; i < r; i++ {
			row := in[0][i*c : (i+1)*c]
			m := float32(math.Inf(-1))
			for _, v := range row {
				if v > m || v != v {
					m = v
				}
			}
			var sum float32
			for _, v := range row {
				sum += float32(math.Exp(float64(v - m)))
			}
			for j, v := range row {
				out[i*c+j] = float32(math.Exp(float64(v-m))) / sum
			}
		}
	case op.SoftmaxGrad:
		r, c := int(s.Dims[0]), int(s.Dims[1])
		for i := 0; i < r; i++ {
			dy, y := in[0][i*c:(i+1)*c], in[1][i*c:(i+1)*c]
			var dot float32
			for j := range dy {
				dot += dy[j] * y[j]
			}
			for j := range dy {
				out[i*c+j] = y[j] * (dy[j] - dot)
			}
		}
	case op.CrossEntropy:
		crossEntropyGo(s, in[0], in[1], out, true, false)
	}
}

// crossEntropyGo is cross_entropy in binary32: loss then gradient in out.
// countIgnored and skipMax plant two of the defects below.
func crossEntropyGo(s op.Shape, x, labels, out []float32, subtractMax, countIgnored bool) {
	r, c := int(s.Dims[0]), int(s.Dims[1])
	ignore := s.Int(op.IgnoreIndex)
	n := 0
	for _, l := range labels {
		if int64(l) != ignore || countIgnored {
			n++
		}
	}
	scale := float32(s.Value("grad_scale") / float64(n))
	loss, grad := out[:r], out[r:]
	for i := 0; i < r; i++ {
		label := int(labels[i])
		if int64(label) == ignore {
			loss[i] = 0
			for j := 0; j < c; j++ {
				grad[i*c+j] = 0
			}
			continue
		}
		row := x[i*c : (i+1)*c]
		m := float32(math.Inf(-1))
		for _, v := range row {
			if v > m || v != v {
				m = v
			}
		}
		if !subtractMax {
			m = 0
		}
		var sum float32
		for _, v := range row {
			sum += float32(math.Exp(float64(v - m)))
		}
		loss[i] = (m - row[label]) + float32(math.Log(float64(sum)))
		for j, v := range row {
			y := float32(math.Exp(float64(v-m))) / sum
			if j == label {
				y--
			}
			grad[i*c+j] = y * scale
		}
	}
}

// goOps are the ops goKernels implements: the six of the first release, and
// the matmul family's members with an epilogue (linear's bias and GELU,
// linear_grad_w's accumulation, linear_grad_x's GELU gradient), whose
// sampled and sliced checks verify must get right. The others are shown by
// the C++ kernels' conformance suite (kerneltest).
var goOps = []*op.Op{op.Gemm, op.GemmGradA, op.GemmGradB, op.Softmax, op.SoftmaxGrad, op.CrossEntropy, op.Linear, op.LinearGradW, op.LinearGradX}

func quickPlan(t *testing.T) []Case {
	t.Helper()
	cases, err := Plan{Ops: goOps, Seed: 1, Quick: true}.Cases()
	if err != nil {
		t.Fatal(err)
	}
	return cases
}

func TestCorrectGoKernelsPassEveryQuickCase(t *testing.T) {
	res := mustRun(t, goKernels{}, quickPlan(t))
	for _, r := range res.Cases {
		if r.Verdict != Passed {
			t.Errorf("%s: %s: %s", r.Case, r.Verdict, r.Reason)
		}
	}
	if res.Verdict != Passed {
		t.Fatalf("overall verdict %s", res.Verdict)
	}
}

// A planted defect and the ops it applies to.
type planted struct {
	name   string
	ops    []*op.Op
	shapes []string // shapes on which the defect is well defined; nil: quick defaults
	mutate func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool)
	round  func(float32) uint16 // a wrong f16 rounding, or nil
}

// towardZero16 rounds v to f16 toward zero.
func towardZero16(v float32) uint16 {
	h := f16.FromFloat32(v)
	if h&0x7fff != 0 && !math.IsNaN(float64(v)) && math.Abs(f16.ToFloat64(h)) > math.Abs(float64(v)) {
		h-- // one step down in magnitude, either sign
	}
	return h
}

// halfAway16 rounds v to f16 to nearest, ties away from zero: it differs
// from ties-to-even only on exact ties.
func halfAway16(v float32) uint16 {
	h := f16.FromFloat32(v)
	if h&0x7fff >= 0x7bff || math.IsNaN(float64(v)) {
		return h
	}
	below, above := math.Abs(f16.ToFloat64(h)), math.Abs(f16.ToFloat64(h+1))
	if x := math.Abs(float64(v)); x > below && x-below == above-x {
		return h + 1 // the tie went to the even neighbour below
	}
	return h
}

// f16Step rounds v to f16 and back: an intermediate stored as f16.
func f16Step(v float32) float32 { return f16.ToFloat32(f16.FromFloat32(v)) }

var plantedDefects = []planted{
	{"the first output element is never written", []*op.Op{op.Gemm, op.GemmGradA, op.GemmGradB, op.Softmax, op.SoftmaxGrad}, nil,
		func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) { write[0] = false }, nil},
	{"row 1 holds row 0's results", []*op.Op{op.Gemm, op.Softmax}, []string{"17x31x129", "7x4099"},
		func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
			cols := int(s.Cols(o.Outputs()[0]))
			copy(out[cols:2*cols], out[:cols])
		}, nil},
	{"the f32 output is rounded through f16", []*op.Op{op.Gemm}, nil,
		func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
			for i, v := range out {
				out[i] = f16.ToFloat32(f16.FromFloat32(v))
			}
		}, nil},
	{"the last term of each dot product is dropped", []*op.Op{op.Gemm}, []string{"17x31x129", "64x48x80"},
		func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
			m, n, k := int(s.Dims[0]), int(s.Dims[1]), int(s.Dims[2])
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					out[i*n+j] -= in[0][i*k+k-1] * in[1][(k-1)*n+j]
				}
			}
		}, nil},
	{"softmax without the max subtraction", []*op.Op{op.Softmax}, nil,
		func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
			r, c := int(s.Dims[0]), int(s.Dims[1])
			for i := 0; i < r; i++ {
				var sum float32
				for _, v := range in[0][i*c : (i+1)*c] {
					sum += float32(math.Exp(float64(v)))
				}
				for j, v := range in[0][i*c : (i+1)*c] {
					out[i*c+j] = float32(math.Exp(float64(v))) / sum
				}
			}
		}, nil},
	{"an error of one part in 2⁹ on every element", []*op.Op{op.Gemm, op.Softmax, op.SoftmaxGrad}, nil,
		func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
			for i := range out {
				out[i] *= 1 + 0x1p-9
			}
		}, nil},
	{"cross_entropy without the mean scale", []*op.Op{op.CrossEntropy}, nil,
		func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
			crossEntropyGo(s, in[0], in[1], out, true, false)
			ignore := s.Int(op.IgnoreIndex)
			n := 0
			for _, l := range in[1] {
				if int64(l) != ignore {
					n++
				}
			}
			for i := int(s.Dims[0]); i < len(out); i++ {
				out[i] *= float32(n)
			}
		}, nil},
	{"cross_entropy with the gradient's sign flipped", []*op.Op{op.CrossEntropy}, nil,
		func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
			for i := int(s.Dims[0]); i < len(out); i++ {
				out[i] = -out[i]
			}
		}, nil},
	{"cross_entropy with each label one class too far", []*op.Op{op.CrossEntropy}, []string{"7x4099", "64x1000:ignore_index=-100"},
		func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
			labels := append([]float32(nil), in[1]...)
			ignore := s.Int(op.IgnoreIndex)
			for i, l := range labels {
				if int64(l) != ignore {
					labels[i] = float32((int(l) + 1) % int(s.Dims[1]))
				}
			}
			crossEntropyGo(s, in[0], labels, out, true, false)
		}, nil},
	{"cross_entropy counting ignored rows in n", []*op.Op{op.CrossEntropy}, []string{"64x1000:ignore_index=-100"},
		func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
			crossEntropyGo(s, in[0], in[1], out, true, true)
		}, nil},
	{"cross_entropy ignoring no row", []*op.Op{op.CrossEntropy}, []string{"12x300:ignore_index=0"},
		func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
			unset := s
			unset.Settings = nil
			crossEntropyGo(unset, in[0], in[1], out, true, false)
		}, nil},
	{"cross_entropy without the max subtraction", []*op.Op{op.CrossEntropy}, []string{"7x4099"},
		func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
			crossEntropyGo(s, in[0], in[1], out, false, false)
		}, nil},
	// Roundings of the f16 outputs: ties away from zero differs from the
	// contract only on exact ties (the rounding distribution's); toward
	// zero everywhere; and two double roundings through an f16
	// intermediate.
	{"f16 outputs rounded to nearest with ties away from zero", []*op.Op{op.GemmGradA, op.GemmGradB, op.SoftmaxGrad}, nil, nil, halfAway16},
	{"f16 outputs rounded toward zero", []*op.Op{op.GemmGradA, op.GemmGradB, op.Softmax, op.SoftmaxGrad, op.CrossEntropy}, nil, nil, towardZero16},
	{"softmax_grad with dY − D stored as f16 before the product", []*op.Op{op.SoftmaxGrad}, nil,
		func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
			r, c := int(s.Dims[0]), int(s.Dims[1])
			for i := 0; i < r; i++ {
				dy, y := in[0][i*c:(i+1)*c], in[1][i*c:(i+1)*c]
				var dot float32
				for j := range dy {
					dot += dy[j] * y[j]
				}
				for j := range dy {
					out[i*c+j] = y[j] * f16Step(dy[j]-dot)
				}
			}
		}, nil},
	{"gemm_grad_a with each dot product's halves rounded to f16 before they are added", []*op.Op{op.GemmGradA}, nil,
		func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
			m, n, k := int(s.Dims[0]), int(s.Dims[1]), int(s.Dims[2])
			for i := 0; i < m; i++ {
				for j := 0; j < k; j++ {
					var half [2]float32
					for t := 0; t < n; t++ {
						half[2*t/n] += in[0][i*n+t] * in[1][j*n+t]
					}
					out[i*k+j] = f16Step(half[0]) + f16Step(half[1])
				}
			}
		}, nil},
}

func TestPlantedDefectsInGoKernelsAreIncorrect(t *testing.T) {
	for _, p := range plantedDefects {
		for _, o := range p.ops {
			t.Run(p.name+" in "+o.Name, func(t *testing.T) {
				plan := Plan{Ops: []*op.Op{o}, Seed: 7, Quick: true}
				for _, spec := range p.shapes {
					if _, err := o.ParseShape(spec); err == nil {
						plan.Shapes = append(plan.Shapes, spec)
					}
				}
				cases, err := plan.Cases()
				if err != nil {
					t.Fatal(err)
				}
				res := mustRun(t, goKernels{mutate: p.mutate, round: p.round}, cases)
				if res.Verdict != Incorrect {
					t.Fatalf("verdict %s, want incorrect", res.Verdict)
				}
				for _, r := range res.Cases {
					if r.Verdict == Incorrect {
						t.Logf("caught by %s: %.200s", r.Case, r.Reason)
						return
					}
				}
			})
		}
	}
}

func TestADeviceErrorIsFailedNotIncorrect(t *testing.T) {
	res := mustRun(t, goKernels{err: errors.New("server died")}, quickPlan(t)[:2])
	if res.Verdict != Failed || !strings.Contains(res.Cases[0].Reason, "server died") {
		t.Fatalf("verdict %s, reason %q", res.Verdict, res.Cases[0].Reason)
	}
}

func TestNothingCheckedIsNotAPass(t *testing.T) {
	if v := mustRun(t, goKernels{}, nil).Verdict; v != Failed {
		t.Fatalf("empty run verdict %s, want failed", v)
	}
}

func TestTheWorstVerdictWins(t *testing.T) {
	tests := []struct{ a, b, want Verdict }{
		{Passed, Passed, Passed},
		{Passed, NotSupported, NotSupported},
		{NotSupported, Failed, Failed},
		{Failed, Incorrect, Incorrect},
		{Incorrect, Passed, Incorrect},
	}
	for _, tt := range tests {
		if got := Worse(tt.a, tt.b); got != tt.want {
			t.Errorf("Worse(%s, %s) = %s, want %s", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestWritesPastTheOutputAndIntoInputsAreCaught(t *testing.T) {
	o, _ := op.Lookup("softmax")
	s, _ := o.ParseShape("3x5")
	c := Case{Op: o, Shape: s, Dist: oracle.Normal, Seed: 1}
	for name, dev := range map[string]Device{
		"past the output": deviceFunc(func(buffers [][]byte) {
			out := buffers[len(buffers)-1]
			out[len(out)-1] = 0
		}),
		"into an input": deviceFunc(func(buffers [][]byte) { buffers[0][0] ^= 1 }),
	} {
		t.Run(name, func(t *testing.T) {
			res := mustRun(t, dev, []Case{c})
			if res.Verdict != Incorrect {
				t.Fatalf("verdict %s, want incorrect", res.Verdict)
			}
		})
	}
}

// deviceFunc runs the correct Go kernels, then lets damage touch the raw buffers.
type deviceFunc func(buffers [][]byte)

func (d deviceFunc) RunOp(ctx context.Context, o *op.Op, s op.Shape, buffers [][]byte) (time.Duration, error) {
	t, err := goKernels{}.RunOp(ctx, o, s, buffers)
	d(buffers)
	return t, err
}

func TestPlanRejectsAShapeNoChosenOpAccepts(t *testing.T) {
	o, _ := op.Lookup("softmax")
	_, err := Plan{Ops: []*op.Op{o}, Shapes: []string{"2x2x2"}}.Cases()
	if err == nil || !strings.Contains(err.Error(), "2x2x2") {
		t.Fatalf("error = %v", err)
	}
}

func TestGenerateIsDeterministic(t *testing.T) {
	for _, name := range []string{"gemm", "cross_entropy"} {
		o, _ := op.Lookup(name)
		s, _ := o.ParseShape("5x6x7")
		if o == op.CrossEntropy {
			s, _ = o.ParseShape("9x6:ignore_index=-100")
		}
		for _, d := range oracle.Dists() {
			a, b := mustGenerate(t, o, s, d, 3), mustGenerate(t, o, s, d, 3)
			for i := range a {
				if !bytes.Equal(inputBytes(a[i]), inputBytes(b[i])) {
					t.Fatalf("%s %s: input %d differs between two draws", name, d, i)
				}
			}
		}
	}
}

func TestCrossEntropyLabelsCoverTheEdgesAndTheIgnoreIndex(t *testing.T) {
	o, _ := op.Lookup("cross_entropy")
	s, _ := o.ParseShape("16x50:ignore_index=-100")
	labels := mustGenerate(t, o, s, oracle.Uniform, 1)[1].I32
	want := map[int]int32{0: 0, 2: -100, 3: 0, 5: 49, 6: -100, 10: -100, 11: 0, 13: 49, 14: -100, 15: 49}
	for r, l := range want {
		if labels[r] != l {
			t.Errorf("labels[%d] = %d, want %d", r, labels[r], l)
		}
	}
	for r, l := range labels {
		if l != -100 && (l < 0 || l >= 50) {
			t.Errorf("labels[%d] = %d is outside [0, 50)", r, l)
		}
	}
}

// mustRun runs cases on dev with no device description (bounds for any
// summation order) and fails the test if Run refuses them.
func mustRun(t *testing.T, dev Device, cases []Case) Result {
	t.Helper()
	res, err := Run(context.Background(), dev, cases, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func mustGenerate(t *testing.T, o *op.Op, s op.Shape, d oracle.Dist, seed uint64) []oracle.Input {
	t.Helper()
	in, err := oracle.Generate(o, s, d, seed)
	if err != nil {
		t.Fatal(err)
	}
	return in
}
