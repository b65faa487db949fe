// Package f16 converts IEEE 754 binary16 ("half precision", f16) values to
// and from float32 and float64, one at a time or a slice at a time. vkern
// keeps f16 tensors as raw uint16 bit patterns; this package is how the host
// side (inputs, oracles, verification) reads and writes them.
//
// Decoding is exact. Encoding rounds to nearest, ties to even, in one
// rounding step from float32 or float64 alike (FromFloat64 does not go
// through float32, which would round twice), with gradual underflow to
// subnormals and overflow to ±∞ from 65520 up. NaNs decode with their sign
// and payload; they encode to the canonical quiet NaN with their sign.
//
// It does not do arithmetic in binary16, bfloat16 or other formats, rounding
// modes other than nearest-even, floating-point exception flags, or NaN
// payloads on the way in. It uses no assembly: the F16C instructions would be
// faster still, but the pure Go loops already meet vkern's bar of 300 M
// elements/s per core each way, and stay portable and inlinable.
//
// # Why not github.com/x448/float16
//
// It is correct and well kept, but it converts one value per call, with
// branches, and has no float64 path (float64 through its float32 path rounds
// twice). Measured on this repository's 2-core AMD EPYC build machine, one
// core, 16 Ki elements per call, loop over its scalar functions versus this
// package's slice functions, median of 6 runs (Melem/s, typical normally
// distributed inputs / random bit patterns):
//
//	                  x448/float16 v0.8.4   f16
//	float32 → f16           110 / 55       390 / 390
//	f16 → float32           250 / 250     1200 / 1200
//	f16 → float64           250 / 140     1200 / 900
//
// go test -bench . ./f16/ reproduces the f16 column, with memmove of the
// same float32 slice as the anchor (about 7000 Melem/s).
package f16
