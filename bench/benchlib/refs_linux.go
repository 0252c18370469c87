package benchlib

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// newRefBuffers maps the references' storage outside the Go heap, advised
// for huge pages, so that release can hand its pages back at once
// (MADV_DONTNEED) and the process's resident size drops by all of it.
func newRefBuffers(gemmElems, triadElems int) (*refBuffers, error) {
	f32 := 4 * gemmElems
	f64 := 8 * triadElems
	size := 3*f32 + 3*f64
	mem, err := mapHuge(size) // in huge pages, as the step's operands are
	if err != nil {
		return nil, fmt.Errorf("benchlib: op-profile references: mapping %d MiB: %w (--op-profile-refs=false runs the profile without them)", size>>20, err)
	}
	f32s := func(off int) []float32 { return unsafe.Slice((*float32)(unsafe.Pointer(&mem[off])), gemmElems) }
	f64s := func(off int) []float64 { return unsafe.Slice((*float64)(unsafe.Pointer(&mem[off])), triadElems) }
	return &refBuffers{
		a: f32s(0), b: f32s(f32), c: f32s(2 * f32),
		x: f64s(3 * f32), y: f64s(3*f32 + f64), z: f64s(3*f32 + 2*f64),
		release: func() { _ = syscall.Madvise(mem, syscall.MADV_DONTNEED) },
		free:    func() { _ = syscall.Munmap(mem) },
	}, nil
}

// resetPeakRSS sets the process's peak resident size (VmHWM) to its
// present one (clear_refs 5, Linux 4.0 and later); false where it cannot.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}
