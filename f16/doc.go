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
// several times faster, but the pure Go loops meet vkern's bar of 300 M
// elements/s per core each way on an uncontended core, and stay portable and
// inlinable.
//
// # Why not github.com/x448/float16
//
// It is correct and well kept, but it converts one value per call, with
// branches, and has no float64 path (float64 through its float32 path rounds
// twice). Its encode runs at a third to a half of the 300 M elements/s bar
// and its decode at under 260. Measured on this repository's 2-core AMD
// EPYC (Zen 3, 2.45 GHz) build machine, one core, 16 Ki elements per call, a
// loop over its scalar functions against this package's slice functions,
// the two run alternately (n = 12), in Melem/s, typical (normally
// distributed) / random-bit-pattern inputs:
//
//	                 x448/float16 v0.8.4    f16, median    f16, best run
//	float32 → f16        104 / 164           293 / 310       336 / 362
//	f16 → float32        259 / 218           791 / 685      1444 / 1099
//	f16 → float64        228 / 223           867 / 600      1010 / 729
//
// The machine was shared with other builds while this ran, so medians sit
// below the uncontended speed (encode reaches 450 on a quiet core); the
// ratios within a run are steady: encode 2 to 3 times, decode 3 to 4 times
// x448/float16. The anchor, memmove of the same float32 slice, ran at
// 10800. go test -bench . ./f16/ reproduces the f16 columns.
package f16
