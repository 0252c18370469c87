package benchlib

import (
	"syscall"
	"unsafe"
)

// hugeFloats returns n zero values outside the Go heap, advised for
// transparent huge pages (MADV_HUGEPAGE), and the function that unmaps
// them. The references (`bench --gemm`, `--stream`, the op profile's) use
// it because the step's operands live in huge pages (the executor's arena,
// the importer's weights): on 4 KiB pages the 2048³ GEMM ran 4–5% slower
// and the triad 12–15% slower on the 2-vCPU Intel Xeon (THP "madvise" set
// to "always" for the comparison, docs/large-models.md), which would
// understate the bars the ops are read against. Where the mapping fails it
// falls back to the Go heap.
func hugeFloats[T float32 | float64](n int) ([]T, func()) {
	var zero T
	size := n * int(unsafe.Sizeof(zero))
	if size == 0 {
		return nil, func() {}
	}
	mem, err := mapHuge(size)
	if err != nil {
		return make([]T, n), func() {}
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&mem[0])), n), func() { _ = syscall.Munmap(mem) }
}

// mapHuge maps size bytes of zeroed anonymous memory advised for huge
// pages: hugeFloats's storage, and the op profile's (newRefBuffers).
func mapHuge(size int) ([]byte, error) {
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, err
	}
	_ = syscall.Madvise(mem, syscall.MADV_HUGEPAGE)
	return mem, nil
}
