package le

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

// Each conversion agrees with encoding/binary's, element for element, and
// the decoders undo the encoders (NaN payloads and −0 included).
func TestConversionsMatchEncodingBinary(t *testing.T) {
	i32 := []int32{0, 1, -1, math.MaxInt32, math.MinInt32, 123456}
	f32 := []float32{0, float32(math.Copysign(0, -1)), 1.5, -3.25e-39, float32(math.Inf(-1)), math.Float32frombits(0x7fc00123)}
	u16 := []uint16{0, 1, 0x3c00, 0xffff, 0x7e01}
	for _, c := range []struct {
		name string
		put  func([]byte)
		v    any
		n    int
	}{
		{"int32", func(b []byte) { PutInt32s(b, i32) }, i32, 4 * len(i32)},
		{"float32", func(b []byte) { PutFloat32s(b, f32) }, f32, 4 * len(f32)},
		{"uint16", func(b []byte) { PutUint16s(b, u16) }, u16, 2 * len(u16)},
	} {
		got, want := make([]byte, c.n+3), make([]byte, c.n)
		c.put(got)
		if _, err := binary.Encode(want, binary.LittleEndian, c.v); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:c.n], want) || !bytes.Equal(got[c.n:], []byte{0, 0, 0}) {
			t.Errorf("%s: wrote %x, want %x and the rest untouched", c.name, got, want)
		}
	}
	b := make([]byte, 4*len(f32))
	PutFloat32s(b, f32)
	back := make([]float32, len(f32))
	Float32s(back, b)
	for i := range f32 {
		if math.Float32bits(back[i]) != math.Float32bits(f32[i]) {
			t.Errorf("float32 %d: %#x back as %#x", i, math.Float32bits(f32[i]), math.Float32bits(back[i]))
		}
	}
	h := make([]byte, 2*len(u16))
	PutUint16s(h, u16)
	hb := make([]uint16, len(u16))
	Uint16s(hb, h)
	for i := range u16 {
		if hb[i] != u16[i] {
			t.Errorf("uint16 %d: %#x back as %#x", i, u16[i], hb[i])
		}
	}
}
