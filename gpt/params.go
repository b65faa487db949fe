package gpt

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
)

// tensor is one parameter: its Hugging Face GPT-2 name and shape, and where
// it lives in the parameter arenas.
type tensor struct {
	name string
	// rows × cols as Hugging Face stores it (cols 0 for a vector). The
	// Conv1D weights are in × out, which is linear's W (K × N).
	rows, cols int
	// arenaRows are the rows the tensor has in the arenas: rows, and for
	// wte the padded vocabulary Vp, its rows past V zero (Config.Vp).
	arenaRows int
	decay     bool    // AdamW's weight decay applies (matrices, as nanoGPT)
	std       float64 // initial values: normal(0, std), or fill when std is 0
	fill      float64
	offset    int64 // element offset in every arena, a multiple of align
}

// elements is the tensor's size as Hugging Face stores it.
func (t tensor) elements() int64 { return int64(t.rows) * int64(max(t.cols, 1)) }

// arenaElements is its size in the arenas: elements() and then, for wte,
// the padded rows' zeros.
func (t tensor) arenaElements() int64 { return int64(t.arenaRows) * int64(max(t.cols, 1)) }

func (t tensor) shape() []int64 {
	if t.cols == 0 {
		return []int64{int64(t.rows)}
	}
	return []int64{int64(t.rows), int64(t.cols)}
}

// align is the element alignment of every tensor in the arenas: 128
// elements are 512 bytes of f32 and 256 of f16, so each tensor's views in
// both start on vkern.ViewAlign.
const align = 128

func alignUp(n int64) int64 { return (n + align - 1) / align * align }

// block names the tensors of one transformer block by index into the
// layout's list.
type block struct {
	ln1w, ln1b, attnW, attnB, projW, projB, ln2w, ln2b, fcW, fcB, mlpW, mlpB int
}

// layout is every parameter, decayed matrices first, then the rest, so
// that each AdamW group is one contiguous range of the arenas.
type layout struct {
	tensors  []tensor
	byName   map[string]int
	wte, wpe int
	blocks   []block
	lnfW     int
	lnfB     int
	decayEnd int64 // elements [0, decayEnd) decay, [decayEnd, total) do not
	total    int64
}

// tensors lists c's parameters in layout order (offsets unset).
func (c Config) tensors() []tensor {
	const std = 0.02
	// GPT-2 scales the init of the projections into the residual stream by
	// 1/√(2·layers): each block adds two.
	projStd := std / math.Sqrt(2*float64(c.Layers))
	C := c.C
	var ts []tensor
	add := func(name string, rows, cols int, std, fill float64) {
		ts = append(ts, tensor{name: name, rows: rows, cols: cols, arenaRows: rows, decay: cols != 0, std: std, fill: fill})
	}
	add("transformer.wte.weight", c.V, C, std, 0)
	ts[0].arenaRows = c.Vp()
	add("transformer.wpe.weight", c.T, C, std, 0)
	for l := 0; l < c.Layers; l++ {
		h := fmt.Sprintf("transformer.h.%d.", l)
		add(h+"attn.c_attn.weight", C, 3*C, std, 0)
		add(h+"attn.c_proj.weight", C, C, projStd, 0)
		add(h+"mlp.c_fc.weight", C, 4*C, std, 0)
		add(h+"mlp.c_proj.weight", 4*C, C, projStd, 0)
	}
	for l := 0; l < c.Layers; l++ {
		h := fmt.Sprintf("transformer.h.%d.", l)
		add(h+"ln_1.weight", C, 0, 0, 1)
		add(h+"ln_1.bias", C, 0, 0, 0)
		add(h+"attn.c_attn.bias", 3*C, 0, 0, 0)
		add(h+"attn.c_proj.bias", C, 0, 0, 0)
		add(h+"ln_2.weight", C, 0, 0, 1)
		add(h+"ln_2.bias", C, 0, 0, 0)
		add(h+"mlp.c_fc.bias", 4*C, 0, 0, 0)
		add(h+"mlp.c_proj.bias", C, 0, 0, 0)
	}
	add("transformer.ln_f.weight", C, 0, 0, 1)
	add("transformer.ln_f.bias", C, 0, 0, 0)
	return ts
}

