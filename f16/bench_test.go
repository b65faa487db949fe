package f16

import (
	"math/rand/v2"
	"testing"
)

// benchLen elements are 64 KiB of float32 and 32 KiB of binary16: the
// buffers stay in L2, so the figures are the conversion's, not DRAM's.
const benchLen = 1 << 14

// benchInputs returns the same values as float32 and binary16. Typical
// inputs are normally distributed, like weights and activations; random
// ones are uniform bit patterns, which spread decode lookups over the
// whole table and make a third of the encodes overflow, underflow or NaN.
func benchInputs(random bool) ([]float32, []uint16) {
	r := rand.New(rand.NewPCG(1, 2))
	f := make([]float32, benchLen)
	h := make([]uint16, benchLen)
	for i := range f {
		if random {
			h[i] = uint16(r.Uint32())
			f[i] = ToFloat32(h[i])
		} else {
			f[i] = float32(r.NormFloat64())
			h[i] = FromFloat32(f[i])
		}
	}
	return f, h
}

func reportRate(b *testing.B) {
	b.ReportMetric(float64(benchLen*b.N)/b.Elapsed().Seconds()/1e6, "Melem/s")
}

var inputKinds = []struct {
	name   string
	random bool
}{{"typical", false}, {"random", true}}

func BenchmarkEncodeFloat32s(b *testing.B) {
	for _, k := range inputKinds {
		b.Run(k.name, func(b *testing.B) {
			f, h := benchInputs(k.random)
			for b.Loop() {
				EncodeFloat32s(h, f)
			}
			reportRate(b)
		})
	}
}

func BenchmarkDecodeFloat32s(b *testing.B) {
	for _, k := range inputKinds {
		b.Run(k.name, func(b *testing.B) {
			f, h := benchInputs(k.random)
			DecodeFloat32s(f, h) // build the table outside the timing
			for b.Loop() {
				DecodeFloat32s(f, h)
			}
			reportRate(b)
		})
	}
}

func BenchmarkDecodeFloat64s(b *testing.B) {
	for _, k := range inputKinds {
		b.Run(k.name, func(b *testing.B) {
			_, h := benchInputs(k.random)
			d := make([]float64, len(h))
			DecodeFloat64s(d, h)
			for b.Loop() {
				DecodeFloat64s(d, h)
			}
			reportRate(b)
		})
	}
}

// BenchmarkCopyFloat32s is the anchor: memmove of the float32 side of a
// conversion, the most any of the conversions could hope to reach.
func BenchmarkCopyFloat32s(b *testing.B) {
	f, _ := benchInputs(false)
	dst := make([]float32, len(f))
	for b.Loop() {
		copy(dst, f)
	}
	reportRate(b)
}

// BenchmarkScalarToFloat32 measures the arithmetic decode that the tables
// replace, for the ratio quoted in bulk.go.
func BenchmarkScalarToFloat32(b *testing.B) {
	for _, k := range inputKinds {
		b.Run(k.name, func(b *testing.B) {
			f, h := benchInputs(k.random)
			for b.Loop() {
				for i, x := range h {
					f[i] = ToFloat32(x)
				}
			}
			reportRate(b)
		})
	}
}
