package kernels

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVectorMathAccuracy holds cpu/vmath.h to the accuracy its comment
// states, which the oracles' bounds are built on: exp_run within 2⁻²³ of
// e^x relatively (an ulp where e^x is subnormal), tanh_run within 1.5·2⁻²³,
// and every special value right. It checks every 13th binary32 bit pattern
// (all exponents, 330 million arguments); VKERN_EXHAUSTIVE=1 checks all
// 2³² (about a minute on two cores).
func TestVectorMathAccuracy(t *testing.T) {
	bin := buildHostCheck(t, "cpu", "cpu/vmath.h", "vmath_check.cc", "-O3", "-march=native", "-pthread")
	stride := "13"
	if os.Getenv("VKERN_EXHAUSTIVE") == "1" {
		stride = "1"
	}
	out, err := exec.Command(bin, stride).Output()
	if err != nil {
		t.Fatalf("vmath_check %s: %v", stride, err)
	}
	var got struct {
		Exp    float64 `json:"exp"`
		ExpAt  float64 `json:"exp_at"`
		Tanh   float64 `json:"tanh"`
		TanhAt float64 `json:"tanh_at"`
		Bad    int64   `json:"bad"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("vmath_check printed %q: %v", out, err)
	}
	t.Logf("stride %s: exp within %.4f·2⁻²³ (worst at %g), tanh within %.4f·2⁻²³ (worst at %g)", stride, got.Exp, got.ExpAt, got.Tanh, got.TanhAt)
	if got.Exp > 1 {
		t.Errorf("exp_run errs by %.4f·2⁻²³ at x = %g; vmath.h states at most 1", got.Exp, got.ExpAt)
	}
	if got.Tanh > 1.5 {
		t.Errorf("tanh_run errs by %.4f·2⁻²³ at x = %g; vmath.h states at most 1.5", got.Tanh, got.TanhAt)
	}
	if got.Bad != 0 {
		t.Errorf("%d arguments got a wrong special value (NaN, +Inf, 0)", got.Bad)
	}
}

// buildHostCheck compiles testdata/main, a C++ program that includes the
// kernel header header of backend's sources, for this machine with flags,
// and returns the program's path. It skips the test under -short or when
// no C++ compiler (g++ or clang++) is on PATH.
func buildHostCheck(t *testing.T, backend, header, main string, flags ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("compiles and runs a C++ program")
	}
	cxx, err := exec.LookPath("g++")
	if err != nil {
		if cxx, err = exec.LookPath("clang++"); err != nil {
			t.Skip("no C++ compiler (g++ or clang++) on PATH")
		}
	}
	files, _, err := Sources(backend)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(header)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, header), files[header], 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, strings.TrimSuffix(main, ".cc"))
	args := append([]string{"-std=c++17"}, flags...)
	args = append(args, "-Wall", "-Wextra", "-Werror", "-I"+dir, "-o", bin, filepath.Join("testdata", main))
	build := exec.Command(cxx, args...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	return bin
}

// runHostCheck runs a host check that prints {"checked": N, "bad": M} and
// exits 1 when M > 0, and fails the test unless it checked something and
// found nothing wrong (its stderr, which names the first failures, quoted).
func runHostCheck(t *testing.T, bin string) {
	t.Helper()
	out, err := exec.Command(bin).Output()
	var got struct {
		Checked int64 `json:"checked"`
		Bad     int64 `json:"bad"`
	}
	if jerr := json.Unmarshal(out, &got); jerr != nil {
		t.Fatalf("%s printed %q (%v): %v", filepath.Base(bin), out, err, jerr)
	}
	if err != nil || got.Bad != 0 || got.Checked == 0 {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Errorf("%s: %d of %d checks failed (exit %v)\n%s", filepath.Base(bin), got.Bad, got.Checked, err, stderr)
	}
}
