package kserver

import (
	"bytes"
	"os"
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

// With the spin off, both sides block on the pipes as they did before the
// spin existed, and every kind of call still works.
func TestRealServerWithTheSpinOff(t *testing.T) {
	t.Setenv(SpinEnv, "0")
	c := realClient(t, buildRealServer(t), nil)
	ctx := withTimeout(t, 30*time.Second)
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if _, isFile := c.liveConn().fr.f.(*os.File); !isFile {
		t.Errorf("the reader of the server's stdout is a %T, want the blocking *os.File", c.liveConn().fr.f)
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
	got := make([]byte, 2*rows*cols)
	if err := c.Read(ctx, y, 0, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, f16s(rows*cols, 0x3400)) { // softmax of four equal values: 0.25
		t.Errorf("softmax with the spin off: % x, want every element 0x3400", got)
	}
}

func TestRealServerSpinsByDefault(t *testing.T) {
	t.Setenv(SpinEnv, "")
	os.Unsetenv(SpinEnv)
	c := realClient(t, buildRealServer(t), nil)
	if err := c.Ping(withTimeout(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if r, ok := c.liveConn().fr.f.(*spinReader); !ok || r.spin != defaultSpin {
		t.Errorf("the reader of the server's stdout is %#v, want a spinReader with the default spin", c.liveConn().fr.f)
	}
}
