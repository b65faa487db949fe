package f16

import (
	"flag"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

var exhaustive = flag.Bool("f16.exhaustive", false, "check FromFloat32 on all 2³² float32 bit patterns (about 90 s on 2 cores)")

// refToFloat64 decodes h from its fields with math.Ldexp.
func refToFloat64(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0x1f:
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	case 0:
		return sign * math.Ldexp(frac, -24)
	default:
		return sign * math.Ldexp(1024+frac, exp-25)
	}
}

// refFromFloat64 rounds x to binary16 the slow way: it finds the binade of
// |x|, the spacing ulp of binary16 values there, the binary16 value lo = k·ulp
// just below |x| and the midpoint (k + ½)·ulp between lo and the next one,
// all exact in float64, and rounds up past the midpoint or onto it when k is
// odd. The overflow to ∞ at 65520 is not special-cased: rounding 2047·32 up
// gives 2048·32 = 2¹⁶, whose pattern is 0x7c00.
func refFromFloat64(x float64) uint16 {
	var sign uint16
	if math.Signbit(x) {
		sign = 0x8000
	}
	a := math.Abs(x)
	switch {
	case math.IsNaN(x):
		return sign | 0x7e00
	case a >= 0x1p16:
		return sign | 0x7c00
	}
	binade := -14 // subnormals share the spacing of the lowest binade
	if a >= 0x1p-14 {
		_, e := math.Frexp(a) // a = m·2^e, ½ ≤ m < 1
		binade = e - 1
	}
	ulp := math.Ldexp(1, binade-10)
	k := math.Floor(a / ulp)
	mid := (k + 0.5) * ulp
	if a > mid || a == mid && math.Mod(k, 2) == 1 {
		k++
	}
	// k·2^(binade−10) with 1024 ≤ k ≤ 2048 (or k < 1024 for subnormals in
	// binade −14) has the pattern (binade+14)·1024 + k.
	return sign | uint16((binade+14)*1024+int(k))
}

// refFromFloat32 is refFromFloat64 on the exact widening of f; a NaN's sign
// is read from its bits, since conversions need not keep a NaN's sign.
func refFromFloat32(f float32) uint16 {
	if f != f {
		return uint16(math.Float32bits(f)>>16)&0x8000 | 0x7e00
	}
	return refFromFloat64(float64(f))
}

func TestDecodeMatchesReference(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		want := refToFloat64(h)
		got32, got64 := ToFloat32(h), ToFloat64(h)
		if IsNaN(h) {
			// The payload, quiet bit included, moves to the top fraction bits.
			sign, frac := uint64(h&0x8000), uint64(h&0x3ff)
			if b := math.Float32bits(got32); b != uint32(sign<<16|0x7f800000|frac<<13) {
				t.Errorf("ToFloat32(%#04x) = bits %#08x, want the NaN %#08x", h, b, sign<<16|0x7f800000|frac<<13)
			}
			if b := math.Float64bits(got64); b != sign<<48|0x7ff0000000000000|frac<<42 {
				t.Errorf("ToFloat64(%#04x) = bits %#016x, want the NaN %#016x", h, b, sign<<48|0x7ff0000000000000|frac<<42)
			}
			continue
		}
		if math.Float64bits(got64) != math.Float64bits(want) {
			t.Errorf("ToFloat64(%#04x) = %v, want %v", h, got64, want)
		}
		if math.Float32bits(got32) != math.Float32bits(float32(want)) || float64(float32(want)) != want {
			t.Errorf("ToFloat32(%#04x) = %v, want %v", h, got32, want)
		}
	}
}

func TestClassifiers(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		v := refToFloat64(h)
		if IsNaN(h) != math.IsNaN(v) {
			t.Errorf("IsNaN(%#04x) = %v, want %v", h, IsNaN(h), math.IsNaN(v))
		}
		if IsInf(h) != math.IsInf(v, 0) {
			t.Errorf("IsInf(%#04x) = %v, want %v", h, IsInf(h), math.IsInf(v, 0))
		}
	}
	if !IsInf(PosInf) || !IsInf(NegInf) || !IsNaN(NaN) || IsNaN(MaxFinite) || IsInf(MaxFinite) {
		t.Error("the named constants are misclassified")
	}
	if refToFloat64(MaxFinite) != 65504 {
		t.Errorf("MaxFinite is %v, want 65504", refToFloat64(MaxFinite))
	}
}

