package verify

import (
	"fmt"
)

// Verdict is the outcome of a case, or of a whole run. It is an enum, never a
// bool: a kernel that did not run is not the same as one that ran wrong.
type Verdict uint8

const (
	// Passed: the kernel ran and every element met its check.
	Passed Verdict = iota
	// NotSupported: the backend does not offer this op or shape.
	NotSupported
	// Failed: the kernel did not run (build, server or device error).
	Failed
	// Incorrect: the kernel ran and returned a wrong result.
	Incorrect
)

var verdictNames = [...]string{"passed", "not_supported", "failed", "incorrect"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("verdict(%d)", v)
}

// MarshalText writes the verdict's name, for JSON reports.
func (v Verdict) MarshalText() ([]byte, error) {
	if int(v) >= len(verdictNames) {
		return nil, fmt.Errorf("verify: no such verdict %d", v)
	}
	return []byte(v.String()), nil
}

// UnmarshalText reads a verdict's name.
func (v *Verdict) UnmarshalText(b []byte) error {
	for i, name := range verdictNames {
		if string(b) == name {
			*v = Verdict(i)
			return nil
		}
	}
	return fmt.Errorf("verify: unknown verdict %q", b)
}

// Worse returns the worse of two verdicts. A wrong answer is worse than no
// answer: incorrect > failed > not_supported > passed.
func Worse(a, b Verdict) Verdict { return max(a, b) }
