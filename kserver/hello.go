package kserver

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Hello is the server's handshake: its protocol version and the device
// evidence it reports as key/value fields (PROTOCOL.md, "HELLO").
type Hello struct {
	Version uint32
	Fields  map[string]string
}

// The HELLO keys the host reads; servers may send more, which are kept as
// device evidence.
const (
	KeyBackend      = "backend"
	KeyDevice       = "device"
	KeyArch         = "arch"
	KeyCores        = "cores"
	KeyMemoryBytes  = "memory_bytes"
	KeyDriver       = "driver"
	KeyRuntime      = "runtime"
	KeySourceSHA256 = "source_sha256"
	KeyCompiler     = "compiler"
)

// Backend is the server's backend: cpu, cuda or hip.
func (h Hello) Backend() string { return h.Fields[KeyBackend] }

// Device is a name a person recognises.
func (h Hello) Device() string { return h.Fields[KeyDevice] }

// Arch is the target architecture: x86_64, sm_90a, gfx90a, ...
func (h Hello) Arch() string { return h.Fields[KeyArch] }

// Driver is the device driver's version.
func (h Hello) Driver() string { return h.Fields[KeyDriver] }

// Runtime is the device runtime's version.
func (h Hello) Runtime() string { return h.Fields[KeyRuntime] }

// SourceSHA256 is the SHA-256 of the kernel sources the server was built from.
func (h Hello) SourceSHA256() string { return h.Fields[KeySourceSHA256] }

// Compiler is the compiler's own version macro.
func (h Hello) Compiler() string { return h.Fields[KeyCompiler] }

// Cores is the number of hardware threads or multiprocessors.
func (h Hello) Cores() (uint64, error) { return h.Uint(KeyCores) }

// MemoryBytes is the device memory in bytes.
func (h Hello) MemoryBytes() (uint64, error) { return h.Uint(KeyMemoryBytes) }

// Uint parses the field key as a decimal unsigned integer.
func (h Hello) Uint(key string) (uint64, error) {
	s, ok := h.Fields[key]
	if !ok {
		return 0, fmt.Errorf("kserver: HELLO has no %q field (fields: %q)", key, slices.Sorted(maps.Keys(h.Fields)))
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("kserver: HELLO field %s = %q is not an unsigned decimal integer", key, s)
	}
	return v, nil
}

// VersionError says that the server speaks another protocol version. It
// wraps ErrProtocol.
type VersionError struct {
	Server, Host uint32
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("server speaks protocol v%d, this vkern speaks v%d: rebuild with `vkern cache clean`", e.Server, e.Host)
}

func (e *VersionError) Unwrap() error { return ErrProtocol }

// helloFieldMinBytes is the smallest encoded field: u16 key length, u32
// value length, both strings empty.
const helloFieldMinBytes = 6

// AppendHello appends a HELLO payload: u32 version, u32 field count, then
// each field as u16 key length, key, u32 value length, value. Keys are
// written in sorted order so the encoding is deterministic. A key longer than
// 65535 bytes is an error.
func AppendHello(dst []byte, h Hello) ([]byte, error) {
	dst = binary.LittleEndian.AppendUint32(dst, h.Version)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(h.Fields)))
	for _, k := range slices.Sorted(maps.Keys(h.Fields)) {
		if len(k) > 0xFFFF {
			return dst, fmt.Errorf("kserver: HELLO key of %d bytes is longer than 65535", len(k))
		}
		v := h.Fields[k]
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(k)))
		dst = append(dst, k...)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(v)))
		dst = append(dst, v...)
	}
	return dst, nil
}

// DecodeHello decodes a HELLO payload. A version other than ProtocolVersion
// returns Hello{Version: v} and a *VersionError without looking further,
// since another version may lay its fields out differently. Truncated
// fields, trailing bytes, repeated keys and keys that are not UTF-8 are
// errors wrapping ErrProtocol.
func DecodeHello(p []byte) (Hello, error) {
	if len(p) < 4 {
		return Hello{}, fmt.Errorf("%w: HELLO payload is %d bytes, too short for its u32 version", ErrProtocol, len(p))
	}
	h := Hello{Version: binary.LittleEndian.Uint32(p)}
	if h.Version != ProtocolVersion {
		return h, &VersionError{Server: h.Version, Host: ProtocolVersion}
	}
	if len(p) < 8 {
		return h, fmt.Errorf("%w: HELLO payload is %d bytes, too short for its u32 field count", ErrProtocol, len(p))
	}
	n := binary.LittleEndian.Uint32(p[4:])
	rest := p[8:]
	if uint64(n)*helloFieldMinBytes > uint64(len(rest)) {
		return h, fmt.Errorf("%w: HELLO claims %d fields but has only %d bytes for them", ErrProtocol, n, len(rest))
	}
	h.Fields = make(map[string]string, n)
	for i := range n {
		if len(rest) < 2 {
			return h, fmt.Errorf("%w: HELLO field %d of %d: truncated key length", ErrProtocol, i+1, n)
		}
		kl := int(binary.LittleEndian.Uint16(rest))
		rest = rest[2:]
		if len(rest) < kl+4 {
			return h, fmt.Errorf("%w: HELLO field %d of %d: key of %d bytes and value length do not fit in the %d bytes left",
				ErrProtocol, i+1, n, kl, len(rest))
		}
		key := rest[:kl]
		vl := uint64(binary.LittleEndian.Uint32(rest[kl:]))
		rest = rest[kl+4:]
		if vl > uint64(len(rest)) {
			return h, fmt.Errorf("%w: HELLO field %q: value of %d bytes does not fit in the %d bytes left", ErrProtocol, key, vl, len(rest))
		}
		if !utf8.Valid(key) {
			return h, fmt.Errorf("%w: HELLO field %d of %d: key %q is not UTF-8", ErrProtocol, i+1, n, key)
		}
		k := string(key)
		if _, dup := h.Fields[k]; dup {
			return h, fmt.Errorf("%w: HELLO repeats the key %q", ErrProtocol, k)
		}
		h.Fields[k] = string(rest[:vl])
		rest = rest[vl:]
	}
	if len(rest) != 0 {
		return h, fmt.Errorf("%w: HELLO has %d bytes after its %d fields", ErrProtocol, len(rest), n)
	}
	return h, nil
}
