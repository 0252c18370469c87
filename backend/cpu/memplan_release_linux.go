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
