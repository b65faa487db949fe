// Package report turns a verification run into evidence: a Markdown page a
// person reads and a JSON document a machine reads, both saying what was
// shown, what was not, and on what device, toolchain and binary.
//
// report does not run anything and does not judge: verdicts come from
// package verify. It only words them, and it words every claim so that it
// names the cases behind it.
package report

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
	"github.com/vkern/vkern/verify"
)

// Environment is where a run happened.
type Environment struct {
	Backend       string
	BackendReason string // why this backend (for --backend auto)
	Device        map[string]string
	Compiler      Compiler
	CacheKey      string
	SourceSHA256  string
	BinarySHA256  string
	Notes         []string // things that happened on the way, e.g. a rebuilt binary
	Started       time.Time
	Elapsed       time.Duration
	Command       string
}

// Compiler identifies the toolchain that built the kernels.
type Compiler struct {
	Path        string   `json:"compiler"`
	Version     string   `json:"version"`
	Fingerprint string   `json:"fingerprint"`
	Flags       []string `json:"flags"`
	Target      string   `json:"target"`
}

// Float is a float64 that JSON can carry when it is infinite or NaN: those
// are written as the strings "+Inf", "-Inf" and "NaN".
type Float float64

// MarshalJSON writes finite values as numbers, the rest as strings.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (f *Float) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		switch s {
		case "NaN":
			*f = Float(math.NaN())
		case "+Inf":
			*f = Float(math.Inf(1))
		case "-Inf":
			*f = Float(math.Inf(-1))
		default:
			return fmt.Errorf("report: %q is not a number", s)
		}
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Float(v)
	return nil
}

// Report is the JSON document; the Markdown page is rendered from it.
type Report struct {
	Tool          string            `json:"tool"`
	Command       string            `json:"command,omitempty"`
	Started       time.Time         `json:"started"`
	Seconds       float64           `json:"seconds"`
	Backend       string            `json:"backend"`
	BackendReason string            `json:"backend_reason,omitempty"`
	Device        Device            `json:"device"`
	Toolchain     Compiler          `json:"toolchain"`
	CacheKey      string            `json:"cache_key"`
	SourceSHA256  string            `json:"source_sha256"`
	BinarySHA256  string            `json:"binary_sha256"`
	Verdict       verify.Verdict    `json:"verdict"`
	Summary       Summary           `json:"summary"`
	Arithmetic    Arithmetic        `json:"arithmetic"`
	Evidence      []string          `json:"evidence"`
	NonClaims     []string          `json:"non_claims"`
	Notes         []string          `json:"notes,omitempty"`
	Cases         []Case            `json:"cases"`
	Ops           map[string]OpLine `json:"ops"`
}

// Device is what the kernel server said about its device in its handshake.
type Device struct {
	Name   string            `json:"name"`
	Arch   string            `json:"arch"`
	Fields map[string]string `json:"fields"`
}

// Arithmetic is what the GEMM bounds assumed of the kernels: the backend's
// stated summation structure (oracle.Accumulation).
type Arithmetic struct {
	DotAccumulation string `json:"dot_accumulation"`
	Meaning         string `json:"meaning"`
}

// Summary counts cases by verdict.
type Summary struct {
	Passed       int `json:"passed"`
	Incorrect    int `json:"incorrect"`
	Failed       int `json:"failed"`
	NotSupported int `json:"not_supported"`
}

// Case is one checked case.
type Case struct {
	Op                string         `json:"op"`
	Shape             string         `json:"shape"`
	Dist              string         `json:"dist"`
	Seed              uint64         `json:"seed"`
	Verdict           verify.Verdict `json:"verdict"`
	Exact             bool           `json:"exact"`
	Check             string         `json:"check"` // exact, bound, or sampled
	Sample            string         `json:"sample,omitempty"`
	Elements          int64          `json:"elements"`
	Compared          int64          `json:"elements_compared"` // all of them, unless the case was sampled
	MaxAbsError       Float          `json:"max_abs_error"`
	MaxErrorOverBound Float          `json:"max_error_over_bound"`
	RMSError          Float          `json:"rms_error"`
	Outliers          int64          `json:"outliers"`
	Unwritten         int64          `json:"unwritten"`
	// ExactRounding is set on exact cases with f16 outputs: how many
	// elements matched bit for bit where the exact result had to be
	// rounded, and how many of those were ties (which only ties-to-even
	// gets right).
	ExactRounding *ExactRounding `json:"exact_rounding,omitempty"`
	// RoundingBias is the rounding-bias statistic of the f16 outputs, on
	// bounded cases of continuous distributions.
	RoundingBias *verify.RoundingStats `json:"rounding_bias,omitempty"`
	// BoundTightening compares the GEMM bounds with the order-free γ(K)·S.
	BoundTightening *oracle.Tightening `json:"bound_tightening,omitempty"`
	KernelTimeNs    int64              `json:"kernel_time_ns"`
	Reason          string             `json:"reason,omitempty"`
}

// ExactRounding counts the f16 elements of an exact case whose rounding was
// checked bit for bit.
type ExactRounding struct {
	Rounded int64 `json:"rounded"`
	Ties    int64 `json:"ties"`
}

