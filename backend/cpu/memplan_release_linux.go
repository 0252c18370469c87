package cpu

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

// pagesReleased says that releasePages hands pages back on this platform.
const pagesReleased = true

// releasePages hands the whole pages of the n bytes at p back to the OS
// (MADV_DONTNEED: they read as zeros when next touched) while the memory
// stays allocated. The recording run keeps each retired buffer for a later
// request of the same size; without this its resident size is every buffer
// it ever held, above the plan's peak, where it should be the live set.
// The buffers hold no pointers, so the collector never reads them.
func releasePages(p unsafe.Pointer, n int) {
	if n < releaseMinBytes {
		return
	}
	if b := wholePages(p, n); b != nil {
		_ = syscall.Madvise(b, syscall.MADV_DONTNEED)
	}
}

// wholePages is the whole pages inside the n bytes at p (nil if none),
// the range madvise may act on without touching the bytes around it.
func wholePages(p unsafe.Pointer, n int) []byte {
	page := uintptr(syscall.Getpagesize())
	base := uintptr(p)
	lo := (base + page - 1) &^ (page - 1)
	hi := (base + uintptr(n)) &^ (page - 1)
	if hi <= lo {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(p, lo-base)), hi-lo)
}

// madvPopulateWrite is Linux's MADV_POPULATE_WRITE (5.14 and later).
const madvPopulateWrite = 23

// Huge-page policies of the arena (ONNXTRAIN_ARENA_HUGEPAGES).
const (
	// hugePagesEager populates huge pages whatever they cost (the default).
	hugePagesEager = iota
	// hugePagesAuto populates huge pages while they come at least at
	// hugeMinRate, and 4 KiB pages, advised for khugepaged, after.
	hugePagesAuto
	// hugePagesOff populates 4 KiB pages and never asks for huge ones.
	hugePagesOff
)

// arenaHugePages is the policy: ONNXTRAIN_ARENA_HUGEPAGES=auto or off,
// eager otherwise. Eager is the default because the cost of slow fresh huge
// pages is paid once either way: up front (one slow step), or spread over a
// run's first minutes in 4 KiB pages (memory-bound ops 10-19% slower) plus
// khugepaged's collapsing on the same cores (docs/large-models.md).
var arenaHugePages = func() int {
	switch os.Getenv("ONNXTRAIN_ARENA_HUGEPAGES") {
	case "auto":
		return hugePagesAuto
	case "off":
		return hugePagesOff
	}
	return hugePagesEager
}()

const (
	// hugeChunk is the unit in which huge pages are populated and timed.
	hugeChunk = 2 << 20
	// hugeMinRate (bytes a second) and hugeSlack: auto populates huge
	// pages while the time spent stays under hugeSlack plus the bytes done
	// at hugeMinRate. On this VM 4 KiB pages came at 3.9 GB/s, huge pages
	// from memory freed moments before at 0.9 GB/s, and fresh ones at
	// 0.07 GB/s (30 ms for each 2 MiB: the host faulting in every 4 KiB
	// of blocks the guest had handed back, docs/large-models.md).
	hugeMinRate = 1 << 30
	hugeSlack   = 20 * time.Millisecond
)

// prefaultPages maps every page of the n bytes at p now, writable, so that
// the kernels of an arena's first run do not take a page fault (and the
// kernel's zeroing of a page) on each 4 KiB they first write: in ViT-B/16's
// step that was 1,819 faults per Softmax call and more than half of its
// time (docs/large-models.md, "Where the step-versus-isolated gap comes
// from"). It asks for transparent huge pages too (THP "madvise", as the
// importer asks for the weights): a streaming kernel then walks the page
// tables once per 2 MiB rather than per 4 KiB (ViT-B/16's memory-bound ops
// 10-20% faster on one core).
//
// Huge pages are populated 2 MiB at a time whatever they cost (on this VM
// fresh ones take 5-8 s of system time for a 700 MiB arena: the first
// planned step is 10 s long). ONNXTRAIN_ARENA_HUGEPAGES=auto populates
// them only while they come fast (populateHuge) and the rest in 4 KiB pages
// (0.18 s for 700 MiB), then advised for huge pages, which khugepaged
// collapses in the background at the kernel's pace; =off never asks for
// them. Where the kernel has no
// MADV_POPULATE_WRITE (before Linux 5.14), one byte of each page is
// written: the storage is fresh from make, zero, and stays so. The advice
// covers the whole pages inside the range (an arena from make is
// page-aligned), the partial ones at its ends are written.
func prefaultPages(p unsafe.Pointer, n int) {
	prefaultPagesWith(p, n, arenaHugePages)
}

// prefaultPagesWith is prefaultPages under a policy; it returns the bytes
// populated after asking for huge pages (for the tests).
func prefaultPagesWith(p unsafe.Pointer, n, policy int) (huge int) {
	if n <= 0 {
		return 0
	}
	b := wholePages(p, n)
	if b == nil {
		touchPages(p, n)
		return 0
	}
	if policy != hugePagesOff {
		var ok bool
		if huge, ok = populateHuge(b, policy == hugePagesEager); !ok {
			touchPages(p, n)
			return huge
		}
	}
	if rest := b[huge:]; len(rest) > 0 {
		if syscall.Madvise(rest, madvPopulateWrite) != nil {
			touchPages(unsafe.Pointer(unsafe.SliceData(rest)), len(rest))
		}
		if policy != hugePagesOff {
			// Populated already: khugepaged may collapse them later.
			_ = syscall.Madvise(rest, syscall.MADV_HUGEPAGE)
		}
	}
	// The partial pages at the two ends.
	*(*byte)(p) = 0
	*(*byte)(unsafe.Add(p, n-1)) = 0
	return huge
}

// populateHuge advises b for huge pages and populates it, a chunk at a
// time up to each 2 MiB boundary, while the time spent stays under
// hugeSlack plus the bytes done at hugeMinRate (all of it when eager). It
// returns the bytes done, and false when the kernel has no
// MADV_POPULATE_WRITE.
func populateHuge(b []byte, eager bool) (int, bool) {
	start := time.Now()
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	done := 0
	for done < len(b) {
		if !eager && done > 0 && time.Since(start) > hugeSlack+time.Duration(float64(done)/hugeMinRate*float64(time.Second)) {
			break
		}
		end := min(len(b), done+hugeChunk-int((base+uintptr(done))%hugeChunk))
		c := b[done:end]
		_ = syscall.Madvise(c, syscall.MADV_HUGEPAGE)
		if syscall.Madvise(c, madvPopulateWrite) != nil {
			return done, false
		}
		done = end
	}
	return done, true
}
