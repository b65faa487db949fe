package verify

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// Memory a case needs, estimated before anything is allocated. The host
// holds the generated inputs (an output's initial values among them),
// their wire copies, the outputs with their guard regions, the reference
// (value, bound and typical error, 8 bytes each per output element) and,
// for the matmul family, the oracle's packed float64 copies of the factors
// (8 bytes per element of X, 16 per element of Y, values and magnitudes);
// its epilogue (a bias, the initial values) is read in place. The device
// holds the buffers, and a product may pad its two factors into scratch of
// up to their size again. Each figure is an estimate erring high; the
// server's own allocation checks stay the last word.
type need struct {
	host, device int64
	parts        string // what the host figure is made of, for messages
}

// needOf estimates c's memory, checked in full or by sampling.
func needOf(c Case, sampled bool) need {
	o, s := c.Op, c.Shape
	var in, out, outElements float64
	for _, p := range o.Inputs() {
		in += float64(s.Bytes(p))
	}
	for _, p := range o.Outputs() {
		out += float64(s.Bytes(p) + GuardElements*int64(p.DType.Size()))
		outElements += float64(s.Elements(p))
	}
	reference := 24 * outElements
	var oracle float64
	if m := o.Matmul; m != nil {
		// The product X (rows × l) · Y (l × cols), with its epilogue, is
		// the op's one output.
		// MatMul packs X as 8 bytes an element and Y as panels of four
		// columns, 64 bytes a panel row (values and magnitudes).
		rows, cols, l := float64(s.Int(m.Rows)), float64(s.Int(m.Cols)), float64(s.Int(m.Depth))
		packed := func(r, c float64) float64 { return 8*r*l + 64*math.Ceil(c/4)*l }
		oracle = packed(rows, cols)
		if sampled {
			// Sampled rows (copied) against all of Y, all of X against
			// sampled columns (copied), and the projections' vectors.
			sr, sc := min(sampleRows, rows), min(sampleCols, cols)
			reference = 24 * (sr*cols + sc*rows)
			oracle = 2*sr*l + packed(sr, cols) + 2*sc*l + packed(rows, sc) + 16*(rows+l+cols)
		}
	}
	device := in + out
	if m := o.Matmul; m != nil {
		for _, name := range []string{m.L, m.R} {
			p, _ := o.Operand(name)
			device += float64(s.Bytes(p)) // a factor padded into scratch
		}
	}
	host := 2*in + out + reference + oracle
	parts := fmt.Sprintf("inputs %s twice, outputs %s, reference %s", formatBytes(in), formatBytes(out), formatBytes(reference))
	if oracle > 0 {
		parts += ", oracle scratch " + formatBytes(oracle)
	}
	return need{host: saturate(host), device: saturate(device), parts: parts}
}

func saturate(x float64) int64 {
	if x >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(x)
}

// formatBytes writes n bytes with a binary unit: "512 B", "3.5 MiB",
// "1.1 TiB".
func formatBytes(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", n)
	}
	return strconv.FormatFloat(n, 'f', max(0, 2-int(math.Log10(max(n, 1)))), 64) + " " + units[i]
}

// TooLargeError says a case needs more memory than is free, before
// anything was allocated.
type TooLargeError struct {
	Case   Case
	Where  string // "host" or "device"
	Need   int64  // bytes
	Free   int64  // bytes
	Source string // where Free comes from
	Parts  string // what Need is made of
	// Sampled says Need is already that of the sampled check (GEMM ops),
	// the smallest check vkern has.
	Sampled bool
}

func (e *TooLargeError) Error() string {
	hint := "use a smaller shape"
	if e.Sampled {
		hint += " (this is already the need of the sampled check, 16 rows, 16 columns and Freivalds projections instead of the full reference)"
	}
	return fmt.Sprintf("verify: %s %s (%s) needs %s of %s memory (%s) but %s is free (%s); %s",
		e.Case.Op.Name, e.Case.Shape, e.Case.Dist, formatBytes(float64(e.Need)), e.Where, e.Parts, formatBytes(float64(e.Free)), e.Source, hint)
}

