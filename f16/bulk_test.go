package f16

import (
	"math"
	"math/rand/v2"
	"testing"
)

// guard is how many elements past the converted ones each test checks for
// stray writes.
const guard = 8

// lengths pairs dst and src lengths: equal, either one shorter, empty, and
// lengths that are not multiples of anything a loop might unroll by.
var lengths = []struct{ dst, src int }{
	{1 << 16, 1 << 16}, {1 << 16, 1000}, {1001, 1 << 16}, {0, 5}, {5, 0}, {0, 0}, {1, 1}, {7, 7},
}

// allPatterns returns every bit pattern, shuffled by a fixed seed.
func allPatterns() []uint16 {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	rand.New(rand.NewPCG(16, 0)).Shuffle(len(src), func(i, j int) { src[i], src[j] = src[j], src[i] })
	return src
}

func TestDecodeFloat32s(t *testing.T) {
	patterns := allPatterns()
	poison := math.Float32frombits(0x7fbadbad) // a signalling NaN no binary16 decodes to
	for _, l := range lengths {
		dst := make([]float32, l.dst+guard)
		for i := range dst {
			dst[i] = poison
		}
		src := patterns[:l.src]
		want := min(l.dst, l.src)
		if n := DecodeFloat32s(dst[:l.dst], src); n != want {
			t.Fatalf("DecodeFloat32s with len(dst) = %d, len(src) = %d returned %d, want %d", l.dst, l.src, n, want)
		}
		for i, got := range dst {
			w := poison
			if i < want {
				w = ToFloat32(src[i])
			}
			if math.Float32bits(got) != math.Float32bits(w) {
				t.Fatalf("len(dst) = %d, len(src) = %d: dst[%d] = bits %#08x, want %#08x", l.dst, l.src, i, math.Float32bits(got), math.Float32bits(w))
			}
		}
	}
}

func TestDecodeFloat64s(t *testing.T) {
	patterns := allPatterns()
	poison := math.Float64frombits(0x7ff4badbadbadbad)
	for _, l := range lengths {
		dst := make([]float64, l.dst+guard)
		for i := range dst {
			dst[i] = poison
		}
		src := patterns[:l.src]
		want := min(l.dst, l.src)
		if n := DecodeFloat64s(dst[:l.dst], src); n != want {
			t.Fatalf("DecodeFloat64s with len(dst) = %d, len(src) = %d returned %d, want %d", l.dst, l.src, n, want)
		}
		for i, got := range dst {
			w := poison
			if i < want {
				w = ToFloat64(src[i])
			}
			if math.Float64bits(got) != math.Float64bits(w) {
				t.Fatalf("len(dst) = %d, len(src) = %d: dst[%d] = bits %#016x, want %#016x", l.dst, l.src, i, math.Float64bits(got), math.Float64bits(w))
			}
		}
	}
}

func TestEncodeFloat32s(t *testing.T) {
	// Every decoded pattern, the ties, and random bit patterns.
	var src []float32
	for _, h := range allPatterns() {
		src = append(src, ToFloat32(h))
	}
	for _, tt := range allTies() {
		src = append(src, float32(tt.mid), -float32(tt.mid))
	}
	r := rand.New(rand.NewPCG(16, 1))
	for range 1 << 16 {
		src = append(src, math.Float32frombits(r.Uint32()))
	}
	const poison = 0x5a5a
	for _, l := range []struct{ dst, src int }{{len(src), len(src)}, {len(src), 1001}, {999, len(src)}, {0, 3}, {3, 0}, {7, 7}} {
		dst := make([]uint16, l.dst+guard)
		for i := range dst {
			dst[i] = poison
		}
		want := min(l.dst, l.src)
		if n := EncodeFloat32s(dst[:l.dst], src[:l.src]); n != want {
			t.Fatalf("EncodeFloat32s with len(dst) = %d, len(src) = %d returned %d, want %d", l.dst, l.src, n, want)
		}
		for i, got := range dst {
			w := uint16(poison)
			if i < want {
				w = FromFloat32(src[i])
			}
			if got != w {
				t.Fatalf("len(dst) = %d, len(src) = %d: dst[%d] = %#04x, want %#04x", l.dst, l.src, i, got, w)
			}
		}
	}
}