// TestRoundTrip decodes every bit pattern and encodes it again: every number
// comes back bit for bit, and every NaN comes back as the canonical quiet NaN
// with its sign, whatever its payload and quietness were.
func TestRoundTrip(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		want := h
		if IsNaN(h) {
			want = h&0x8000 | NaN
		}
		if got := FromFloat32(ToFloat32(h)); got != want {
			t.Errorf("FromFloat32(ToFloat32(%#04x)) = %#04x, want %#04x", h, got, want)
		}
		if got := FromFloat64(ToFloat64(h)); got != want {
			t.Errorf("FromFloat64(ToFloat64(%#04x)) = %#04x, want %#04x", h, got, want)
		}
	}
}

func TestSpecialValues(t *testing.T) {
	tests := []struct {
		name string
		x    float64
		want uint16
	}{
		{"zero stays zero", 0, 0x0000},
		{"negative zero keeps its sign", math.Copysign(0, -1), 0x8000},
		{"one is exact", 1, 0x3c00},
		{"the largest finite value is exact", 65504, MaxFinite},
		{"just below 65520 rounds down to MaxFinite", 65519.99, MaxFinite},
		{"65520 ties to even, which is infinity", 65520, PosInf},
		{"-65520 ties to minus infinity", -65520, NegInf},
		{"2^16 overflows", 65536, PosInf},
		{"huge values overflow", 1e300, PosInf},
		{"infinity stays infinity", math.Inf(1), PosInf},
		{"minus infinity stays minus infinity", math.Inf(-1), NegInf},
		{"NaN becomes the canonical quiet NaN", math.NaN(), NaN},
		{"negative NaN keeps its sign", math.Copysign(math.NaN(), -1), 0xfe00},
		{"the smallest normal is exact", 0x1p-14, 0x0400},
		{"the largest subnormal is exact", 0x3ffp-24, 0x03ff},
		{"the smallest subnormal is exact", 0x1p-24, 0x0001},
		{"half the smallest subnormal ties to zero", 0x1p-25, 0x0000},
		{"just above half the smallest subnormal rounds up", 0x1.000002p-25, 0x0001},
		{"three halves of the smallest subnormal tie to two", 0x3p-25, 0x0002},
		{"a float32 subnormal underflows to zero", 0x1p-140, 0x0000},
		{"a float64 subnormal underflows to minus zero", -0x1p-1070, 0x8000},
		{"1 + 2^-11 ties to 1", 1 + 0x1p-11, 0x3c00},
		{"1 + 3·2^-11 ties to 1 + 2^-9", 1 + 0x3p-11, 0x3c02},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FromFloat64(tt.x); got != tt.want {
				t.Errorf("FromFloat64(%v) = %#04x, want %#04x", tt.x, got, tt.want)
			}
			x32 := float32(tt.x)
			if math.IsNaN(tt.x) {
				// Narrowing need not keep a NaN's sign; build the float32 NaN from bits.
				x32 = math.Float32frombits(uint32(math.Float64bits(tt.x)>>32)&0x80000000 | 0x7fc00000)
			} else if float64(x32) != tt.x {
				return // not a float32; FromFloat32 would see a different value
			}
			if got := FromFloat32(x32); got != tt.want {
				t.Errorf("FromFloat32(%v) = %#04x, want %#04x", x32, got, tt.want)
			}
		})
	}
}

// tie is the exact midpoint between two adjacent binary16 magnitudes lo and
// lo+1, and the one it rounds to.
type tie struct {
	mid    float64
	lo, hi uint16
	even   uint16
}

