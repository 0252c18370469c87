//go:build !linux

package cpu

import "unsafe"

// pagesReleased says that releasePages hands pages back on this platform.
const pagesReleased = false

// releasePages is a no-op off Linux: retired recording buffers stay
// resident until the recording ends (memplan_release_linux.go).
func releasePages(unsafe.Pointer, int) {}

// prefaultPages maps every page of the n bytes at p now (one byte of each
// written: the storage is fresh from make, zero, and stays so), so that the
// kernels of an arena's first run do not fault on them
// (memplan_release_linux.go).
func prefaultPages(p unsafe.Pointer, n int) { touchPages(p, n) }
