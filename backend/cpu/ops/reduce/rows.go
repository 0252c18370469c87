package reduce

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/vmath"
)

// Float32 row kernels of Softmax and LayerNormalization over contiguous
// rows. On amd64 with AVX2 and FMA the body of a row (its length rounded
// down to a multiple of 8) runs in assembly (rows_amd64.s) and the rest in
// Go with the same arithmetic; where vmath runs its AVX-512 loops
// (use512), maxRow32 and scaleRow32 take the whole row in sixteen-lane
// assembly with masked tails instead; elsewhere, or with useAVX2 off, all
// of it runs in Go.

// maxRow32 returns the largest element of a non-empty row. A NaN may or
// may not win; Softmax turns a row holding one into NaNs either way.
func maxRow32(x []float32) float32 {
	if use512 && len(x) >= 16 {
		return vmath.MaxRow512(x)
	}
	m, i := x[0], 0
	if useAVX2 && len(x) >= 8 {
		i = len(x) &^ 7
		m = maxRowAVX2(&x[0], i)
	}
	for _, v := range x[i:] {
		if v > m {
			m = v
		}
	}
	return m
}

// scaleRow32 sets x[i] = float32(float64(x[i])·s), the product rounded
// once.
func scaleRow32(x []float32, s float64) {
	if use512 && len(x) > 0 {
		vmath.ScaleRow512(x, s)
		return
	}
	i := 0
	if useAVX2 && len(x) >= 8 {
		i = len(x) &^ 7
		scaleRowAVX2(&x[0], i, s)
	}
	for j, v := range x[i:] {
		x[i+j] = float32(float64(v) * s)
	}
}

// statsRow32 returns Σ(x − x0) and Σ(x − x0)² over the row, in float64
// (for float32 data of similar magnitudes the differences and their
// squares are exact in float64).
func statsRow32(x []float32, x0 float64) (s, q float64) {
	i := 0
	if useAVX2 && len(x) >= 8 {
		i = len(x) &^ 7
		s, q = statsRowAVX2(&x[0], i, x0)
	}
	var s0, s1, q0, q1 float64
	for ; i+2 <= len(x); i += 2 {
		d0, d1 := float64(x[i])-x0, float64(x[i+1])-x0
		s0 += d0
		s1 += d1
		q0 += d0 * d0
		q1 += d1 * d1
	}
	if i < len(x) {
		d := float64(x[i]) - x0
		s0 += d
		q0 += d * d
	}
	return s + (s0 + s1), q + (q0 + q1)
}

// affineRow32 writes ((x − mHi) − mLo)·inv·scale + bias to y (bias may be
// nil), where mHi + mLo = m with mHi = float32(m): x − mHi is exact for the
// elements near the mean, so rows whose mean is large next to their spread
// lose no accuracy. scale and bias have at least len(x) elements. The
// assembly loop prefetches pf bytes past y and 2·pf past x
// (affineRowAVX2).
func affineRow32(x, y []float32, m, inv float64, scale, bias []float32, pf int) {
	n := len(x)
	y, scale = y[:n], scale[:n]
	if bias != nil {
		bias = bias[:n]
	}
	mHi := float32(m)
	c := [3]float32{mHi, float32(m - float64(mHi)), float32(inv)}
	i := 0
	if useAVX2 && n >= 8 {
		i = n &^ 7
		var b *float32
		if bias != nil {
			b = &bias[0]
		}
		affineRowAVX2(&x[0], &y[0], &scale[0], b, i, &c, pf)
	}
	if bias == nil {
		for ; i < n; i++ {
			y[i] = ((x[i] - c[0]) - c[1]) * c[2] * scale[i]
		}
		return
	}
	for ; i < n; i++ {
		y[i] = ((x[i]-c[0])-c[1])*c[2]*scale[i] + bias[i]
	}
}

// layerNormRows32 normalises rows [lo, hi) of size > 0 elements from x
// into y and stores each row's mean and inverse standard deviation
// (statistics in float64, shifted by the row's first element; population
// variance, at least 0). The sums of row o+1 are taken before row o is
// written, so that they overlap the square root and division of row o.
func layerNormRows32(x, y []float32, lo, hi, size int, eps float64, scale, bias []float32, mean, invStd []float64) {
	if lo >= hi {
		return
	}
	fn := float64(size)
	row := x[lo*size : (lo+1)*size]
	x0 := float64(row[0])
	s, q := statsRow32(row, x0)
	for o := lo; o < hi; o++ {
		md := s / fn
		inv := 1 / math.Sqrt(max(q/fn-md*md, 0)+eps)
		m := x0 + md
		mean[o], invStd[o] = m, inv
		if o+1 < hi {
			next := x[(o+1)*size : (o+2)*size]
			x0 = float64(next[0])
			s, q = statsRow32(next, x0)
		}
		pf := 0 // the next row's destination, and x of the row after it
		if o+1 < hi {
			pf = 4 * size
		}
		affineRow32(x[o*size:(o+1)*size], y[o*size:(o+1)*size], m, inv, scale, bias, pf)
	}
}

// runRows is parallelRows for a Chunker (kept in a node's state, so that
// the fan-out allocates nothing): the same split of rows rows of rowSize
// elements.
func runRows(rows, rowSize int, t kern.Chunker) {
	workers := kern.Workers()
	if chunks := rows * max(rowSize, 1) / parallelGrain; chunks < workers {
		workers = chunks
	}
	kern.RunTask("reduce worker", rows, min(workers, rows), t)
}