// allTies lists every midpoint between adjacent non-negative finite binary16
// values, subnormal ones included, and the midpoint 65520 between MaxFinite
// and 2¹⁶, which rounds to ∞ (0x7c00 is the pattern after 0x7bff).
func allTies() []tie {
	var ties []tie
	for lo := uint16(0); lo <= MaxFinite; lo++ {
		hiValue := refToFloat64(lo + 1)
		if lo == MaxFinite {
			hiValue = 0x1p16
		}
		tt := tie{mid: (refToFloat64(lo) + hiValue) / 2, lo: lo, hi: lo + 1, even: lo}
		if lo&1 == 1 {
			tt.even = lo + 1
		}
		ties = append(ties, tt)
	}
	return ties
}

// TestTies checks every tie at every exponent, both signs, and the values one
// ulp either side, in float32 and float64. The expected results are stated
// directly (lo, hi, or the even one) and also checked against the reference.
func TestTies(t *testing.T) {
	ties := allTies()
	if len(ties) != 0x7c00 {
		t.Fatalf("found %d ties, want 0x7c00", len(ties))
	}
	for _, tt := range ties {
		for _, sign := range []float64{1, -1} {
			s := uint16(0)
			if sign < 0 {
				s = 0x8000
			}
			mid := sign * tt.mid
			mid32 := float32(mid)
			if float64(mid32) != mid {
				t.Fatalf("the midpoint %v is not a float32", mid)
			}
			cases := []struct {
				name string
				x32  float32
				x64  float64
				want uint16
			}{
				{"the tie", mid32, mid, s | tt.even},
				{"one ulp toward zero", math.Nextafter32(mid32, 0), math.Nextafter(mid, 0), s | tt.lo},
				{"one ulp away from zero", math.Nextafter32(mid32, mid32*2), math.Nextafter(mid, mid*2), s | tt.hi},
			}
			for _, c := range cases {
				if got := FromFloat32(c.x32); got != c.want || got != refFromFloat32(c.x32) {
					t.Errorf("%s: FromFloat32(%v) = %#04x, want %#04x (reference %#04x)", c.name, c.x32, got, c.want, refFromFloat32(c.x32))
				}
				if got := FromFloat64(c.x64); got != c.want || got != refFromFloat64(c.x64) {
					t.Errorf("%s: FromFloat64(%v) = %#04x, want %#04x (reference %#04x)", c.name, c.x64, got, c.want, refFromFloat64(c.x64))
				}
			}
		}
	}
}

// TestFromFloat64RoundsOnce puts, next to every tie, a float64 that is off
// the tie by a quarter of a float32 ulp, on the side away from the even
// neighbour. Narrowing it to float32 lands exactly on the tie, which then
// goes to the even neighbour: the wrong answer. FromFloat64 must not.
func TestFromFloat64RoundsOnce(t *testing.T) {
	for _, tt := range allTies() {
		for _, sign := range []float64{1, -1} {
			s := uint16(0)
			if sign < 0 {
				s = 0x8000
			}
			mid := sign * tt.mid
			quarterUlp32 := float64(math.Nextafter32(float32(mid), float32(mid)*2)-float32(mid)) / 4
			x, correct := mid+quarterUlp32, s|tt.hi // just past the tie, away from zero
			if tt.even == tt.hi {
				x, correct = mid-quarterUlp32, s|tt.lo
			}
			if float64(float32(x)) != mid {
				t.Fatalf("%v does not narrow to the tie %v", x, mid)
			}
			if twice := FromFloat32(float32(x)); twice != s|tt.even || twice == correct {
				t.Fatalf("rounding %v through float32 gives %#04x; the test expects the double-rounding error %#04x", x, twice, s|tt.even)
			}
			if got := FromFloat64(x); got != correct || got != refFromFloat64(x) {
				t.Errorf("FromFloat64(%v) = %#04x, want %#04x (reference %#04x)", x, got, correct, refFromFloat64(x))
			}
		}
	}
}

// parallel runs check(seed) on one goroutine per CPU and waits.
func parallel(check func(seed uint64)) {
	var wg sync.WaitGroup
	for seed := range uint64(runtime.GOMAXPROCS(0)) {
		wg.Go(func() { check(seed) })
	}
	wg.Wait()
}