// OpLine summarises one op.
type OpLine struct {
	Verdict           verify.Verdict `json:"verdict"`
	Cases             int            `json:"cases"`
	Passed            int            `json:"passed"`
	ExactCases        int            `json:"exact_cases"`
	Shapes            []string       `json:"shapes"`
	Dists             []string       `json:"dists"`
	MaxErrorOverBound Float          `json:"max_error_over_bound"`
	Compared          int64          `json:"elements_compared"` // in passing cases
	// In passing cases: f16 elements matched bit for bit where the exact
	// result needed rounding, and the ties among them.
	RoundedExact int64 `json:"rounded_exact"`
	Ties         int64 `json:"ties"`
	// Determined counts, in passing bounded cases, the f16 elements whose
	// bound left rounding to nearest one possible result, which the kernel
	// matched bit for bit.
	Determined int64 `json:"determined"`
	// BiasJudged counts passing cases with a rounding-bias statistic,
	// over BiasElements elements.
	BiasJudged   int   `json:"bias_judged_cases"`
	BiasElements int64 `json:"bias_elements"`
	// Tightening compares, over the bounded cases that passed, the bounds
	// with the order-free γ(K)·S.
	Tightening *oracle.Tightening `json:"bound_tightening,omitempty"`
	// NoExactRounding says why the op has no exact-rounding case.
	NoExactRounding string `json:"no_exact_rounding,omitempty"`
}

// New builds the report of res, run in env.
func New(res verify.Result, env Environment) *Report {
	r := &Report{
		Tool:          "vkern verify",
		Command:       env.Command,
		Started:       env.Started.UTC(),
		Seconds:       math.Round(env.Elapsed.Seconds()*1000) / 1000,
		Backend:       env.Backend,
		BackendReason: env.BackendReason,
		Device:        Device{Name: env.Device["device"], Arch: env.Device["arch"], Fields: env.Device},
		Toolchain:     env.Compiler,
		CacheKey:      env.CacheKey,
		SourceSHA256:  env.SourceSHA256,
		BinarySHA256:  env.BinarySHA256,
		Verdict:       res.Verdict,
		Arithmetic:    Arithmetic{DotAccumulation: res.Arithmetic.Dot.String(), Meaning: res.Arithmetic.Dot.Describe()},
		Notes:         env.Notes,
		Ops:           map[string]OpLine{},
	}
	for _, c := range res.Cases {
		check, sample := "bound", ""
		if c.Exact() {
			check = "exact"
		}
		if c.Stats.Sample != nil {
			check, sample = "sampled", c.Stats.Sample.String()
			if c.Sampled {
				sample += "; sampled because the full reference would not fit in memory"
			}
		}
		var exactRounding *ExactRounding
		if c.Exact() && hasF16Output(c.Op) {
			exactRounding = &ExactRounding{Rounded: c.Stats.Rounded, Ties: c.Stats.Ties}
		}
		r.Cases = append(r.Cases, Case{
			Op: c.Op.Name, Shape: c.Shape.String(), Dist: c.Dist.String(), Seed: c.Seed,
			Verdict: c.Verdict, Exact: c.Exact(), Check: check, Sample: sample, Elements: c.Stats.Elements, Compared: c.Stats.Checked,
			MaxAbsError: Float(c.Stats.MaxAbsError), MaxErrorOverBound: Float(c.Stats.MaxErrorOverBound),
			RMSError: Float(c.Stats.RMSError), Outliers: c.Stats.Outliers, Unwritten: c.Stats.Unwritten,
			ExactRounding: exactRounding, RoundingBias: c.Stats.Rounding, BoundTightening: c.Stats.Tightening,
			KernelTimeNs: c.KernelTime.Nanoseconds(), Reason: c.Reason,
		})
		switch c.Verdict {
		case verify.Passed:
			r.Summary.Passed++
		case verify.Incorrect:
			r.Summary.Incorrect++
		case verify.Failed:
			r.Summary.Failed++
		case verify.NotSupported:
			r.Summary.NotSupported++
		}
		line := r.Ops[c.Op.Name]
		line.Verdict = verify.Worse(line.Verdict, c.Verdict)
		line.Cases++
		line.NoExactRounding = c.Op.NoExactRounding
		if c.Verdict == verify.Passed {
			line.Passed++
			line.Compared += c.Stats.Checked
			if c.Exact() {
				line.ExactCases++
			}
			line.RoundedExact += c.Stats.Rounded
			line.Ties += c.Stats.Ties
			line.Determined += c.Stats.Determined
			if !c.Exact() {
				line.Tightening = line.Tightening.Merge(c.Stats.Tightening)
			}
			if st := c.Stats.Rounding; st != nil {
				line.BiasJudged++
				line.BiasElements += st.Elements
			}
			line.MaxErrorOverBound = Float(math.Max(float64(line.MaxErrorOverBound), c.Stats.MaxErrorOverBound))
		}
		line.Shapes = appendNew(line.Shapes, c.Shape.String())
		line.Dists = appendNew(line.Dists, c.Dist.String())
		r.Ops[c.Op.Name] = line
	}
	r.Evidence, r.NonClaims = claims(r, res)
	return r
}

