package collective

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func hellos(match map[string]string) func(int) Hello {
	return func(r int) Hello { return NewHello(r, 0, match) }
}

// local makes a group of n ranks in this process, closed at the test's end.
func local(t *testing.T, n int, opts Options) []*Peer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	peers, err := Local(ctx, n, hellos(map[string]string{"model": "nano"}), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range peers {
			p.Close()
		}
	})
	return peers
}

// onEvery runs f on every rank at once and returns each rank's error.
func onEvery(peers []*Peer, f func(p *Peer) error) []error {
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for r, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(p)
		}()
	}
	wg.Wait()
	return errs
}

func TestTheHostAllReduceSumsInRankOrderToTheSameBits(t *testing.T) {
	ctx := context.Background()
	peers := local(t, 3, Options{})
	// 1 + 2⁻²⁴ + 2⁻²⁴ is 1 in rank order ((1 + ε) rounds to 1, twice) and
	// 1 + 2⁻²³ in any order that adds the small ones first.
	small := float32(math.Ldexp(1, -24))
	inputs := [][]float32{{1, 3}, {small, -1}, {small, 0.5}}
	got := make([][]float32, 3)
	errs := onEvery(peers, func(p *Peer) error {
		x := append([]float32(nil), inputs[p.Rank()]...)
		err := p.AllReduceF32(ctx, x)
		got[p.Rank()] = x
		return err
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	want := []float32{(1 + small) + small, 3 - 1 + 0.5}
	for r := range got {
		for i := range want {
			if math.Float32bits(got[r][i]) != math.Float32bits(want[i]) {
				t.Errorf("rank %d element %d: %v, want %v (rank order)", r, i, got[r][i], want[i])
			}
		}
	}
	if want[0] != 1 {
		t.Fatalf("the test's premise: (1 + 2⁻²⁴) + 2⁻²⁴ = %v in float32, want 1", want[0])
	}

	// All-gather in rank order, and rank 0's broadcast.
	var gathered [3][][]byte
	var cast [3][]byte
	errs = onEvery(peers, func(p *Peer) error {
		var err error
		if gathered[p.Rank()], err = p.AllGather(ctx, []byte{byte(10 + p.Rank()), 7}); err != nil {
			return err
		}
		cast[p.Rank()], err = p.Broadcast(ctx, []byte(fmt.Sprintf("from rank %d", p.Rank())))
		return err
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r := range 3 {
		if fmt.Sprint(gathered[r]) != "[[10 7] [11 7] [12 7]]" || string(cast[r]) != "from rank 0" {
			t.Errorf("rank %d gathered %v and got the broadcast %q", r, gathered[r], cast[r])
		}
	}
}

func TestALargeAllReduceTravelsInChunks(t *testing.T) {
	ctx := context.Background()
	peers := local(t, 2, Options{})
	n := chunkBytes/4*2 + 123 // three chunks
	errs := onEvery(peers, func(p *Peer) error {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i%1000) * float32(p.Rank()+1)
		}
		if err := p.AllReduceF32(ctx, x); err != nil {
			return err
		}
		for i := range x {
			if want := float32(i%1000) * 3; x[i] != want {
				return fmt.Errorf("rank %d element %d: %v, want %v", p.Rank(), i, x[i], want)
			}
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestARankThatAbortsFailsTheOthersNamingIt(t *testing.T) {
	peers := local(t, 3, Options{})
	start := time.Now()
	errs := onEvery(peers, func(p *Peer) error {
		if p.Rank() == 2 {
			p.Abort(errors.New("its kernel server died"))
			return nil
		}
		return p.AllReduceF32(context.Background(), []float32{1})
	})
	for r := 0; r < 2; r++ {
		var pe *PeerError
		if !errors.As(errs[r], &pe) || pe.Rank != 2 || !strings.Contains(errs[r].Error(), "its kernel server died") {
			t.Errorf("rank %d: %v, want a PeerError naming rank 2 and its reason", r, errs[r])
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the failure took %v to reach every rank", d)
	}
}

func TestMismatchedRanksAreRefusedAtTheStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Local(ctx, 2, func(r int) Hello {
		return NewHello(r, 2, map[string]string{"nccl": []string{"2.21.5", "2.19.3"}[r], "model": "nano"})
	}, Options{})
	if err == nil || !strings.Contains(err.Error(), `rank 1`) || !strings.Contains(err.Error(), `nccl "2.19.3"`) || !strings.Contains(err.Error(), `"2.21.5"`) {
		t.Errorf("error %v, want one naming rank 1 and both NCCL versions", err)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// twoPeersOverTCP joins two ranks on loopback TCP, rank 1 a little after
// rank 0 (either may start first: rank 1 retries), each saying match.
func twoPeersOverTCP(tb testing.TB, ctx context.Context, match map[string]string) []*Peer {
	tb.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(tb))
	peers := make([]*Peer, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r == 1 {
				time.Sleep(50 * time.Millisecond)
			}
			peers[r], errs[r] = Join(ctx, Env{Addr: addr, Rank: r, Size: 2}, NewHello(r, 2, match), Options{})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		peers[0].Close()
		peers[1].Close()
	})
	return peers
}

func TestRanksMeetOverTCP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	peers := twoPeersOverTCP(t, ctx, map[string]string{"k": "v"})
	errs := onEvery(peers, func(p *Peer) error {
		x := []float32{float32(p.Rank() + 1)}
		if err := p.AllReduceF32(ctx, x); err != nil {
			return err
		}
		if x[0] != 3 {
			return fmt.Errorf("rank %d: sum %v, want 3", p.Rank(), x[0])
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if h := peers[1].Hellos(); len(h) != 2 || h[0].Match["k"] != "v" {
		t.Errorf("rank 1 knows the ranks as %+v", h)
	}
}

// A rank whose peers do not come says what it waits for, once, after
// WaitNotice, and still gives up at its deadline.
func TestALoneRankSaysWhatItWaitsFor(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	for _, tc := range []struct {
		rank int
		want string
	}{
		{1, "rank 1 of 2: waiting for rank 0 at " + addr + " (MASTER_ADDR:MASTER_PORT); giving up in "},
		{0, "rank 0 of 2: waiting on " + addr + " for rank 1 to join; giving up in "},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
		var mu sync.Mutex
		var heard []string
		opts := Options{WaitNotice: 100 * time.Millisecond, OnWait: func(msg string) {
			mu.Lock()
			heard = append(heard, msg)
			mu.Unlock()
		}}
		start := time.Now()
		_, err := Join(ctx, Env{Addr: addr, Rank: tc.rank, Size: 2}, NewHello(tc.rank, 2, nil), opts)
		cancel()
		mu.Lock()
		if err == nil || len(heard) != 1 || !strings.HasPrefix(heard[0], tc.want) {
			t.Errorf("rank %d: error %v, heard %q; want an error and once %q…", tc.rank, err, heard, tc.want)
		}
		mu.Unlock()
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("rank %d gave up after %v, want at its deadline", tc.rank, took)
		}
	}
}

// fakeRank joins rank 0 at addr as rank 1 of 2 by hand, then does what
// misbehave says with the connection.
func fakeRank(t *testing.T, addr string, misbehave func(net.Conn)) {
	t.Helper()
	go func() {
		c, err := dial(context.Background(), addr)
		if err != nil {
			return
		}
		body, _ := json.Marshal(NewHello(1, 2, nil))
		writeMessage(c, msgHello, body)
		readMessage(c)
		misbehave(c)
	}()
}

func TestASilentOrDeadRankFailsRankZeroWithinTheDeadline(t *testing.T) {
	opts := Options{HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: 400 * time.Millisecond}
	for _, tc := range []struct {
		name, want string
		misbehave  func(net.Conn)
	}{
		{"stopped", "sent nothing for", func(c net.Conn) { time.Sleep(5 * time.Second); c.Close() }},
		{"killed", "is gone: ", func(c net.Conn) { time.Sleep(100 * time.Millisecond); c.Close() }},
	} {
		t.Run("a rank "+tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			fakeRank(t, addr, tc.misbehave)
			p, err := Join(ctx, Env{Addr: addr, Rank: 0, Size: 2}, NewHello(0, 2, nil), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			start := time.Now()
			err = p.AllReduceF32(ctx, []float32{1})
			var pe *PeerError
			if !errors.As(err, &pe) || pe.Rank != 1 || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want a PeerError naming rank 1 that says %q", err, tc.want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("the failure took %v, past the heartbeat timeout of %v", d, opts.HeartbeatTimeout)
			}
		})
	}
}

func TestTorchrunsEnvironment(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		ok   bool
		want string // the error, or the Env printed
	}{
		{map[string]string{}, false, ""},
		{map[string]string{"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}, true, "{10.0.0.1:29500 1 2 1}"},
		{map[string]string{"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, true, "{h:1 1 2 0}"},
		{map[string]string{"WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, true, "RANK is unset"},
		{map[string]string{"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, true, "RANK=2 is not below WORLD_SIZE=2"},
		{map[string]string{"WORLD_SIZE": "two", "RANK": "0"}, true, `WORLD_SIZE="two" is not a whole number`},
		{map[string]string{"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "1"}, true, "MASTER_ADDR is unset"},
		// Every problem at once, each naming its variable.
		{map[string]string{"WORLD_SIZE": "2", "RANK": "5", "MASTER_PORT": "abc"}, true, `RANK=5 is not below WORLD_SIZE=2 (ranks are 0..WORLD_SIZE−1); MASTER_PORT="abc" is not a whole number in 1..65535; MASTER_ADDR is unset`},
		{map[string]string{"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "0"}, true, `MASTER_PORT="0" is not a whole number in 1..65535`},
		// RANK alone is a half-set environment, not a run of one process.
		{map[string]string{"RANK": "1"}, true, "WORLD_SIZE is unset"},
	} {
		env, ok, err := EnvFrom(func(k string) string { return tc.env[k] })
		got := fmt.Sprint(env)
		if err != nil {
			got = err.Error()
		}
		if ok != tc.ok || !strings.Contains(got, tc.want) {
			t.Errorf("%v: ok %v, %s; want ok %v and %q", tc.env, ok, got, tc.ok, tc.want)
		}
	}
}

// BenchmarkOneByteAllGatherOverTCP is what vkern train's stop agreement
// (gpt.Parallel.Stopping) costs a step in a multi-process run: one byte
// from each of two ranks on loopback TCP, gathered on both.
func BenchmarkOneByteAllGatherOverTCP(b *testing.B) {
	ctx := context.Background()
	peers := twoPeersOverTCP(b, ctx, nil)
	done := make(chan error)
	go func() {
		for i := 0; i < b.N; i++ {
			if _, err := peers[1].AllGather(ctx, []byte{0}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := peers[0].AllGather(ctx, []byte{0}); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
