package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
	"github.com/vkern/vkern/verify"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func fixture(t *testing.T) (verify.Result, Environment) {
	t.Helper()
	gemm, _ := op.Lookup("gemm")
	softmax, _ := op.Lookup("softmax")
	gs, _ := gemm.ParseShape("17x31x129")
	ss, _ := softmax.ParseShape("7x4099")
	big, _ := gemm.ParseShape("8192x8192x8192")
	gradA, _ := op.Lookup("gemm_grad_a")
	deep, _ := gradA.ParseShape("40x4100x40")
	res := verify.Result{
		Cases: []verify.CaseResult{
			{Case: verify.Case{Op: gemm, Shape: gs, Dist: oracle.Integer, Seed: 1}, Verdict: verify.Passed,
				Stats: verify.Stats{Elements: 527, Checked: 527}, KernelTime: 41 * time.Microsecond},
			{Case: verify.Case{Op: gemm, Shape: gs, Dist: oracle.Normal, Seed: 1}, Verdict: verify.Passed,
				Stats: verify.Stats{Elements: 527, Checked: 527, MaxAbsError: 1.9e-6, MaxErrorOverBound: 0.0123, RMSError: 4.1e-7}, KernelTime: 39 * time.Microsecond},
			{Case: verify.Case{Op: gemm, Shape: big, Dist: oracle.Normal, Seed: 1}, Verdict: verify.Passed,
				Stats: verify.Stats{Elements: 1 << 26, Checked: 2 * 16 * 8192, MaxAbsError: 3e-5, MaxErrorOverBound: 0.002, RMSError: 6e-6,
					Sample: &verify.Sample{Rows: 16, Cols: 16, Trials: 16, RowsProjected: 8192, MissProbability: 0x1p-16}},
				KernelTime: 3 * time.Millisecond},
			{Case: verify.Case{Op: gradA, Shape: deep, Dist: oracle.Rounding, Seed: 1}, Verdict: verify.Passed,
				Stats: verify.Stats{Elements: 1600, Checked: 1600, Rounded: 857, Ties: 298}, KernelTime: 52 * time.Microsecond},
			{Case: verify.Case{Op: gradA, Shape: deep, Dist: oracle.Normal, Seed: 1}, Verdict: verify.Passed,
				Stats: verify.Stats{Elements: 1600, Checked: 1600, MaxAbsError: 0.0039, MaxErrorOverBound: 0.998, RMSError: 0.0011, Determined: 1562,
					Rounding: &verify.RoundingStats{Elements: 1411, MeanULP: 0.004, MeanLow: 0.001, MeanHigh: 0.006, MeanSquareULP: 0.084,
						MeanSquareLow: 0.081, MeanSquareHigh: 0.087, Ambiguous: 38}},
				KernelTime: 50 * time.Microsecond},
			{Case: verify.Case{Op: softmax, Shape: ss, Dist: oracle.Wide, Seed: 1}, Verdict: verify.Incorrect,
				Stats:      verify.Stats{Elements: 28693, Checked: 28693, Wrong: 4099, MaxAbsError: 1, MaxErrorOverBound: math.Inf(1)},
				KernelTime: 2 * time.Millisecond, Reason: "4099 of 28693 elements wrong; first: Y[0,4] = NaN (0xfe00) is NaN where the reference is finite"},
			{Case: verify.Case{Op: softmax, Shape: ss, Dist: oracle.Special, Seed: 1}, Verdict: verify.Failed,
				Reason: "kernel server died: signal: killed"},
		},
		Verdict: verify.Incorrect,
	}
	env := Environment{
		Backend: "cpu", BackendReason: "--backend cpu was given",
		Device:   map[string]string{"device": "Test CPU", "arch": "x86_64", "cores": "2"},
		Compiler: Compiler{Path: "/usr/bin/g++", Version: "g++ 12.2.0", Fingerprint: "ab12", Flags: []string{"-O3"}, Target: "x86_64 test"},
		CacheKey: "cafe", SourceSHA256: "5050505050505050ffff", BinarySHA256: "b1b1b1b1b1b1b1b1b1b1eeee",
		Started: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), Elapsed: 1500 * time.Millisecond,
		Command: "vkern verify --backend cpu",
	}
	return res, env
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./report -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file; run go test ./report -update and review the diff.\ngot:\n%s", name, got)
	}
}

func TestMarkdownMatchesGolden(t *testing.T) {
	res, env := fixture(t)
	var b bytes.Buffer
	if err := New(res, env).WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.md", b.Bytes())
}

func TestJSONMatchesGoldenAndRoundTrips(t *testing.T) {
	res, env := fixture(t)
	var b bytes.Buffer
	if err := New(res, env).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.json", b.Bytes())
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatalf("the JSON does not read back: %v", err)
	}
	if back.Verdict != verify.Incorrect || !math.IsInf(float64(back.Cases[5].MaxErrorOverBound), 1) {
		t.Errorf("read back verdict %s, case 5 ratio %v", back.Verdict, back.Cases[5].MaxErrorOverBound)
	}
	if er := back.Cases[3].ExactRounding; er == nil || er.Rounded != 857 || er.Ties != 298 || back.Cases[1].ExactRounding != nil {
		t.Errorf("exact rounding reads back as %+v on the rounding case and %+v on a bounded one", er, back.Cases[1].ExactRounding)
	}
	if rb := back.Cases[4].RoundingBias; rb == nil || rb.Biased || rb.Elements != 1411 || rb.Ambiguous != 38 {
		t.Errorf("the rounding-bias statistic reads back as %+v", rb)
	}
	if back.Cases[2].Check != "sampled" || !strings.Contains(back.Cases[2].Sample, "Freivalds") {
		t.Errorf("the sampled case reads back as check %q, sample %q", back.Cases[2].Check, back.Cases[2].Sample)
	}
	for _, key := range []string{"backend", "device", "toolchain", "cache_key", "verdict", "summary", "evidence", "non_claims", "cases"} {
		if !bytes.Contains(b.Bytes(), []byte(`"`+key+`"`)) {
			t.Errorf("JSON lacks %q", key)
		}
	}
}

func TestEvidenceNamesOnlyWhatPassed(t *testing.T) {
	res, env := fixture(t)
	r := New(res, env)
	for _, e := range r.Evidence {
		if bytes.Contains([]byte(e), []byte("softmax:")) {
			t.Errorf("evidence claims softmax, which did not pass: %s", e)
		}
	}
	if r.Summary != (Summary{Passed: 5, Incorrect: 1, Failed: 1}) {
		t.Errorf("summary %+v", r.Summary)
	}
}