func hasF16Output(o *op.Op) bool {
	for _, p := range o.Outputs() {
		if p.DType == op.F16 {
			return true
		}
	}
	return false
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// opNames returns the report's ops in wire-id order.
func (r *Report) opNames() []string {
	var names []string
	for _, o := range op.All() {
		if _, ok := r.Ops[o.Name]; ok {
			names = append(names, o.Name)
		}
	}
	return names
}

// claims words what the run showed and what it did not.
func claims(r *Report, res verify.Result) (evidence, nonClaims []string) {
	for _, name := range r.opNames() {
		line := r.Ops[name]
		if line.Passed == 0 {
			continue
		}
		s := fmt.Sprintf("%s: %d of %d cases passed on %s; %d output elements compared one by one, the worst at %.3g of its error bound",
			name, line.Passed, line.Cases, r.Backend, line.Compared, float64(line.MaxErrorOverBound))
		if line.ExactCases > 0 {
			s += fmt.Sprintf("; %d exact cases (whole-number inputs) matched the exact result bit for bit", line.ExactCases)
		}
		if line.RoundedExact > 0 {
			s += fmt.Sprintf(", among them %d f16 elements whose exact result had to be rounded (%d ties), each rounded to nearest with ties to even", line.RoundedExact, line.Ties)
		}
		if t := line.Tightening; t != nil {
			s += fmt.Sprintf("; its bounds, following the stated summation, were %.3g× tighter than the order-free γ(K)·S on geometric average (%.3g× at the least)", t.GeoMean, t.Least)
		}
		if line.Determined > 0 {
			s += fmt.Sprintf("; %d f16 elements of bounded cases, whose bound left rounding to nearest one possible result, matched it bit for bit", line.Determined)
		}
		if line.BiasJudged > 0 {
			s += fmt.Sprintf("; the rounding-bias statistic of %d cases over %d f16 elements lay within what rounding to nearest gives", line.BiasJudged, line.BiasElements)
		}
		evidence = append(evidence, s)
	}
	if r.Summary.Passed > 0 {
		evidence = append(evidence,
			"every output buffer and a guard region past its end were filled with a NaN poison pattern before each run; in passing cases no element kept it, no guard byte changed and no input changed",
			"each compared element was checked against a float64 reference under its own error bound derived in package oracle (binary32 arithmetic, plus half an f16 ulp where the output is f16); NaN and infinities had to match the reference exactly",
			fmt.Sprintf("GEMM bounds followed the summation the backend states (dot_accumulation %s: %s)", r.Arithmetic.DotAccumulation, r.Arithmetic.Meaning))
	}
	var extra []string // non-claims that depend on what was run
	sampled := 0
	for _, c := range r.Cases {
		if c.Check == "sampled" && c.Verdict == verify.Passed {
			sampled++
		}
	}
	if sampled > 0 {
		evidence = append(evidence, fmt.Sprintf("%d large GEMM cases were checked by sampling, not element by element: full rows and columns under the per-element bound, and Freivalds projections of the whole product under a sound per-row tolerance (each case's sample says how many, and the chance a bad row was missed)", sampled))
		extra = append(extra, "in sampled cases, an element outside the sampled rows and columns whose error is under its row's projection tolerance (the sum of the row's per-element bounds) can go unnoticed")
	}
	if r.BinarySHA256 != "" {
		evidence = append(evidence, fmt.Sprintf("the kernel server binary (sha256 %s) was checked against its cache manifest before it was started, and its handshake reported the embedded sources' sha256 %s", short(r.BinarySHA256), short(r.SourceSHA256)))
	}
	nonClaims = append(nonClaims,
		"only the shapes, distributions and seeds listed below were checked; other shapes may take other code paths",
		"kernel times are single runs measured by the server, not benchmarks: use vkern bench for speed",
		"a write before the start of an output buffer, or into memory no buffer owns, is not detected",
	)
	nonClaims = append(nonClaims, extra...)
	seen := map[string]bool{}
	for _, name := range r.opNames() {
		o, _ := op.Lookup(name)
		if o.NoExactRounding != "" {
			nonClaims = append(nonClaims, fmt.Sprintf("%s has no exact-rounding case: %s", name, o.NoExactRounding))
		}
		for _, nc := range o.NonClaims {
			if !seen[nc] {
				seen[nc] = true
				nonClaims = append(nonClaims, nc)
			}
		}
	}
	switch r.Backend {
	case "cpu":
		nonClaims = append(nonClaims, "the cpu backend shows the C++ kernels correct on this CPU and compiler; it shows nothing about GPU kernels")
	case "cuda":
		nonClaims = append(nonClaims, "the cuda backend shows the kernels correct on this GPU, driver and nvcc; other architectures take other code paths and are not shown")
	case "hip":
		nonClaims = append(nonClaims, "the hip kernels are the CUDA sources through compat.h; only this GPU and hipcc are shown")
	}
	sort.Strings(nonClaims[3:])
	return evidence, nonClaims
}

func short(h string) string {
	if len(h) > 16 {
		return h[:16]
	}
	return h
}
