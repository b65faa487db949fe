package cli

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/term"

	"github.com/vkern/vkern/verify"
)

// progress shows how a run is going: one line rewritten in place on a
// terminal, a plain line per case otherwise (logs, CI), nothing on clear.
type progress struct {
	w        io.Writer
	terminal bool
	shown    bool
}

func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, terminal: ok && term.IsTerminal(int(f.Fd()))}
}

func (p *progress) status(format string, args ...any) {
	if !p.terminal {
		return
	}
	fmt.Fprintf(p.w, "\r\033[K"+format, args...)
	p.shown = true
}

func (p *progress) step(done, total int, r verify.CaseResult) {
	if p.terminal {
		p.status("[%d/%d] %s: %s", done, total, r.Case, r.Verdict)
		return
	}
	fmt.Fprintf(p.w, "[%d/%d] %s: %s\n", done, total, r.Case, r.Verdict)
}

func (p *progress) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}
