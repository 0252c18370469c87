package kern

import (
	"sync"

	"github.com/onnxtrain/onnxtrain/graph"
)

// scratchBufs keeps a few float scratch buffers of the kernels (partial
// sums, per-chunk element-type sums, row statistics) alive between calls,
// so that a training step's calls allocate none: a free list, not a
// sync.Pool, which every garbage collection empties. At most scratchKept
// of each type are kept.
var scratchBufs struct {
	mu     sync.Mutex
	free32 [][]float32
	free64 [][]float64
}

const scratchKept = 8

// Scratch returns a zeroed buffer of n elements, reused from an earlier
// call when one large enough was given back; give it back with
// ReleaseScratch once the kernel is done with it.
func Scratch[F ~float32 | ~float64](n int) []F {
	var out []F
	scratchBufs.mu.Lock()
	switch p := any(&out).(type) {
	case *[]float32:
		*p = takeScratch(&scratchBufs.free32, n)
	case *[]float64:
		*p = takeScratch(&scratchBufs.free64, n)
	}
	scratchBufs.mu.Unlock()
	if out == nil {
		return make([]F, n)
	}
	clear(out)
	return out
}

// ReleaseScratch gives back a buffer from Scratch.
func ReleaseScratch[F ~float32 | ~float64](buf []F) {
	scratchBufs.mu.Lock()
	switch b := any(&buf).(type) {
	case *[]float32:
		keepScratch(&scratchBufs.free32, *b)
	case *[]float64:
		keepScratch(&scratchBufs.free64, *b)
	}
	scratchBufs.mu.Unlock()
}

// takeScratch removes from *free the smallest buffer of at least n
// elements and returns it cut to n, or nil if none is that large.
func takeScratch[T float32 | float64](free *[][]T, n int) []T {
	best := -1
	for i, b := range *free {
		if cap(b) >= n && (best < 0 || cap(b) < cap((*free)[best])) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	b := (*free)[best]
	last := len(*free) - 1
	(*free)[best] = (*free)[last]
	*free = (*free)[:last]
	return b[:n]
}

// keepScratch adds b to *free, in place of the smallest kept buffer when
// scratchKept are kept already (if b is larger).
func keepScratch[T float32 | float64](free *[][]T, b []T) {
	if cap(b) == 0 {
		return
	}
	if len(*free) < scratchKept {
		*free = append(*free, b)
		return
	}
	small := 0
	for i, k := range *free {
		if cap(k) < cap((*free)[small]) {
			small = i
		}
	}
	if cap((*free)[small]) < cap(b) {
		(*free)[small] = b
	}
}

// Grow returns buf cut to n elements, or a new slice of n when buf's
// capacity is short (its contents are then not carried over): per-node
// state that a kernel sizes for the current shape.
func Grow[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	return buf[:n]
}

// Float64sInto returns t's elements as float64 in dst, grown as needed (a
// kernel keeps dst in its node's state, so that reading a parameter
// allocates nothing per run).
func Float64sInto(dst []float64, t *graph.Tensor) []float64 {
	n := t.Size()
	out := Grow(dst, n)
	switch s := t.Data.(type) {
	case []float32:
		for i, v := range s[:min(n, len(s))] {
			out[i] = float64(v)
		}
		clear(out[min(n, len(s)):])
	case []float64:
		clear(out[copy(out, s):])
	default:
		for i := range out {
			out[i] = t.Float(i)
		}
	}
	return out
}
