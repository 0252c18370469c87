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

// prefaultPages asks for transparent huge pages for the n bytes at p and
// maps every page of them now, writable, so that the kernels of an arena's
// first run do not take a page fault (and the kernel's zeroing of a page)
// on each 4 KiB they first write: in ViT-B/16's step that was 1,819 faults
// per Softmax call and more than half of its time (docs/large-models.md,
// "Where the step-versus-isolated gap comes from"). Huge pages where the
// host offers them on request (THP "madvise", as the importer asks for the
// weights): a streaming kernel then walks the page tables once per 2 MiB
// rather than per 4 KiB (ViT-B/16's memory-bound ops 10-20% faster on one
// core). Where the kernel has no MADV_POPULATE_WRITE (before Linux 5.14),
// one byte of each page is written: the storage is fresh from make, zero,
// and stays so. The advice covers the whole pages inside the range (an
// arena from make is page-aligned), the partial ones at its ends are
// written.
func prefaultPages(p unsafe.Pointer, n int) {
	if n <= 0 {
		return
	}
	if b := wholePages(p, n); b != nil {
		_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
		if syscall.Madvise(b, madvPopulateWrite) == nil {
			// The partial pages at the two ends.
			*(*byte)(p) = 0
			*(*byte)(unsafe.Add(p, n-1)) = 0
			return
		}
	}
	touchPages(p, n)
}
