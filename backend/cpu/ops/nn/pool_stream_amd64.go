//go:build amd64 && !purego

package nn

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

var poolStreamAVX = cpu.X86.HasAVX

//go:noescape
func poolStreamCopyAVX(dst, src *float32, n int)

// PoolStreamCopy copies src to dst (len(dst) ≥ len(src)), storing the
// 32-byte-aligned middle of dst with non-temporal stores, which write
// whole lines to memory without reading them first and leave them out
// of the cache; the unaligned head and the tail are plain stores. It
// reports false, copying nothing, where there is no such loop.
func PoolStreamCopy(dst, src []float32) bool {
	if !poolStreamAVX {
		return false
	}
	n := len(src)
	dst = dst[:n]
	head := int((32-uintptr(unsafe.Pointer(unsafe.SliceData(dst)))%32)%32) / 4
	if uintptr(unsafe.Pointer(unsafe.SliceData(dst)))%4 != 0 || head >= n {
		copy(dst, src)
		return true
	}
	copy(dst[:head], src[:head])
	body := (n - head) &^ 31
	if body > 0 {
		poolStreamCopyAVX(&dst[head], &src[head], body)
	}
	copy(dst[head+body:], src[head+body:])
	return true
}