// errUnknownMemory: the platform does not say how much memory is free.
var errUnknownMemory = errors.New("the free memory of this system is not known")

// HostMemory reports the host memory a new allocation can have: Linux's
// MemAvailable, lowered to the room left under a cgroup v2 memory limit
// when there is one. It is a variable so that tests can fake a smaller
// machine.
var HostMemory = func() (free int64, source string, err error) {
	free, err = memAvailable("/proc/meminfo")
	if err != nil {
		return 0, "", err
	}
	source = "MemAvailable in /proc/meminfo"
	if room, ok := cgroupRoom("/sys/fs/cgroup"); ok && room < free {
		free, source = room, "the cgroup's memory.max less memory.current"
	}
	return free, source, nil
}

// memAvailable reads MemAvailable (kB) from a meminfo file.
func memAvailable(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errUnknownMemory, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil || kb < 0 {
				return 0, fmt.Errorf("%w: %s: MemAvailable %q is not a number of kB", errUnknownMemory, path, fields[1])
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("%w: %s has no MemAvailable line", errUnknownMemory, path)
}

// cgroupRoom is memory.max − memory.current of the cgroup v2 root folder
// dir, when both are numbers.
func cgroupRoom(dir string) (int64, bool) {
	read := func(name string) (int64, bool) {
		b, err := os.ReadFile(dir + "/" + name)
		if err != nil {
			return 0, false
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return v, err == nil
	}
	limit, ok1 := read("memory.max")
	used, ok2 := read("memory.current")
	if !ok1 || !ok2 {
		return 0, false
	}
	return max(0, limit-used), true
}

// Fit checks, before anything is allocated, that each case fits in the
// host's free memory (HostMemory) and, when deviceMemory is set, the
// device's. A GEMM case whose full check does not fit but whose sampled
// check does is returned with Sampled set. The first case that fits in
// neither way is returned as a *TooLargeError. Where the host does not say
// how much memory is free, only the device is checked.
func Fit(ctx context.Context, cases []Case, deviceMemory func(ctx context.Context) (free int64, host bool, err error)) ([]Case, error) {
	hostFree, hostSource, hostErr := HostMemory()
	var deviceFree int64 = -1
	deviceIsHost := false
	if deviceMemory != nil {
		free, host, err := deviceMemory(ctx)
		if err != nil {
			return nil, fmt.Errorf("verify: asking the device for its free memory: %w", err)
		}
		deviceFree, deviceIsHost = free, host
	}
	fitted := make([]Case, len(cases))
	for i, c := range cases {
		fits := func(n need) *TooLargeError {
			host := n.host
			if deviceIsHost {
				host += n.device // the cpu backend's buffers are host memory too
			}
			if hostErr == nil && host > hostFree {
				return &TooLargeError{Case: c, Where: "host", Need: host, Free: hostFree, Source: hostSource, Parts: n.parts}
			}
			if deviceFree >= 0 && n.device > deviceFree {
				return &TooLargeError{Case: c, Where: "device", Need: n.device, Free: deviceFree, Source: "the kernel server's MEMORY answer",
					Parts: fmt.Sprintf("the operands' buffers and scratch %s", formatBytes(float64(n.device)))}
			}
			return nil
		}
		err := fits(needOf(c, c.sampled()))
		if err != nil {
			err.Sampled = c.sampled()
		}
		if err != nil && c.Op.Matmul != nil && !c.sampled() {
			// The sampled check needs no full reference: use it if it
			// fits; else word the smaller of the two needs.
			switch serr := fits(needOf(c, true)); {
			case serr == nil:
				c.Sampled, err = true, nil
			case serr.Need < err.Need:
				serr.Sampled, err = true, serr
			}
		}
		if err != nil {
			return nil, err
		}
		fitted[i] = c
	}
	return fitted, nil
}
