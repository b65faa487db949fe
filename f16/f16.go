package f16

import "math"

// Bit patterns of special values.
const (
	PosInf    uint16 = 0x7c00 // +∞
	NegInf    uint16 = 0xfc00 // −∞
	NaN       uint16 = 0x7e00 // canonical quiet NaN: sign clear, quiet bit set, payload zero
	MaxFinite uint16 = 0x7bff // 65504, the largest finite value
)

// Field masks of a binary16 bit pattern.
const (
	signMask uint16 = 0x8000
	expMask  uint16 = 0x7c00
	fracMask uint16 = 0x03ff
)

// IsNaN reports whether h is a NaN, quiet or signalling.
func IsNaN(h uint16) bool { return h&^signMask > expMask }

// IsInf reports whether h is +∞ or −∞.
func IsInf(h uint16) bool { return h&^signMask == expMask }

// ToFloat32 returns the value of h. Every binary16 value is a binary32 value,
// so the result is exact. A NaN keeps its sign and its 10 fraction bits,
// quiet bit included, as the top fraction bits of the binary32 NaN.
//
// The magnitude's exponent field is rebiased from 15 to 127 by one addition;
// ∞/NaN get a second one that takes the field to 255. A subnormal is m·2⁻²⁴
// with m < 2¹⁰, which float32(m)·2⁻²⁴ computes exactly. Both are computed
// and one is picked with a conditional move.
func ToFloat32(h uint16) float32 {
	mag := uint32(h&^signMask) << 13
	bits := mag + (127-15)<<23
	if mag >= uint32(expMask)<<13 {
		bits += (255 - (31 + 127 - 15)) << 23
	}
	sub := math.Float32bits(float32(mag>>13) * 0x1p-24)
	if mag < 1<<23 {
		bits = sub
	}
	return math.Float32frombits(bits | uint32(h&signMask)<<16)
}

// ToFloat64 returns the value of h, exactly; a NaN keeps its sign and its 10
// fraction bits, quiet bit included, as the top fraction bits of the binary64
// NaN. It is ToFloat32 with binary64's field widths.
func ToFloat64(h uint16) float64 {
	mag := uint64(h&^signMask) << 42
	bits := mag + (1023-15)<<52
	if mag >= uint64(expMask)<<42 {
		bits += (2047 - (31 + 1023 - 15)) << 52
	}
	sub := math.Float64bits(float64(mag>>42) * 0x1p-24)
	if mag < 1<<52 {
		bits = sub
	}
	return math.Float64frombits(bits | uint64(h&signMask)<<48)
}

// FromFloat32 returns the binary16 value nearest f, ties to even. Magnitudes
// of 65520 and above, the midpoint between MaxFinite and 2¹⁶, become ±∞.
// Results below 2⁻¹⁴ are subnormal, and magnitudes up to 2⁻²⁵ become ±0.
// Every NaN becomes the canonical quiet NaN with f's sign (0x7e00 or
// 0xfe00): its payload is dropped.
//
// Normal results. With k the bit pattern of f's magnitude, the binary16
// pattern is k rebiased by (15−127)<<23 and shifted right by the 13 fraction
// bits binary16 lacks. Adding 0xfff plus the lowest kept bit before the
// shift rounds to nearest, ties to even; a carry out of the fraction bumps
// the exponent, which is also right, up to ∞ at 65520; larger k are clamped
// to ∞.
//
// Subnormal results are multiples of 2⁻²⁴. Adding 0.5, whose ulp is 2⁻²⁴,
// makes the FPU round the magnitude to that grid, ties to even (Go never
// leaves that rounding mode), and leaves the multiple in the sum's fraction
// bits.
//
// All three results are computed and one is picked with conditional moves,
// so the cost does not depend on the data. The body is kept under the
// inliner's budget, which makes EncodeFloat32s about 1.5 times as fast;
// keeping NaN payloads would take it over.
func FromFloat32(f float32) uint16 {
	bits := math.Float32bits(f)
	mag := bits &^ (1 << 31)
	h := min((mag-(127-15)<<23+0xfff+mag>>13&1)>>13, uint32(PosInf))
	sub := math.Float32bits(math.Float32frombits(mag)+0.5) - 0x3f000000
	if mag < (1-15+127)<<23 { // below 2⁻¹⁴
		h = sub
	}
	if mag > 0xff<<23 {
		h = uint32(NaN)
	}
	return uint16(h | bits>>16&uint32(signMask))
}

// FromFloat64 returns the binary16 value nearest x, ties to even, rounded
// once from x itself. Converting through float32 would round twice and get
// some ties wrong: 1 + 2⁻¹¹ + 2⁻⁴⁰ rounds to float32 as 1 + 2⁻¹¹, the
// midpoint between 1 and 1 + 2⁻¹⁰, which ties to 1, while x itself is
// nearer 1 + 2⁻¹⁰. Otherwise it is FromFloat32 with binary64's field widths;
// the subnormal grid comes from adding 2²⁸, whose binary64 ulp is 2⁻²⁴.
func FromFloat64(x float64) uint16 {
	bits := math.Float64bits(x)
	mag := bits &^ (1 << 63)
	h := min((mag-(1023-15)<<52+(1<<41-1)+mag>>42&1)>>42, uint64(PosInf))
	sub := math.Float64bits(math.Float64frombits(mag)+0x1p28) - (1023+28)<<52
	if mag < (1-15+1023)<<52 { // below 2⁻¹⁴
		h = sub
	}
	if mag > 0x7ff<<52 {
		h = uint64(NaN)
	}
	return uint16(h | bits>>48&uint64(signMask))
}
