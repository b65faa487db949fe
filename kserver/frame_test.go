package kserver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"
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
		{MaxFrameBytes + 1, `frame length 1048577 (the bytes "\x01\x00\x10\x00") is over the cap of 1048576 bytes`},
		{1<<32 - 1, "frame length 4294967295 (the bytes"},
		{7, "is shorter than the 8-byte header"},
		{0, "frame length 0 (the bytes"},
	}
	for _, tc := range cases {
		stream := binary.LittleEndian.AppendUint32(nil, tc.length)
		stream = append(stream, make([]byte, 64)...)
		var err error
		grew := leastAllocated(func() { _, err = ReadFrame(bytes.NewReader(stream), nil) })
		if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("length %d: %v, want ErrProtocol saying %q", tc.length, err, tc.says)
		}
		if grew > 4<<10 {
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
	var err error
	grew := leastAllocated(func() { _, err = ReadFrame(bytes.NewReader(stream), nil) })
	if err != io.ErrUnexpectedEOF {
		t.Errorf("got %v, want io.ErrUnexpectedEOF", err)
	}
	if grew > 2*growStep {
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
	for op, want := range map[Opcode]string{OpHello: "HELLO", OpShutdown: "SHUTDOWN", OpRunBatch: "RUN_BATCH", OpTextRead: "TEXT_READ", OpMemory: "MEMORY", OpView: "VIEW", OpCommInfo: "COMM_INFO", OpCommAbort: "COMM_ABORT", 0: "opcode 0", 22: "opcode 22"} {
		if got := op.String(); got != want {
			t.Errorf("Opcode(%d) = %q, want %q", uint16(op), got, want)
		}
	}
	for s, want := range map[Status]string{StatusOK: "OK", StatusDeviceError: "DEVICE_ERROR", StatusNotSupported: "NOT_SUPPORTED", StatusCommFailed: "COMM_FAILED", 10: "status 10"} {
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
	r := TransferRequest{Handle: 3, Offset: 1 << 33, ArenaOffset: 64, Length: 5}
	if got, err := DecodeTransferRequest(AppendTransferRequest(nil, r)); got != r || err != nil {
		t.Errorf("WRITE/READ request: %+v, %v", got, err)
	}
	run := RunPayload{OpID: 1, Params: []int64{-1, 1 << 40, 3}, Buffers: []uint64{7, 8, 9}}
	got, err := DecodeRunPayload(AppendRunPayload(nil, run))
	if err != nil || got.OpID != run.OpID || !slices.Equal(got.Params, run.Params) || !slices.Equal(got.Buffers, run.Buffers) {
		t.Errorf("RUN request: %+v, %v", got, err)
	}
	if len(AppendRunPayload(nil, run)) != 16+8*6 {
		t.Error("RUN request has the wrong size")
	}
	if ns, err := DecodeRunResponse(AppendRunResponse(nil, 42)); ns != 42 || err != nil {
		t.Errorf("RUN response: %d, %v", ns, err)
	}
	batch := []RunPayload{run, {OpID: 4, Params: []int64{2, 3}, Buffers: []uint64{1, 2}}, {OpID: 9}}
	runs, err := DecodeRunBatchRequest(AppendRunBatchRequest(nil, batch))
	if err != nil || len(runs) != 3 || runs[1].OpID != 4 || !slices.Equal(runs[0].Buffers, run.Buffers) || len(runs[2].Params) != 0 {
		t.Errorf("RUN_BATCH request: %+v, %v", runs, err)
	}
	times := make([]uint64, 3)
	if err := DecodeRunBatchResponse(AppendRunBatchResponse(nil, []uint64{1, 2, 3}), times); err != nil || !slices.Equal(times, []uint64{1, 2, 3}) {
		t.Errorf("RUN_BATCH response: %v, %v", times, err)
	}
	if entry, msg, err := DecodeRunBatchError(AppendRunBatchError(nil, 7, "bad")); entry != 7 || msg != "bad" || err != nil {
		t.Errorf("RUN_BATCH error: %d, %q, %v", entry, msg, err)
	}
	mem := Memory{Free: 1 << 33, Total: 1<<64 - 1}
	if got, err := DecodeMemoryResponse(AppendMemoryResponse(nil, mem)); got != mem || err != nil {
		t.Errorf("MEMORY response: %+v, %v", got, err)
	}
	if got := AppendMemoryResponse(nil, Memory{Free: 1, Total: 2}); !bytes.Equal(got, []byte{1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}) {
		t.Errorf("MEMORY response of 1 free, 2 in all is % x, want free then total, little-endian", got)
	}
}

func TestPayloadDecodersRejectBadPayloads(t *testing.T) {
	runWith := func(flags uint32, params, buffers uint32, extra int) []byte {
		b := binary.LittleEndian.AppendUint32(nil, 1)
		b = binary.LittleEndian.AppendUint32(b, params)
		b = binary.LittleEndian.AppendUint32(b, buffers)
		b = binary.LittleEndian.AppendUint32(b, flags)
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
		{"a WRITE request without its length", func() error { _, err := DecodeTransferRequest(make([]byte, 24)); return err }, "24 bytes, want 32"},
		{"a READ request with extra bytes", func() error { _, err := DecodeTransferRequest(make([]byte, 33)); return err }, "33 bytes, want 32"},
		{"a short RUN request", func() error { _, err := DecodeRunPayload(make([]byte, 15)); return err }, "want at least 16"},
		{"a RUN request with an unknown flag", func() error { _, err := DecodeRunPayload(runWith(4, 0, 0, 0)); return err }, "flags are 0x4; only 0x1 (untimed) and 0x2 (collective)"},
		{"a RUN request whose counts overrun it", func() error { _, err := DecodeRunPayload(runWith(0, 1<<32-1, 1<<32-1, 8)); return err }, "want 68719476736"},
		{"a RUN request with a stray byte", func() error { _, err := DecodeRunPayload(runWith(0, 1, 0, 9)); return err }, "25 bytes, want 24"},
		{"a RUN_BATCH whose count overruns it", func() error {
			_, err := DecodeRunBatchRequest(append([]byte{255, 255, 0, 0, 0, 0, 0, 0}, runWith(0, 0, 0, 0)...))
			return err
		}, "claims 65535 entries but has only 16 bytes"},
		{"a RUN_BATCH with a bad entry", func() error {
			_, err := DecodeRunBatchRequest(append([]byte{1, 0, 0, 0, 0, 0, 0, 0}, runWith(5, 0, 0, 0)...))
			return err
		}, "entry 0 of 1"},
		{"a RUN_BATCH with trailing bytes", func() error {
			_, err := DecodeRunBatchRequest(append([]byte{1, 0, 0, 0, 0, 0, 0, 0}, runWith(0, 0, 0, 1)...))
			return err
		}, "1 bytes after its 1 entries"},
		{"a RUN_BATCH response of the wrong length", func() error { return DecodeRunBatchResponse(make([]byte, 16), make([]uint64, 3)) }, "16 bytes, want 24"},
		{"a RUN_BATCH error without its index", func() error { _, _, err := DecodeRunBatchError([]byte{1, 2}); return err }, "too short"},
		{"a PING response with a payload", func() error { return DecodeEmpty(OpPing, []byte{0}) }, "PING payload is 1 bytes"},
		{"a MEMORY response without its total", func() error { _, err := DecodeMemoryResponse(make([]byte, 8)); return err }, "MEMORY response is 8 bytes, want 16"},
		{"a MEMORY response with a stray byte", func() error { _, err := DecodeMemoryResponse(make([]byte, 17)); return err }, "17 bytes, want 16"},
		{"an empty MEMORY response", func() error { _, err := DecodeMemoryResponse(nil); return err }, "0 bytes, want 16"},
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
		{"no field count", []byte{2, 0, 0, 0}, "too short for its u32 field count"},
		{"more fields than bytes", head(ProtocolVersion, 1<<32-1), "claims 4294967295 fields"},
		{"a truncated key", append(head(ProtocolVersion, 1), 9, 0, 'a', 0, 0, 0), "key of 9 bytes"},
		{"a truncated value", field(head(ProtocolVersion, 1), "k", "value")[:15], "value of 5 bytes does not fit"},
		{"a repeated key", field(field(head(ProtocolVersion, 2), "k", "1"), "k", "2"), `repeats the key "k"`},
		{"a key that is not UTF-8", field(head(ProtocolVersion, 1), "\xff", ""), "not UTF-8"},
		{"trailing bytes", append(field(head(ProtocolVersion, 1), "k", "v"), 0), "1 bytes after its 1 fields"},
	}
	for _, tc := range cases {
		_, err := DecodeHello(tc.payload)
		if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want ErrProtocol saying %q", tc.name, err, tc.says)
		}
	}
	// Another version is reported as such, whatever follows it.
	h, err := DecodeHello(append(head(1, 1<<32-1), 0xff))
	var ve *VersionError
	if !errors.As(err, &ve) || h.Version != 1 || !errors.Is(err, ErrProtocol) ||
		err.Error() != "server speaks protocol v1, this vkern speaks v2: rebuild with `vkern cache clean`" {
		t.Errorf("version 1: %+v, %v", h, err)
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
	good, _ := AppendHello(nil, Hello{Version: ProtocolVersion, Fields: map[string]string{"backend": "cpu", "cores": "2"}})
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
	f.Add(AppendRunPayload(nil, RunPayload{OpID: 1, Params: []int64{2, 3, 4}, Buffers: []uint64{5, 6, 7}}))
	f.Add(AppendTransferRequest(nil, TransferRequest{1, 2, 3, 4}))
	f.Add(AppendRunBatchRequest(nil, []RunPayload{{OpID: 1, Params: []int64{2}, Buffers: []uint64{5, 6}}, {OpID: 4}}))
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if r, err := DecodeRunPayload(data); err == nil && !bytes.Equal(AppendRunPayload(nil, r), data) {
			t.Error("RUN request does not re-encode")
		}
		if r, err := DecodeTransferRequest(data); err == nil && !bytes.Equal(AppendTransferRequest(nil, r), data) {
			t.Error("WRITE/READ request does not re-encode")
		}
		if runs, err := DecodeRunBatchRequest(data); err == nil && !bytes.Equal(AppendRunBatchRequest(nil, runs), data) {
			t.Error("RUN_BATCH request does not re-encode")
		}
		if len(data)%8 == 0 {
			times := make([]uint64, len(data)/8)
			if err := DecodeRunBatchResponse(data, times); err != nil || !bytes.Equal(AppendRunBatchResponse(nil, times), data) {
				t.Errorf("RUN_BATCH response does not round-trip: %v", err)
			}
		}
		if entry, msg, err := DecodeRunBatchError(data); err == nil && utf8.ValidString(string(data[4:])) && !bytes.Equal(AppendRunBatchError(nil, entry, msg), data) {
			t.Error("RUN_BATCH error does not re-encode")
		}
		for _, decode := range []func([]byte) (uint64, error){DecodeAllocRequest, DecodeAllocResponse, DecodeFreeRequest, DecodeRunResponse} {
			if v, err := decode(data); err == nil && !bytes.Equal(binary.LittleEndian.AppendUint64(nil, v), data) {
				t.Error("a u64 payload does not re-encode")
			}
		}
		if m, err := DecodeMemoryResponse(data); err == nil && !bytes.Equal(AppendMemoryResponse(nil, m), data) {
			t.Error("MEMORY response does not re-encode")
		}
		_ = DecodeEmpty(OpPing, data)
		_ = ErrorMessage(data)
	})
}

