package cpu

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReleasePagesDropsWholePages: the whole pages inside a retired buffer
// go back to the OS and read as zeros afterwards (so the recorder's reuse,
// which clears them anyway, sees what it expects), the bytes of partial
// pages at its ends are kept, and a buffer under releaseMinBytes is left
// alone.
func TestReleasePagesDropsWholePages(t *testing.T) {
	page := os.Getpagesize()
	buf := make([]byte, 2*releaseMinBytes+3*page)
	for i := range buf {
		buf[i] = 7
	}
	off := page / 2 // start inside a page
	n := 2 * releaseMinBytes
	releasePages(unsafe.Pointer(&buf[off]), n)
	firstWhole := page // the first page boundary after off
	lastWhole := (off + n) / page * page
	require.Greater(t, lastWhole, firstWhole)
	zeros, sevens := 0, 0
	for i := firstWhole; i < lastWhole; i++ {
		if buf[i] == 0 {
			zeros++
		}
	}
	assert.Equal(t, lastWhole-firstWhole, zeros, "whole pages read as zeros")
	for i := off; i < firstWhole; i++ {
		if buf[i] == 7 {
			sevens++
		}
	}
	for i := lastWhole; i < off+n; i++ {
		if buf[i] == 7 {
			sevens++
		}
	}
	assert.Equal(t, (firstWhole-off)+(off+n-lastWhole), sevens, "partial pages at the ends kept")
	assert.Equal(t, byte(7), buf[0])
	assert.Equal(t, byte(7), buf[len(buf)-1])

	small := make([]byte, releaseMinBytes-1)
	for i := range small {
		small[i] = 9
	}
	releasePages(unsafe.Pointer(&small[0]), len(small))
	for _, b := range small {
		require.Equal(t, byte(9), b, "a buffer under releaseMinBytes is kept")
	}
}

// nonResident counts the pages of the n bytes at p that are not mapped in
// this process (mincore).
func nonResident(p unsafe.Pointer, n int) int {
	page := uintptr(os.Getpagesize())
	lo := uintptr(p) &^ (page - 1)
	hi := (uintptr(p) + uintptr(n) + page - 1) &^ (page - 1)
	vec := make([]byte, (hi-lo)/page)
	if _, _, errno := syscall.Syscall(syscall.SYS_MINCORE, lo, hi-lo, uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		panic(errno)
	}
	missing := 0
	for _, v := range vec {
		if v&1 == 0 {
			missing++
		}
	}
	return missing
}

// missingPages sums the pages of AddOneResident's results that were not
// mapped when the kernel received them.
var missingPages atomic.Int64

func init() {
	// AddOneResident is AddOne that first counts how many pages of the
	// storage it was given are not yet mapped (each would be a page fault
	// inside the kernel on its first write).
	kern.RegisterSpec(testDomain, "AddOneResident", kern.Spec{Fn: func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		out, err := kern.NewUninit(n, graph.Float32, in[0].Shape)
		if err != nil {
			return nil, err
		}
		y := out.Float32s()
		missingPages.Add(int64(nonResident(unsafe.Pointer(&y[0]), 4*len(y))))
		for i, v := range in[0].Float32s() {
			y[i] = v + 1
		}
		return result(n, out), nil
	}})
}

// TestArenaPagesFaultBeforeTheKernels: the arena's pages are mapped when it
// is allocated, so the kernels of its first run (the second run of a plan)
// receive resident storage and take no page fault writing it; before, each
// kernel faulted on every 4 KiB page of its output the first time (~1,800
// faults per ViT-B/16 Softmax call, half its time). Residency is read with
// mincore, which the race detector's own memory does not change.
func TestArenaPagesFaultBeforeTheKernels(t *testing.T) {
	const size = 2 << 20 // 8 MiB per value: 2,048 pages
	exe := compileTest(t, chainModel("AddOneResident", 6, size))
	in := map[string]*graph.Tensor{"x": ramp(size, 0)}
	for run := range 3 {
		missingPages.Store(0)
		out, err := exe.Run(context.Background(), in)
		require.NoError(t, err)
		require.Equal(t, float32(6), out["y"].Float32s()[0])
		require.Equal(t, float32(6+size-1), out["y"].Float32s()[size-1])
		t.Logf("run %d: %d pages of the kernels' storage not yet mapped", run, missingPages.Load())
		if run == 0 {
			continue // the recording run's tensors come from the heap
		}
		require.True(t, exe.MemoryStats().Planned)
		// The arena's two values are 2 × 2,048 pages.
		assert.Zero(t, missingPages.Load(), "run %d: the kernels receive unmapped arena pages", run)
	}
}

