package gradient

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/reduce"
	"github.com/onnxtrain/onnxtrain/backend/cpu/vmath"
)

// sceRowsTask is the common case of SoftmaxCrossEntropyLossGrad, float32
// scores [N, C] (a language model's logits over its vocabulary) with a
// gradient into the loss only: for row k with target t, weight w_k and
// loss scale s_k,
//
//	d scores[k, c] = p[k, c]·w_k·s_k - [c = t]·w_k·s_k,   p = softmax(row k)
//
// one visit of each row: its largest element (AVX2), e^(x-m) written
// straight into the gradient with the sum kept in float64 (AVX2), then the
// row scaled by w_k·s_k/Σ while it is still in cache, and the target's
// element corrected. Rows are split over the cores. The generic loop
// (sceBackward) computes the same in float64 with a softmax row of
// scratch, several passes and one core: at 512×50257 that was most of a
// second.
type sceRowsTask struct {
	x, dx  []float32
	c      int
	labels []int64
	w, s   []float64
}

// sceGrain is the fewest scores worth a goroutine.
const sceGrain = 1 << 15

func (t *sceRowsTask) Chunk(lo, hi int) {
	for k := lo; k < hi; k++ {
		row := t.x[k*t.c : (k+1)*t.c]
		d := t.dx[k*t.c : (k+1)*t.c]
		ws := t.w[k] * t.s[k]
		if ws == 0 {
			clear(d)
			continue
		}
		// The exponentials' loop prefetches row k+1 of the scores
		// and of the gradient into L2, so that its maximum does not
		// wait for memory, nor its stores each for a line.
		var next, nextD []float32
		if k+1 < hi {
			next = t.x[(k+1)*t.c : (k+2)*t.c]
			nextD = t.dx[(k+1)*t.c : (k+2)*t.c]
		}
		z := vmath.ExpShiftAhead32(d, row, float64(reduce.MaxRow32(row)), next, nextD)
		reduce.ScaleRow32(d, ws/z)
		l := t.labels[k]
		d[l] = float32(float64(d[l]) - ws)
	}
}

// run computes the gradient of rows [0, n).
func (t *sceRowsTask) run(n int) {
	workers := kern.Workers()
	if chunks := n * max(t.c, 1) / sceGrain; chunks < workers {
		workers = chunks
	}
	kern.RunTask("SoftmaxCrossEntropyLossGrad", n, max(1, min(workers, n)), t)
	t.x, t.dx, t.labels, t.w, t.s = nil, nil, nil, nil, nil
}