// FuzzFrameReader checks the reader the Client uses on the server's stdout
// against ReadFrame: the same frames, then the same kind of end, whatever
// sizes the reads come in, and no buffer larger than twice the input.
func FuzzFrameReader(f *testing.F) {
	f.Add(appendFrames(f, Frame{ID: 1, Opcode: OpPing}, Frame{ID: 2, Opcode: OpRead, Payload: []byte{1, 2, 3}}), uint8(3))
	f.Add(binary.LittleEndian.AppendUint32(nil, MaxFrameBytes), uint8(1))
	f.Add(binary.LittleEndian.AppendUint32(nil, MaxFrameBytes+1), uint8(0))
	f.Add([]byte{3, 0, 0, 0, 1, 2, 3}, uint8(2))
	f.Add(append(binary.LittleEndian.AppendUint32(nil, 70000), make([]byte, 70004)...), uint8(255))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		var r io.Reader = bytes.NewReader(data)
		if chunk%4 == 1 {
			r = iotest.OneByteReader(r)
		} else if chunk%4 == 2 {
			r = iotest.HalfReader(r)
		}
		fr := &frameReader{f: r}
		want := bytes.NewReader(data)
		for {
			got, gotErr := fr.next()
			exp, expErr := ReadFrame(want, nil)
			switch {
			case (gotErr == nil) != (expErr == nil),
				gotErr == io.EOF != (expErr == io.EOF),
				gotErr == io.ErrUnexpectedEOF != (expErr == io.ErrUnexpectedEOF),
				errors.Is(gotErr, ErrProtocol) != errors.Is(expErr, ErrProtocol):
				t.Fatalf("frameReader: %v; ReadFrame: %v", gotErr, expErr)
			}
			if gotErr != nil {
				break
			}
			if got.ID != exp.ID || got.Opcode != exp.Opcode || got.Status != exp.Status || !bytes.Equal(got.Payload, exp.Payload) {
				t.Fatalf("frameReader read %+v, ReadFrame %+v", got, exp)
			}
		}
		if len(fr.buf) > max(frameReadBytes, 2*len(data)) {
			t.Fatalf("a buffer of %d bytes for %d bytes of input", len(fr.buf), len(data))
		}
	})
}

// leastAllocated runs f several times and returns the fewest heap bytes the
// process allocated across one run. TotalAlloc counts every goroutine, so a
// goroutine an earlier test left running can add to one reading; it cannot
// subtract, and an allocation f makes shows in every run.
func leastAllocated(f func()) uint64 {
	least := uint64(math.MaxUint64)
	for range 5 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}
