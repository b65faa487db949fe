package kserver

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func TestSpinFromEnv(t *testing.T) {
	for _, tc := range []struct {
		value string
		set   bool
		want  time.Duration
	}{
		{set: false, want: defaultSpin},
		{value: "0", set: true, want: 0},
		{value: "20", set: true, want: 20 * time.Microsecond},
		{value: "10000", set: true, want: 10 * time.Millisecond},
		{value: "10001", set: true, want: defaultSpin},
		{value: "-1", set: true, want: defaultSpin},
		{value: "fast", set: true, want: defaultSpin},
		{value: "", set: true, want: defaultSpin},
	} {
		if tc.set {
			t.Setenv(SpinEnv, tc.value)
		} else {
			t.Setenv(SpinEnv, "")
			os.Unsetenv(SpinEnv)
		}
		if got := spinFromEnv(); got != tc.want {
			t.Errorf("%s=%q (set %v): spin %v, want %v", SpinEnv, tc.value, tc.set, got, tc.want)
		}
	}
}

// Every combination of transport and spin works for every kind of call,
// and the host reads the way the combination says: the rings, a spinning
// pipe reader, or the plain blocking pipe.
func TestRealServerTransports(t *testing.T) {
	bin := buildRealServer(t)
	for _, tc := range []struct {
		name   string
		pipes  bool
		spin   string // "" unsets the variable
		reader string
	}{
		{"rings, spinning", false, "", "*kserver.ringReader"},
		{"rings, spin off", false, "0", "*kserver.ringReader"},
		{"pipes, spinning", true, "", "*kserver.spinReader"},
		{"pipes, spin off", true, "0", "*os.File"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(SpinEnv, tc.spin)
			if tc.spin == "" {
				os.Unsetenv(SpinEnv)
			}
			c := realClient(t, bin, func(cfg *Config) { cfg.Pipes = tc.pipes })
			ctx := withTimeout(t, 30*time.Second)
			if err := c.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			s := c.liveConn()
			if got := fmt.Sprintf("%T", s.fr.f); got != tc.reader {
				t.Errorf("the host reads responses with a %s, want a %s", got, tc.reader)
			}
			if r, ok := s.fr.f.(*spinReader); ok && r.spin != defaultSpin {
				t.Errorf("the spinReader spins %v, want the default %v", r.spin, defaultSpin)
			}
			if (s.rings != nil) == tc.pipes {
				t.Errorf("rings %v with Pipes %v", s.rings != nil, tc.pipes)
			}
			const rows, cols = 2, 4
			x, err := c.Alloc(ctx, 2*rows*cols)
			if err != nil {
				t.Fatal(err)
			}
			y, _ := c.Alloc(ctx, 2*rows*cols)
			if err := c.Write(ctx, x, 0, f16s(rows*cols, f16One)); err != nil {
				t.Fatal(err)
			}
			if err := c.RunUntimed(ctx, 4, []int64{rows, cols}, []Handle{x, y}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.RunBatch(ctx, []RunRequest{softmaxRun(rows, cols, x, y), softmaxRun(rows, cols, y, x)}); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 2*rows*cols)
			if err := c.Read(ctx, x, 0, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, f16s(rows*cols, 0x3400)) { // softmax of four equal values: 0.25
				t.Errorf("softmax: % x, want every element 0x3400", got)
			}
			// The server's first line on stderr says which transport it
			// uses; exec's copying goroutine may still be on its way.
			want := "frames on " + map[bool]string{true: "pipes", false: "rings on fd 4"}[tc.pipes]
			tail := s.p.stderrTail()
			for end := time.Now().Add(5 * time.Second); !strings.Contains(tail, want) && time.Now().Before(end); {
				time.Sleep(time.Millisecond)
				tail = s.p.stderrTail()
			}
			if !strings.Contains(tail, want) {
				t.Errorf("the server's stderr does not say %q:\n%s", want, tail)
			}
		})
	}
}