func newLayout(c Config) *layout {
	l := &layout{tensors: c.tensors(), byName: map[string]int{}}
	var off int64
	for i := range l.tensors {
		t := &l.tensors[i]
		if !t.decay && l.decayEnd == 0 {
			l.decayEnd = off
		}
		t.offset = off
		off = alignUp(off + t.arenaElements())
		l.byName[t.name] = i
	}
	l.total = off
	id := func(name string) int {
		i, ok := l.byName[name]
		if !ok {
			panic("gpt: layout has no " + name) // the list above names every one
		}
		return i
	}
	l.wte, l.wpe = id("transformer.wte.weight"), id("transformer.wpe.weight")
	l.lnfW, l.lnfB = id("transformer.ln_f.weight"), id("transformer.ln_f.bias")
	for b := 0; b < c.Layers; b++ {
		h := fmt.Sprintf("transformer.h.%d.", b)
		l.blocks = append(l.blocks, block{
			ln1w: id(h + "ln_1.weight"), ln1b: id(h + "ln_1.bias"),
			attnW: id(h + "attn.c_attn.weight"), attnB: id(h + "attn.c_attn.bias"),
			projW: id(h + "attn.c_proj.weight"), projB: id(h + "attn.c_proj.bias"),
			ln2w: id(h + "ln_2.weight"), ln2b: id(h + "ln_2.bias"),
			fcW: id(h + "mlp.c_fc.weight"), fcB: id(h + "mlp.c_fc.bias"),
			mlpW: id(h + "mlp.c_proj.weight"), mlpB: id(h + "mlp.c_proj.bias"),
		})
	}
	return l
}

// overwritten reports whether tensor i's gradient is written whole, not
// added to, by the first call of a step that touches it: the weights of
// the products (wte by the head's linear_grad_w, every block's four
// matrices by theirs), whose first micro-batch's linear_grad_w runs with
// accumulate 0 (program.go). The rest (wpe, the biases, the LayerNorms'
// parameters) are sums the step builds by adding into zeros.
func (l *layout) overwritten(i int) bool {
	if i == l.wte {
		return true
	}
	for _, b := range l.blocks {
		if i == b.attnW || i == b.projW || i == b.fcW || i == b.mlpW {
			return true
		}
	}
	return false
}

// cleared lists the element ranges [from, to) of the gradient arena that a
// step's program fills with zeros before its first micro-batch: all of it
// but the overwritten tensors, alignment padding included (no call writes
// padding, and global_norm and AdamW read it). Adjacent ranges are merged:
// for GPT-2's layouts it is wpe and the vectors, two fills.
func (l *layout) cleared() [][2]int64 {
	var out [][2]int64
	from := int64(0)
	keep := func(to int64) {
		if to <= from {
			return
		}
		if n := len(out); n > 0 && out[n-1][1] == from {
			out[n-1][1] = to
		} else {
			out = append(out, [2]int64{from, to})
		}
	}
	for i, t := range l.tensors { // in offset order
		if !l.overwritten(i) {
			continue
		}
		keep(t.offset)
		from = t.offset + t.arenaElements()
	}
	keep(l.total)
	return out
}

// initial returns the initial parameters in the arena layout (padding,
// wte's rows past V included, 0):
// GPT-2's init, each tensor drawn from its own stream, PCG(seed, FNV-1a of
// its name), so a tensor's values do not depend on the others.
func (l *layout) initial(seed uint64) []float32 {
	p := make([]float32, l.total)
	for _, t := range l.tensors {
		dst := p[t.offset : t.offset+t.elements()]
		if t.std == 0 {
			for i := range dst {
				dst[i] = float32(t.fill)
			}
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(t.name))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		for i := range dst {
			dst[i] = float32(rng.NormFloat64() * t.std)
		}
	}
	return p
}
