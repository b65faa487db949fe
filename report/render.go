package report

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("report: writing JSON: %w", err)
	}
	return nil
}

// WriteMarkdown writes the page a person reads: the verdict and a line per
// op first, then evidence and non-claims, then what did not pass, then the
// device, toolchain and every case.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# vkern verify: %s\n\n", r.Verdict)
	fmt.Fprintf(&b, "%d passed, %d incorrect, %d failed, %d not supported, on the %s backend (%s).\n\n",
		r.Summary.Passed, r.Summary.Incorrect, r.Summary.Failed, r.Summary.NotSupported, r.Backend, r.Device.Name)
	if r.BackendReason != "" {
		fmt.Fprintf(&b, "Backend: %s\n\n", r.BackendReason)
	}
	b.WriteString("| op | verdict | cases passed | exact cases | worst error / bound | shapes | distributions |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, name := range r.opNames() {
		l := r.Ops[name]
		worst := "–"
		if l.Passed > 0 {
			worst = ratio(l.MaxErrorOverBound)
		}
		fmt.Fprintf(&b, "| %s | %s | %d / %d | %d | %s | %s | %s |\n", name, l.Verdict, l.Passed, l.Cases, l.ExactCases,
			worst, strings.Join(l.Shapes, ", "), strings.Join(l.Dists, ", "))
	}
	section(&b, "What was shown", r.Evidence)
	section(&b, "What was not shown", r.NonClaims)
	var bad []string
	for _, c := range r.Cases {
		if c.Verdict.String() != "passed" {
			bad = append(bad, fmt.Sprintf("%s %s %s seed %d: **%s**: %s", c.Op, c.Shape, c.Dist, c.Seed, c.Verdict, c.Reason))
		}
	}
	if len(bad) > 0 {
		section(&b, "Cases that did not pass", bad)
	}
	var sampled []string
	for _, c := range r.Cases {
		if c.Sample != "" {
			sampled = append(sampled, fmt.Sprintf("%s %s %s seed %d: %s", c.Op, c.Shape, c.Dist, c.Seed, c.Sample))
		}
	}
	if len(sampled) > 0 {
		section(&b, "How the sampled cases were checked", sampled)
	}
	if len(r.Notes) > 0 {
		section(&b, "Notes", r.Notes)
	}
	b.WriteString("\n## Device and toolchain\n\n| | |\n| --- | --- |\n")
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "| %s | %s |\n", k, strings.ReplaceAll(v, "|", "\\|"))
		}
	}
	row("backend", r.Backend)
	keys := make([]string, 0, len(r.Device.Fields))
	for k := range r.Device.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		label := "device " + k
		if k == "device" {
			label = "device"
		}
		row(label, r.Device.Fields[k])
	}
	row("compiler", r.Toolchain.Path)
	row("compiler version", r.Toolchain.Version)
	row("compiler flags", strings.Join(r.Toolchain.Flags, " "))
	row("build target", r.Toolchain.Target)
	row("compiler fingerprint", r.Toolchain.Fingerprint)
	row("cache key", r.CacheKey)
	row("kernel sources sha256", r.SourceSHA256)
	row("server binary sha256", r.BinarySHA256)
	row("command", r.Command)
	if !r.Started.IsZero() {
		row("started", r.Started.Format("2006-01-02 15:04:05 MST"))
	}
	row("seconds", fmt.Sprintf("%.3f", r.Seconds))

	b.WriteString("\n## Cases\n\n| op | shape | dist | seed | verdict | check | max abs error | max error / bound | rms error | kernel time |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, c := range r.Cases {
		check := c.Check
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %.3g | %s | %.3g | %s |\n", c.Op, c.Shape, c.Dist, c.Seed, c.Verdict,
			check, float64(c.MaxAbsError), ratio(c.MaxErrorOverBound), float64(c.RMSError), duration(c.KernelTimeNs))
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("report: writing Markdown: %w", err)
	}
	return nil
}

func section(b *strings.Builder, title string, items []string) {
	fmt.Fprintf(b, "\n## %s\n\n", title)
	for _, it := range items {
		fmt.Fprintf(b, "- %s\n", it)
	}
}

func ratio(f Float) string { return fmt.Sprintf("%.3g", float64(f)) }

func duration(ns int64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2f s", float64(ns)/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", float64(ns)/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", float64(ns)/1e3)
	}
	return fmt.Sprintf("%d ns", ns)
}
