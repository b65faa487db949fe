package vkern

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vkern/vkern/kserver"
	"github.com/vkern/vkern/op"
)

// The cpu backend's communicators have one rank: every collective is a
// copy, so the server's whole collective path (its own requests, and
// entries inside a RUN_BATCH) runs here as it does on a GPU with one rank.
func TestCPUCommunicatorsOfOneRankCopy(t *testing.T) {
	checkOneRankComm(t, openCPU(t, Options{}))
}

// On a GPU the same checks run through NCCL with one rank: the whole
// collective path but the transfer (bench/cuda-dp-run.sh runs it).
func TestCUDACommunicatorsOfOneRankThroughNCCL(t *testing.T) {
	checkOneRankComm(t, openBackend(t, "cuda", Options{}))
}

// checkOneRankComm checks a communicator of one rank on dev: its
// collectives give back their input, in requests and in a batch, and the
// server refuses what it must, naming it.
func checkOneRankComm(t *testing.T, dev *Device) {
	ctx := context.Background()
	info, err := dev.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := dev.CollectiveEngine(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %+v", info.Backend, eng)
	cpu := info.Backend == "cpu"
	if cpu && (eng.Name != "single-rank" || eng.Version != 0 || !strings.Contains(eng.Description, "one rank")) {
		t.Errorf("engine %+v, want the cpu's single-rank copies", eng)
	}
	if !cpu && (eng.Name != "nccl" || eng.Version < 20000 || !strings.Contains(eng.Description, "libnccl")) {
		t.Errorf("engine %+v, want NCCL with its version and library", eng)
	}
	id, err := dev.NewUniqueID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id2, _ := dev.NewUniqueID(ctx)
	if id == id2 {
		t.Errorf("two unique ids are the same bytes")
	}
	comm, err := dev.JoinComm(ctx, id, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if comm.Rank() != 0 || comm.Size() != 1 {
		t.Errorf("rank %d of %d, want 0 of 1", comm.Rank(), comm.Size())
	}

	const n = 300
	want := make([]float32, n)
	for i := range want {
		want[i] = float32(i) - 7.5
	}
	alloc := func() *Buffer {
		b, err := dev.Alloc(ctx, 4*n)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	send, recv := alloc(), alloc()
	if err := send.WriteF32(ctx, want); err != nil {
		t.Fatal(err)
	}
	check := func(what string, b *Buffer) {
		t.Helper()
		got := make([]float32, n)
		if err := b.ReadF32(ctx, got); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: element %d is %v, want %v", what, i, got[i], want[i])
			}
		}
	}
	for _, tc := range []struct {
		name string
		run  func() error
	}{
		{"all-reduce", func() error { return comm.AllReduce(ctx, send, recv, n, op.F32, Sum) }},
		{"reduce-scatter", func() error { return comm.ReduceScatter(ctx, send, recv, n, op.F32, Max) }},
		{"all-gather", func() error { return comm.AllGather(ctx, send, recv, n, op.F32) }},
		{"all-reduce in place", func() error { return comm.AllReduce(ctx, recv, recv, n, op.F32, Sum) }},
	} {
		if err := recv.WriteF32(ctx, make([]float32, n)); err != nil && tc.name != "all-reduce in place" {
			t.Fatal(err)
		}
		if tc.name == "all-reduce in place" {
			recv.WriteF32(ctx, want)
		}
		if err := tc.run(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		check(tc.name, recv)
	}

	// Inside a batch: fill recv, then all-gather send over it; the
	// collective runs in its place in the batch.
	fill, err := op.Fill.Shape([]int64{n}, op.Setting{Name: "value", Value: 3})
	if err != nil {
		t.Fatal(err)
	}
	calls := []Call{
		{Op: op.Fill, Shape: fill, Buffers: []*Buffer{recv}},
		comm.AllGatherCall(send, recv, n, op.F32),
	}
	times, err := dev.RunBatch(ctx, calls)
	if err != nil {
		t.Fatal(err)
	}
	if len(times) != 2 || times[1] != 0 {
		t.Errorf("batch times %v, want two with the collective's 0", times)
	}
	check("batch all-gather", recv)

	// What the server refuses, naming it.
	view := func(b *Buffer, off, size int64) *Buffer {
		v, err := b.View(ctx, off, size)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	big, err := dev.Alloc(ctx, 4096)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		run        func() error
	}{
		{"a send too small", "buffer send has 1200 bytes, want 1204", func() error { return comm.AllReduce(ctx, send, recv, n+1, op.F32, Sum) }},
		{"an all-gather with a reduction", "all-gather none", func() error {
			_, err := dev.RunBatch(ctx, []Call{{Collective: &Collective{Kind: kserver.AllGather, Comm: comm, Send: send, Recv: recv, Count: n, DType: op.F32, Reduce: Sum}}})
			return err
		}},
		{"overlapping buffers", "overlap", func() error { return comm.AllReduce(ctx, view(big, 0, 2048), view(big, 1024, 2048), 512, op.F32, Sum) }},
	} {
		err := tc.run()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one that says %q", tc.name, err, tc.want)
		}
	}

	if cpu {
		// A communicator of two ranks is not the cpu backend's to make.
		_, err = dev.JoinComm(ctx, id2, 0, 2)
		if !errors.Is(err, ErrNoCollectives) || !strings.Contains(err.Error(), "host") {
			t.Errorf("joining as rank 0 of 2 on the cpu backend: %v, want ErrNoCollectives pointing at the host collective", err)
		}
	} else {
		// A communicator whose second rank never comes fails at the
		// deadline, aborted, and the server serves on.
		short, cancel := context.WithTimeout(ctx, 3*time.Second)
		start := time.Now()
		_, err = dev.JoinComm(short, id2, 0, 2)
		cancel()
		if !errors.Is(err, ErrCommFailed) || time.Since(start) > 3*time.Second {
			t.Errorf("joining as rank 0 of 2 alone: %v after %v, want ErrCommFailed before the 3 s deadline", err, time.Since(start))
		}
	}

	// Aborted, the communicator is gone, in a request and in a batch.
	if err := comm.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	err = comm.AllReduce(ctx, send, recv, n, op.F32, Sum)
	if err == nil || !strings.Contains(err.Error(), "no live communicator") {
		t.Errorf("all-reduce on an aborted communicator: %v", err)
	}
	if _, err := dev.RunBatch(ctx, calls); err == nil || !strings.Contains(err.Error(), "no live communicator") {
		t.Errorf("a batch on an aborted communicator: %v", err)
	}
	if err := dev.Ping(ctx); err != nil {
		t.Fatalf("the server stopped serving after the refusals: %v", err)
	}
}