// TestFromFloat32Random compares FromFloat32 with the reference on 10⁷
// float32s: half are uniform bit patterns, half have a uniform exponent over
// the binary16 range and a little beyond (2⁻²⁸ to 2¹⁸), so that subnormal,
// normal and overflowing results are all common.
func TestFromFloat32Random(t *testing.T) {
	t.Parallel()
	const total = 10_000_000
	workers := runtime.GOMAXPROCS(0)
	var mu sync.Mutex
	failures := 0
	parallel(func(seed uint64) {
		r := rand.New(rand.NewPCG(32, seed))
		for i := range total / workers {
			bits := r.Uint32()
			if i%2 == 1 {
				exp := uint32(127-28) + r.Uint32N(28+18)
				bits = bits&0x807fffff | exp<<23
			}
			f := math.Float32frombits(bits)
			if got, want := FromFloat32(f), refFromFloat32(f); got != want {
				mu.Lock()
				if failures++; failures <= 10 {
					t.Errorf("FromFloat32(%v) (bits %#08x) = %#04x, want %#04x", f, bits, got, want)
				}
				mu.Unlock()
			}
		}
	})
}

// TestFromFloat64Random is TestFromFloat32Random for FromFloat64, on 10⁷
// float64s whose 52 fraction bits make most of them far from any float32.
func TestFromFloat64Random(t *testing.T) {
	t.Parallel()
	const total = 10_000_000
	workers := runtime.GOMAXPROCS(0)
	var mu sync.Mutex
	failures := 0
	parallel(func(seed uint64) {
		r := rand.New(rand.NewPCG(64, seed))
		for i := range total / workers {
			bits := r.Uint64()
			if i%2 == 1 {
				exp := uint64(1023-28) + r.Uint64N(28+18)
				bits = bits&0x800fffffffffffff | exp<<52
			}
			x := math.Float64frombits(bits)
			if got, want := FromFloat64(x), refFromFloat64(x); got != want {
				mu.Lock()
				if failures++; failures <= 10 {
					t.Errorf("FromFloat64(%v) (bits %#016x) = %#04x, want %#04x", x, bits, got, want)
				}
				mu.Unlock()
			}
		}
	})
}

// TestFromFloat32Exhaustive checks every float32 bit pattern; it runs only
// when asked: go test ./f16 -run Exhaustive -args -f16.exhaustive
func TestFromFloat32Exhaustive(t *testing.T) {
	if !*exhaustive {
		t.Skip("run with -f16.exhaustive to check all 2³² float32s")
	}
	workers := uint64(runtime.GOMAXPROCS(0))
	var mu sync.Mutex
	failures := 0
	parallel(func(w uint64) {
		for b := w; b < 1<<32; b += workers {
			f := math.Float32frombits(uint32(b))
			if got, want := FromFloat32(f), refFromFloat32(f); got != want {
				mu.Lock()
				if failures++; failures <= 10 {
					t.Errorf("FromFloat32(%v) (bits %#08x) = %#04x, want %#04x", f, b, got, want)
				}
				mu.Unlock()
			}
		}
	})
}

func FuzzFromFloat32(f *testing.F) {
	for _, x := range []float32{0, 1, 65504, 65519.998, 65520, 0x1p-25, 0x1.000002p-25, 1 + 0x1p-11, -0x3p-25} {
		f.Add(math.Float32bits(x))
	}
	f.Fuzz(func(t *testing.T, bits uint32) {
		x := math.Float32frombits(bits)
		if got, want := FromFloat32(x), refFromFloat32(x); got != want {
			t.Errorf("FromFloat32(%v) (bits %#08x) = %#04x, want %#04x", x, bits, got, want)
		}
	})
}

func FuzzFromFloat64(f *testing.F) {
	for _, x := range []float64{0, 1, 65504, 65520, 0x1p-25, 1 + 0x1p-11 + 0x1p-40, -(0x3p-25 - 0x1p-60)} {
		f.Add(math.Float64bits(x))
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		x := math.Float64frombits(bits)
		if got, want := FromFloat64(x), refFromFloat64(x); got != want {
			t.Errorf("FromFloat64(%v) (bits %#016x) = %#04x, want %#04x", x, bits, got, want)
		}
	})
}
