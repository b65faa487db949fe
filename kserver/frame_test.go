package kserver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

func appendFrames(t testing.TB, frames ...Frame) []byte {
	t.Helper()
	var b []byte
	for _, f := range frames {
		var err error
		if b, err = AppendFrame(b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func TestFramesRoundTrip(t *testing.T) {
	frames := []Frame{
		{ID: 0, Opcode: OpHello, Payload: []byte("hello")},
		{ID: 7, Opcode: OpPing},
		{ID: 1<<32 - 1, Opcode: OpRun, Status: StatusInvalidArgument, Payload: []byte("M = 0; want ≥ 1")},
	}
	stream := appendFrames(t, frames...)
	if got := stream[:12]; !bytes.Equal(got, []byte{13, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}) {
		t.Errorf("the first frame's prefix and header are % x, want the length 13 then id 0, opcode 1, status 0", got)
	}
	// One byte at a time, so that every read is short.
	r := iotest.OneByteReader(bytes.NewReader(stream))
	for i, want := range frames {
		got, err := ReadFrame(r, nil)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if got.ID != want.ID || got.Opcode != want.Opcode || got.Status != want.Status || !bytes.Equal(got.Payload, want.Payload) {
			t.Errorf("frame %d = %+v, want %+v", i, got, want)
		}
	}
	if _, err := ReadFrame(r, nil); err != io.EOF {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReadFrameReturnsEOFOnlyAtAFrameBoundary(t *testing.T) {
	stream := appendFrames(t, Frame{ID: 1, Opcode: OpAlloc, Payload: []byte{1, 2, 3}}, Frame{ID: 2, Opcode: OpSync})
	first := lengthBytes + HeaderBytes + 3
	for cut := 0; cut <= len(stream); cut++ {
		r := bytes.NewReader(stream[:cut])
		var err error
		frames := 0
		for err == nil {
			if _, err = ReadFrame(r, nil); err == nil {
				frames++
			}
		}
		atBoundary := cut == 0 || cut == first || cut == len(stream)
		switch {
		case atBoundary && err != io.EOF:
			t.Errorf("cut at %d (a boundary, after %d frames): %v, want io.EOF", cut, frames, err)
		case !atBoundary && err != io.ErrUnexpectedEOF:
			t.Errorf("cut at %d (inside a frame): %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
}

func TestReadFrameRejectsBadLengthsWithoutAllocating(t *testing.T) {
	cases := []struct {
		length uint32
		says   string
	}{
		{MaxFrameBytes + 1, `frame length 33554433 (the bytes "\x01\x00\x00\x02") is over the cap of 33554432 bytes`},
		{1<<32 - 1, "frame length 4294967295 (the bytes"},
		{7, "is shorter than the 8-byte header"},
		{0, "frame length 0 (the bytes"},
	}
	for _, tc := range cases {
		stream := binary.LittleEndian.AppendUint32(nil, tc.length)
		stream = append(stream, make([]byte, 64)...)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := ReadFrame(bytes.NewReader(stream), nil)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("length %d: %v, want ErrProtocol saying %q", tc.length, err, tc.says)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<10 {
			t.Errorf("length %d: allocated %d bytes", tc.length, grew)
		}
	}
	// A frame at exactly the cap is fine.
	stream := binary.LittleEndian.AppendUint32(nil, MaxFrameBytes)
	stream = append(stream, make([]byte, MaxFrameBytes)...)
	f, err := ReadFrame(bytes.NewReader(stream), nil)
	if err != nil || len(f.Payload) != MaxFrameBytes-HeaderBytes {
		t.Errorf("a frame of exactly MaxFrameBytes: %d-byte payload, %v", len(f.Payload), err)
	}
}

func TestReadFrameAllocatesOnlyForBytesThatArrive(t *testing.T) {
	// A length prefix at the cap, then 100 bytes and the end.
	stream := binary.LittleEndian.AppendUint32(nil, MaxFrameBytes)
	stream = append(stream, make([]byte, 100)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadFrame(bytes.NewReader(stream), nil)
	runtime.ReadMemStats(&after)
	if err != io.ErrUnexpectedEOF {
		t.Errorf("got %v, want io.ErrUnexpectedEOF", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 2*growStep {
		t.Errorf("allocated %d bytes for a stream of %d", grew, len(stream))
	}
}

func TestReadFrameReadsIntoTheCallersBuffer(t *testing.T) {
	stream := appendFrames(t, Frame{ID: 3, Opcode: OpRead, Payload: []byte("0123456789")})
	buf := make([]byte, 0, 10)
	f, err := ReadFrame(bytes.NewReader(stream), buf)
	if err != nil {
		t.Fatal(err)
	}
	if &f.Payload[0] != &buf[:1][0] {
		t.Error("a payload that fits cap(buf) was not read into buf")
	}
	small := make([]byte, 0, 4)
	f, err = ReadFrame(bytes.NewReader(stream), small)
	if err != nil || string(f.Payload) != "0123456789" {
		t.Errorf("a payload larger than cap(buf): %q, %v", f.Payload, err)
	}
}

func TestAppendFrameRefusesAnOversizedPayload(t *testing.T) {
	_, err := AppendFrame(nil, Frame{Opcode: OpWrite, Payload: make([]byte, MaxFrameBytes-HeaderBytes+1)})
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "does not fit a frame") {
		t.Errorf("got %v", err)
	}
	if _, err := AppendFrame(nil, Frame{Opcode: OpWrite, Payload: make([]byte, MaxFrameBytes-HeaderBytes)}); err != nil {
		t.Errorf("a payload that exactly fits: %v", err)
	}
}

func TestNamesFollowTheProtocol(t *testing.T) {
	for op, want := range map[Opcode]string{OpHello: "HELLO", OpShutdown: "SHUTDOWN", 0: "opcode 0", 10: "opcode 10"} {
		if got := op.String(); got != want {
			t.Errorf("Opcode(%d) = %q, want %q", uint16(op), got, want)
		}
	}
	for s, want := range map[Status]string{StatusOK: "OK", StatusDeviceError: "DEVICE_ERROR", 8: "status 8"} {
		if got := s.String(); got != want {
			t.Errorf("Status(%d) = %q, want %q", uint16(s), got, want)
		}
	}
}

func TestPayloadsRoundTrip(t *testing.T) {
	if n, err := DecodeAllocRequest(AppendAllocRequest(nil, 1<<40)); n != 1<<40 || err != nil {
		t.Errorf("ALLOC request: %d, %v", n, err)
	}
	if h, err := DecodeAllocResponse(AppendAllocResponse(nil, 9)); h != 9 || err != nil {
		t.Errorf("ALLOC response: %d, %v", h, err)
	}
	if h, err := DecodeFreeRequest(AppendFreeRequest(nil, 5)); h != 5 || err != nil {
		t.Errorf("FREE request: %d, %v", h, err)
	}
	w := WriteRequest{Handle: 2, Offset: 1 << 33, Data: []byte{9, 8, 7}}
	if got, err := DecodeWriteRequest(AppendWriteRequest(nil, w)); err != nil || got.Handle != w.Handle || got.Offset != w.Offset || !bytes.Equal(got.Data, w.Data) {
		t.Errorf("WRITE request: %+v, %v", got, err)
	}
	r := ReadRequest{Handle: 3, Offset: 4, Length: 5}
	if got, err := DecodeReadRequest(AppendReadRequest(nil, r)); got != r || err != nil {
		t.Errorf("READ request: %+v, %v", got, err)
	}
	run := RunRequest{OpID: 1, Params: []int64{-1, 1 << 40, 3}, Buffers: []uint64{7, 8, 9}}
	got, err := DecodeRunRequest(AppendRunRequest(nil, run))
	if err != nil || got.OpID != run.OpID || !slices.Equal(got.Params, run.Params) || !slices.Equal(got.Buffers, run.Buffers) {
		t.Errorf("RUN request: %+v, %v", got, err)
	}
	if len(AppendRunRequest(nil, run)) != 16+8*6 {
		t.Error("RUN request has the wrong size")
	}
	if ns, err := DecodeRunResponse(AppendRunResponse(nil, 42)); ns != 42 || err != nil {
		t.Errorf("RUN response: %d, %v", ns, err)
	}
}

func TestPayloadDecodersRejectBadPayloads(t *testing.T) {
	runWith := func(reserved uint32, params, buffers uint32, extra int) []byte {
		b := binary.LittleEndian.AppendUint32(nil, 1)
		b = binary.LittleEndian.AppendUint32(b, params)
		b = binary.LittleEndian.AppendUint32(b, buffers)
		b = binary.LittleEndian.AppendUint32(b, reserved)
		return append(b, make([]byte, extra)...)
	}
	cases := []struct {
		name   string
		decode func() error
		says   string
	}{
		{"a short ALLOC request", func() error { _, err := DecodeAllocRequest(make([]byte, 7)); return err }, "7 bytes, want 8"},
		{"handle 0 in an ALLOC response", func() error { _, err := DecodeAllocResponse(make([]byte, 8)); return err }, "handle 0"},
		{"a long FREE request", func() error { _, err := DecodeFreeRequest(make([]byte, 9)); return err }, "9 bytes, want 8"},
		{"a WRITE request without its offset", func() error { _, err := DecodeWriteRequest(make([]byte, 12)); return err }, "want at least 16"},
		{"a READ request with extra bytes", func() error { _, err := DecodeReadRequest(make([]byte, 25)); return err }, "25 bytes, want 24"},
		{"a short RUN request", func() error { _, err := DecodeRunRequest(make([]byte, 15)); return err }, "want at least 16"},
		{"a RUN request with reserved set", func() error { _, err := DecodeRunRequest(runWith(1, 0, 0, 0)); return err }, "reserved field is 1"},
		{"a RUN request whose counts overrun it", func() error { _, err := DecodeRunRequest(runWith(0, 1<<32-1, 1<<32-1, 8)); return err }, "want 68719476736"},
		{"a RUN request with a stray byte", func() error { _, err := DecodeRunRequest(runWith(0, 1, 0, 9)); return err }, "25 bytes, want 24"},
		{"a PING response with a payload", func() error { return DecodeEmpty(OpPing, []byte{0}) }, "PING payload is 1 bytes"},
	}
	for _, tc := range cases {
		err := tc.decode()
		if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want ErrProtocol saying %q", tc.name, err, tc.says)
		}
	}
}

func TestHelloRoundTrips(t *testing.T) {
	h := Hello{Version: ProtocolVersion, Fields: map[string]string{
		KeyBackend: "cpu", KeyDevice: "AMD EPYC 9654 96-Core Processor", KeyCores: "192",
		KeyMemoryBytes: "811748450304", "empty": "", "": "empty key",
	}}
	b, err := AppendHello(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := AppendHello(nil, h)
	if !bytes.Equal(b, again) {
		t.Error("AppendHello is not deterministic")
	}
	got, err := DecodeHello(b)
	if err != nil || got.Version != h.Version || !maps.Equal(got.Fields, h.Fields) {
		t.Fatalf("DecodeHello = %+v, %v; want %+v", got, err, h)
	}
	if cores, err := got.Cores(); cores != 192 || err != nil {
		t.Errorf("Cores = %d, %v", cores, err)
	}
	if _, err := got.Uint(KeyDevice); err == nil || !strings.Contains(err.Error(), "not an unsigned decimal integer") {
		t.Errorf("Uint of a name: %v", err)
	}
	if _, err := got.Uint(KeyDriver); err == nil || !strings.Contains(err.Error(), `no "driver" field`) {
		t.Errorf("Uint of a missing key: %v", err)
	}
}

func TestDecodeHelloRejectsBadPayloads(t *testing.T) {
	field := func(b []byte, k, v string) []byte {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
		return append(b, v...)
	}
	head := func(version, n uint32) []byte {
		return binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, version), n)
	}
	cases := []struct {
		name    string
		payload []byte
		says    string
	}{
		{"no version", []byte{1, 0}, "too short for its u32 version"},
		{"no field count", []byte{1, 0, 0, 0}, "too short for its u32 field count"},
		{"more fields than bytes", head(1, 1<<32-1), "claims 4294967295 fields"},
		{"a truncated key", append(head(1, 1), 9, 0, 'a', 0, 0, 0), "key of 9 bytes"},
		{"a truncated value", field(head(1, 1), "k", "value")[:15], "value of 5 bytes does not fit"},
		{"a repeated key", field(field(head(1, 2), "k", "1"), "k", "2"), `repeats the key "k"`},
		{"a key that is not UTF-8", field(head(1, 1), "\xff", ""), "not UTF-8"},
		{"trailing bytes", append(field(head(1, 1), "k", "v"), 0), "1 bytes after its 1 fields"},
	}
	for _, tc := range cases {
		_, err := DecodeHello(tc.payload)
		if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want ErrProtocol saying %q", tc.name, err, tc.says)
		}
	}
	// Another version is reported as such, whatever follows it.
	h, err := DecodeHello(append(head(2, 1<<32-1), 0xff))
	var ve *VersionError
	if !errors.As(err, &ve) || h.Version != 2 || !errors.Is(err, ErrProtocol) ||
		err.Error() != "server speaks protocol v2, this vkern speaks v1: rebuild with `vkern cache clean`" {
		t.Errorf("version 2: %+v, %v", h, err)
	}
}

func TestTailBufferKeepsTheLastBytes(t *testing.T) {
	b := newTailBuffer(8)
	b.Write([]byte("abc"))
	if got := b.String(); got != "abc" {
		t.Errorf("after 3 bytes: %q", got)
	}
	b.Write([]byte("defgh"))
	if got := b.String(); got != "abcdefgh" {
		t.Errorf("after 8 bytes: %q", got)
	}
	b.Write([]byte("ij"))
	if got := b.String(); got != "[2 earlier bytes dropped]\ncdefghij" {
		t.Errorf("after 10 bytes: %q", got)
	}
	n, err := b.Write([]byte("0123456789ABCDEF"))
	if n != 16 || err != nil {
		t.Errorf("Write = %d, %v; want 16, nil", n, err)
	}
	if got := b.String(); got != "[18 earlier bytes dropped]\n89ABCDEF" {
		t.Errorf("after a write larger than the ring: %q", got)
	}
}

// FuzzReadFrame reads frames until an error and checks that EOF is exact, that
// what was read re-encodes to the input, and that nothing large is allocated.
func FuzzReadFrame(f *testing.F) {
	f.Add(appendFrames(f, Frame{ID: 1, Opcode: OpPing}, Frame{ID: 2, Opcode: OpRead, Payload: []byte{1, 2, 3}}))
	f.Add(binary.LittleEndian.AppendUint32(nil, MaxFrameBytes))
	f.Add(binary.LittleEndian.AppendUint32(nil, MaxFrameBytes+1))
	f.Add([]byte{3, 0, 0, 0, 1, 2, 3})
	f.Add([]byte{12, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var reencoded []byte
		for {
			boundary := len(data) - r.Len()
			fr, err := ReadFrame(r, nil)
			if err != nil {
				switch {
				case err == io.EOF:
					if boundary != len(data) {
						t.Fatalf("io.EOF at byte %d of %d", boundary, len(data))
					}
				case err == io.ErrUnexpectedEOF:
					if boundary == len(data) {
						t.Fatal("io.ErrUnexpectedEOF at the end of a frame")
					}
				case !errors.Is(err, ErrProtocol):
					t.Fatalf("unexpected error %v", err)
				}
				break
			}
			if cap(fr.Payload) > max(growStep, 2*len(data)) {
				t.Fatalf("a %d-byte payload has a buffer of %d bytes from %d bytes of input", len(fr.Payload), cap(fr.Payload), len(data))
			}
			if reencoded, err = AppendFrame(reencoded, fr); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.HasPrefix(data, reencoded) {
			t.Fatal("the frames read do not re-encode to the input")
		}
	})
}

// FuzzDecodeHello checks that DecodeHello never panics, that what it accepts
// re-encodes to the input, and that it never builds more fields than fit.
func FuzzDecodeHello(f *testing.F) {
	good, _ := AppendHello(nil, Hello{Version: 1, Fields: map[string]string{"backend": "cpu", "cores": "2"}})
	f.Add(good)
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 255})
	f.Add([]byte{2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := DecodeHello(data)
		if len(h.Fields)*helloFieldMinBytes > len(data) {
			t.Fatalf("%d fields from %d bytes", len(h.Fields), len(data))
		}
		if err != nil {
			return
		}
		// Keys come back sorted, so compare after a canonical re-encoding.
		b, err := AppendHello(nil, h)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeHello(b)
		if err != nil || !maps.Equal(again.Fields, h.Fields) || len(b) != len(data) {
			t.Fatalf("re-encoding %+v gives %d bytes (input %d), %v", h, len(b), len(data), err)
		}
	})
}

// FuzzDecodePayloads runs every request and response decoder on the same
// bytes: none may panic, and what each accepts must re-encode to the input.
func FuzzDecodePayloads(f *testing.F) {
	f.Add(AppendRunRequest(nil, RunRequest{OpID: 1, Params: []int64{2, 3, 4}, Buffers: []uint64{5, 6, 7}}))
	f.Add(AppendReadRequest(nil, ReadRequest{1, 2, 3}))
	f.Add(AppendWriteRequest(nil, WriteRequest{1, 2, []byte("data")}))
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if r, err := DecodeRunRequest(data); err == nil && !bytes.Equal(AppendRunRequest(nil, r), data) {
			t.Error("RUN request does not re-encode")
		}
		if r, err := DecodeReadRequest(data); err == nil && !bytes.Equal(AppendReadRequest(nil, r), data) {
			t.Error("READ request does not re-encode")
		}
		if w, err := DecodeWriteRequest(data); err == nil && !bytes.Equal(AppendWriteRequest(nil, w), data) {
			t.Error("WRITE request does not re-encode")
		}
		for _, decode := range []func([]byte) (uint64, error){DecodeAllocRequest, DecodeAllocResponse, DecodeFreeRequest, DecodeRunResponse} {
			if v, err := decode(data); err == nil && !bytes.Equal(binary.LittleEndian.AppendUint64(nil, v), data) {
				t.Error("a u64 payload does not re-encode")
			}
		}
		_ = DecodeEmpty(OpPing, data)
		_ = ErrorMessage(data)
	})
}
