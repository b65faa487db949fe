package kserver

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// The arena is the shared memory that WRITE and READ move bulk data through
// (PROTOCOL.md, "Arena"): an anonymous memfd that the host maps once, at
// its largest size, and hands to every server it starts as file descriptor
// 3. The file starts small and grows on demand, one fallocate at a time, so
// that memory is committed before it is touched and a machine out of memory
// gives an error here instead of a SIGBUS in a copy. It never shrinks while
// the Client lives.
//
// Ranges of the arena are reserved by the calls that use them, first fit,
// and released when the server has answered (WRITE) or the host has copied
// the data out (READ). A call that finds no room waits for one.
type arena struct {
	file *os.File
	mem  []byte // the whole mapping, max bytes long; only [0, size) is backed

	mu      sync.Mutex
	size    uint64 // the file's size: how much of mem may be touched
	max     uint64
	free    []span        // sorted by offset, coalesced, inside [0, size)
	room    chan struct{} // closed and replaced when a range is released
	users   int           // copies in progress, which hold off the unmap
	closing bool          // close has been called; unmap when users reaches 0
	unmaped bool

	// grow is unix.Fallocate; tests replace it to simulate a full machine.
	grow func(fd int, mode uint32, off, n int64) error
}

type span struct{ off, n uint64 }

// arenaAlign aligns every range, so that copies start on a cache line.
const arenaAlign = 64

// arenaFirstBytes is the arena's size when a Client starts it.
const arenaFirstBytes = 1 << 20

// newArena creates an arena that may grow to max bytes.
func newArena(max uint64) (*arena, error) {
	max = alignUp(max)
	fd, err := unix.MemfdCreate("vkern-arena", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("kserver: creating the shared-memory arena (memfd_create): %w", err)
	}
	file := os.NewFile(uintptr(fd), "vkern-arena")
	mem, err := unix.Mmap(fd, 0, int(max), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("kserver: mapping the shared-memory arena of up to %d bytes: %w", max, err)
	}
	a := &arena{file: file, mem: mem, max: max, room: make(chan struct{}), grow: unix.Fallocate}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.growLocked(min(max, arenaFirstBytes)); err != nil {
		a.closing = true
		a.unmapLocked()
		return nil, err
	}
	return a, nil
}

func alignUp(n uint64) uint64 { return (n + arenaAlign - 1) &^ (arenaAlign - 1) }

// reserve finds n bytes, growing the arena or waiting for a release as
// needed. mayWait false makes it return ok = false instead of waiting.
func (a *arena) reserve(cx callCtx, n uint64, mayWait bool) (off uint64, ok bool, err error) {
	n = alignUp(max(n, 1))
	if n > a.max {
		return 0, false, fmt.Errorf("kserver: a range of %d bytes does not fit the arena of at most %d bytes (Config.ArenaBytes)", n, a.max)
	}
	for {
		a.mu.Lock()
		if a.closing {
			a.mu.Unlock()
			return 0, false, fmt.Errorf("kserver: the arena: %w", ErrClosed)
		}
		if off, ok := a.takeLocked(n); ok {
			a.mu.Unlock()
			return off, true, nil
		}
		if a.size < a.max {
			want := min(a.max, max(2*a.size, a.size+n))
			if err := a.growLocked(want); err != nil {
				a.mu.Unlock()
				return 0, false, err
			}
			off, ok := a.takeLocked(n)
			a.mu.Unlock()
			if ok {
				return off, true, nil
			}
			continue
		}
		room := a.room
		a.mu.Unlock()
		if !mayWait {
			return 0, false, nil
		}
		if err := cx.block(room); err != nil {
			return 0, false, fmt.Errorf("kserver: waiting for %d bytes of the arena (all %d in use by calls in flight): %w", n, a.max, err)
		}
	}
}

// takeLocked takes n bytes first fit.
func (a *arena) takeLocked(n uint64) (uint64, bool) {
	for i, s := range a.free {
		if s.n < n {
			continue
		}
		if s.n == n {
			a.free = append(a.free[:i], a.free[i+1:]...)
		} else {
			a.free[i] = span{s.off + n, s.n - n}
		}
		return s.off, true
	}
	return 0, false
}

// growLocked commits the file up to size bytes and adds the new bytes to
// the free list.
func (a *arena) growLocked(size uint64) error {
	old := a.size
	if err := a.file.Truncate(int64(size)); err != nil {
		return fmt.Errorf("kserver: growing the shared-memory arena from %d to %d bytes: %w: %w", old, size, ErrOutOfMemory, err)
	}
	if err := a.grow(int(a.file.Fd()), 0, int64(old), int64(size-old)); err != nil {
		a.file.Truncate(int64(old))
		return fmt.Errorf("kserver: growing the shared-memory arena from %d to %d bytes: %w: %w", old, size, ErrOutOfMemory, err)
	}
	a.size = size
	a.insertLocked(span{old, size - old})
	return nil
}

// release gives back the range reserve returned for n bytes.
func (a *arena) release(off, n uint64) {
	a.mu.Lock()
	a.insertLocked(span{off, alignUp(max(n, 1))})
	close(a.room)
	a.room = make(chan struct{})
	a.mu.Unlock()
}

// insertLocked adds s to the free list, merging it with its neighbours.
func (a *arena) insertLocked(s span) {
	i := 0
	for i < len(a.free) && a.free[i].off < s.off {
		i++
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].n == s.off {
		a.free[i-1].n += s.n
		if i < len(a.free) && s.off+s.n == a.free[i].off {
			a.free[i-1].n += a.free[i].n
			a.free = append(a.free[:i], a.free[i+1:]...)
		}
		return
	}
	if i < len(a.free) && s.off+s.n == a.free[i].off {
		a.free[i] = span{s.off, s.n + a.free[i].n}
		return
	}
	a.free = append(a.free, span{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = s
}

// bytes returns the arena memory [off, off+n) for a copy, and done, which
// must be called when the copy is over. While any copy is in progress the
// mapping stays, even if the Client is being closed.
func (a *arena) bytes(off, n uint64) (b []byte, done func(), err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.unmaped {
		return nil, nil, fmt.Errorf("kserver: the arena: %w", ErrClosed)
	}
	a.users++
	return a.mem[off : off+n : off+n], a.doneCopy, nil
}

func (a *arena) doneCopy() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.users--
	if a.closing && a.users == 0 {
		a.unmapLocked()
	}
}

// inUse reports how many bytes are reserved.
func (a *arena) inUse() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	used := a.size
	for _, s := range a.free {
		used -= s.n
	}
	return used
}

// close unmaps the arena once no copy is in progress, and closes the file.
// Servers that still hold the file keep their own mapping until they exit.
func (a *arena) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing {
		return
	}
	a.closing = true
	close(a.room) // wake waiters so that they see closing
	a.room = make(chan struct{})
	if a.users == 0 {
		a.unmapLocked()
	}
}

func (a *arena) unmapLocked() {
	if a.unmaped {
		return
	}
	a.unmaped = true
	// Munmap fails only for a slice it did not map; a.mem is the one it did.
	_ = unix.Munmap(a.mem)
	a.mem = nil
	a.file.Close()
}