// smapsOf returns the AnonHugePages bytes and the VmFlags of the mapping
// that holds addr, from /proc/self/smaps (testutil.SmapsField).
func smapsOf(t *testing.T, addr uintptr) (huge int64, flags []string) {
	v, found := testutil.SmapsField(t, addr, "AnonHugePages")
	require.True(t, found, "no mapping in /proc/self/smaps holds %#x", addr)
	if v != "" { // a kernel without huge pages may not write the field
		kb, err := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
		require.NoError(t, err)
		huge = kb << 10
	}
	fl, _ := testutil.SmapsField(t, addr, "VmFlags")
	return huge, strings.Fields(fl)
}

// TestPrefaultPagesAsksForHugePages: a fresh arena's storage is mapped
// page by page, advised for transparent huge pages wherever the kernel has
// them (the mapping's "hg" flag; whether huge pages are then found depends
// on the host's setting and free memory), and every byte stays zero.
func TestPrefaultPagesAsksForHugePages(t *testing.T) {
	_, thpErr := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled")
	const n = 32 << 20
	buf := make([]byte, n)
	addr := uintptr(unsafe.Pointer(&buf[n/2]))
	before, _ := smapsOf(t, addr)
	prefaultPages(unsafe.Pointer(&buf[0]), n)
	after, flags := smapsOf(t, addr)
	t.Logf("AnonHugePages of the mapping: %d MiB before, %d MiB after; VmFlags %v", before>>20, after>>20, flags)
	assert.Zero(t, nonResident(unsafe.Pointer(&buf[0]), n), "every page mapped")
	if thpErr == nil { // a kernel without THP refuses the advice; there is no flag to see
		assert.Contains(t, flags, "hg", "the arena's mapping is advised for huge pages")
	}
	for i, b := range buf {
		if b != 0 {
			t.Fatalf("byte %d is %d after prefaultPages", i, b)
		}
	}
	runtime.KeepAlive(buf)
}

// TestPrefaultPagesPolicies: under every huge-page policy each page of a
// fresh buffer is mapped and every byte stays zero; eager populates all of
// it after asking for huge pages, auto at least its first chunk (then as
// long as huge pages come fast) and advises the rest too, off asks for
// none (the mapping has no "hg" flag).
func TestPrefaultPagesPolicies(t *testing.T) {
	_, thpErr := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled")
	const n = 8 << 20
	for _, c := range []struct {
		name   string
		policy int
	}{{"eager", hugePagesEager}, {"auto", hugePagesAuto}, {"off", hugePagesOff}} {
		t.Run(c.name, func(t *testing.T) {
			buf := make([]byte, n)
			huge := prefaultPagesWith(unsafe.Pointer(&buf[0]), n, c.policy)
			_, flags := smapsOf(t, uintptr(unsafe.Pointer(&buf[n/2])))
			t.Logf("%d of %d bytes populated as huge pages; VmFlags %v", huge, n, flags)
			assert.Zero(t, nonResident(unsafe.Pointer(&buf[0]), n), "every page mapped")
			whole := len(wholePages(unsafe.Pointer(&buf[0]), n))
			switch c.policy {
			case hugePagesEager:
				assert.Equal(t, whole, huge)
			case hugePagesAuto:
				assert.Positive(t, huge)
				assert.LessOrEqual(t, huge, whole)
			case hugePagesOff:
				assert.Zero(t, huge)
				assert.NotContains(t, flags, "hg")
			}
			if thpErr == nil && c.policy != hugePagesOff {
				assert.Contains(t, flags, "hg", "advised for huge pages")
			}
			for i, b := range buf {
				if b != 0 {
					t.Fatalf("byte %d is %d after prefaultPages", i, b)
				}
			}
			runtime.KeepAlive(buf)
		})
	}
}
