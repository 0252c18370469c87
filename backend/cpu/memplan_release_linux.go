package cpu

import (
	"syscall"
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
	page := uintptr(syscall.Getpagesize())
	base := uintptr(p)
	lo := (base + page - 1) &^ (page - 1)
	hi := (base + uintptr(n)) &^ (page - 1)
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(unsafe.Slice((*byte)(unsafe.Add(p, lo-base)), hi-lo), syscall.MADV_DONTNEED)
}

// madvPopulateWrite is Linux's MADV_POPULATE_WRITE (5.14 and later).
const madvPopulateWrite = 23

// prefaultPages maps every page of the n bytes at p now, writable, so that
// the kernels of the arena's first run do not take a page fault (and the
// kernel's zeroing of the page) on each 4 KiB they first write: on the
// ViT-B/16 step that was ~21,800 faults in Softmax alone and half its
// time (docs/large-models.md, "Page faults in the first arena run").
// Where the kernel has no MADV_POPULATE_WRITE, one byte of each page is
// written (the storage is fresh from make, so it is zero and stays so).
func prefaultPages(p unsafe.Pointer, n int) {
	if n <= 0 {
		return
	}
	if syscall.Madvise(unsafe.Slice((*byte)(p), n), madvPopulateWrite) == nil {
		return
	}
	touchPages(p, n)
}
