package oracle

import (
	"runtime"
	"sync"
)

// ChunkSize elements are handled by one goroutine at a time, both when
// inputs are drawn and when outputs are compared.
const ChunkSize = 1 << 18

// ForChunks calls fn(c, lo, hi) for each chunk c = [lo, hi) of [0, n), on
// every core, and returns when all are done. Chunks are numbered in order,
// so callers can merge per-chunk results deterministically.
func ForChunks(n int, fn func(c, lo, hi int)) {
	chunks := (n + ChunkSize - 1) / ChunkSize
	next := make(chan int, chunks)
	for c := 0; c < chunks; c++ {
		next <- c
	}
	close(next)
	var wg sync.WaitGroup
	for w := 0; w < min(chunks, runtime.GOMAXPROCS(0)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range next {
				fn(c, c*ChunkSize, min(n, (c+1)*ChunkSize))
			}
		}()
	}
	wg.Wait()
}
