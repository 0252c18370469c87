//go:build !linux

package cpu

import "unsafe"

// releasePages is a no-op off Linux: retired recording buffers stay
// resident until the recording ends (memplan_release_linux.go).
func releasePages(unsafe.Pointer, int) {}
