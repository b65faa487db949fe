package gpt

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/internal/le"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
	"github.com/vkern/vkern/verify"
)

// The live check (TRAINING.md, level 3): a real training step whose calls
// run one at a time, each one's inputs read from the device before it runs
// and its outputs after, and compared with the float64 reference of those
// inputs under the op's bound (package verify, Check). The step computes
// exactly what an unchecked one does (the same calls on the same buffers,
// in the same order), only slower. Large calls are sampled; the report
// says how.

// LiveReport is what a checked step looked at.
type LiveReport struct {
	Step     int64
	Calls    int   // calls checked
	Elements int64 // output elements of those calls
	Checked  int64 // of them compared with the reference
	// Worst is the largest error over bound of any element checked (≤ 1
	// passes).
	Worst float64
	// Sampled lists the calls checked by a sample, and how.
	Sampled []string
}

// Summary is the report in a line.
func (r *LiveReport) Summary() string {
	s := fmt.Sprintf("%d calls, %d of %d output elements checked against the float64 reference, worst error %.3g of its bound",
		r.Calls, r.Checked, r.Elements, r.Worst)
	if len(r.Sampled) > 0 {
		s += fmt.Sprintf("; %d calls sampled (%s)", len(r.Sampled), strings.Join(r.Sampled, "; "))
	}
	return s
}

// StepVerified takes the run's next step as Step does, checking every
// call. A wrong element ends it with an error that names the step, the
// call, the op and the element.
func (tr *Trainer) StepVerified(ctx context.Context) (StepResult, *LiveReport, error) {
	if tr.Parallel != nil {
		return StepResult{}, nil, fmt.Errorf("gpt: step %d: the live check runs one device's calls one at a time, and a data-parallel step's collectives cannot be checked that way; verify on one GPU (without --gpus)", tr.State.Step)
	}
	m := tr.Model
	arith, err := m.dev.Arithmetic(ctx)
	if err != nil {
		return StepResult{}, nil, err
	}
	rep := &LiveReport{Step: tr.State.Step}
	in, tg := tr.Batch(tr.State.Step)
	exec := func(ctx context.Context, p *program) error {
		for i, c := range p.calls {
			if err := m.checkCall(ctx, c, arith, rep, uint64(rep.Step)<<20|uint64(rep.Calls)); err != nil {
				return fmt.Errorf("call %d of %d of the program, %s %s: %w", i, len(p.calls), c.Op.Name, c.Shape, err)
			}
		}
		return nil
	}
	res, err := m.step(ctx, tr.Hyper, &tr.State, in, tg, exec)
	return res, rep, err
}

// checkCall runs one call alone and checks it.
func (m *Model) checkCall(ctx context.Context, c vkern.Call, arith oracle.Arithmetic, rep *LiveReport, seed uint64) error {
	o, s := c.Op, c.Shape
	read := func(i int) ([]byte, error) {
		b := make([]byte, s.Bytes(o.Operands[i]))
		if len(b) == 0 || c.Buffers[i] == nil {
			return b, nil
		}
		return b, c.Buffers[i].Read(ctx, 0, b)
	}
	// Inputs before, outputs after; an input the op only reads must be
	// unchanged, unless an output shares its buffer (add in place).
	var inputs []oracle.Input
	before := map[int][]byte{}
	for i, p := range o.Operands {
		if !p.Reads() {
			continue
		}
		b, err := read(i)
		if err != nil {
			return err
		}
		before[i] = b
		inputs = append(inputs, decode(p.DType, b))
	}
	if _, err := m.dev.RunBatch(ctx, []vkern.Call{c}); err != nil {
		return err
	}
	var outs [][]byte
	for i, p := range o.Operands {
		if p.Writes() {
			b, err := read(i)
			if err != nil {
				return err
			}
			outs = append(outs, b)
			continue
		}
		if aliased(c, i) {
			continue
		}
		b, err := read(i)
		if err != nil {
			return err
		}
		if string(b) != string(before[i]) {
			return fmt.Errorf("input %s was changed by the kernel", p.Name)
		}
	}
	got, err := verify.Check(ctx, o, s, inputs, outs, arith, verify.CheckOptions{Seed: seed})
	if err != nil {
		return err
	}
	st := got.Stats
	rep.Calls++
	rep.Elements += st.Elements
	rep.Checked += st.Checked
	rep.Worst = math.Max(rep.Worst, st.MaxErrorOverBound)
	if got.Sample != "" {
		rep.Sampled = append(rep.Sampled, fmt.Sprintf("%s %s: %s", o.Name, s, got.Sample))
	}
	if st.Wrong > 0 {
		return fmt.Errorf("%d of %d elements checked are wrong; first: %s", st.Wrong, st.Checked, st.FirstWrong)
	}
	return nil
}

// aliased says whether operand i's buffer is also one the call writes.
func aliased(c vkern.Call, i int) bool {
	for j, p := range c.Op.Operands {
		if j != i && p.Writes() && c.Buffers[j] == c.Buffers[i] {
			return true
		}
	}
	return false
}

// decode reads little-endian elements of dtype.
func decode(dtype op.DType, b []byte) oracle.Input {
	switch dtype {
	case op.F16:
		v := make([]uint16, len(b)/2)
		le.Uint16s(v, b)
		return oracle.Input{F16: v}
	case op.F32:
		v := make([]float32, len(b)/4)
		le.Float32s(v, b)
		return oracle.Input{F32: v}
	}
	v := make([]int32, len(b)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return oracle.Input{I32: v}
}
