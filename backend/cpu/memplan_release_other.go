//go:build !linux

package cpu

import "unsafe"

// pagesReleased says that releasePages hands pages back on this platform.
const pagesReleased = false

// releasePages is a no-op off Linux: retired recording buffers stay
// resident until the recording ends (memplan_release_linux.go).
func releasePages(unsafe.Pointer, int) {}
