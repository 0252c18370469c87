package gradient

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/reduce"
	"github.com/onnxtrain/onnxtrain/graph"
)

// softmaxGradKernel returns SoftmaxGrad(dy, y) or LogSoftmaxGrad(dy, y),
// where y is the forward output. Attributes: axis (required) and coerce
// (1: the opset < 13 semantics, every dim from axis on is one row).
//
// Softmax: dx = y·(dy - Σ dy·y). LogSoftmax: dx = dy - exp(y)·Σ dy. Sums run
// along the softmax axis.
func softmaxGradKernel(log bool) kern.Kernel {
	return func(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		if err := kern.Need(n, in, 2); err != nil {
			return nil, err
		}
		dy, y := in[0], in[1]
		if err := sameFloat(n, dy, y, "dy"); err != nil {
			return nil, err
		}
		b, err := softmaxGradLayout(n, y.Shape)
		if err != nil {
			return nil, err
		}
		// dX over dY when the executor hands dY's storage over: each row
		// of dX is written after its sums read the row of dY.
		out := dy
		if !ctx.MayOverwrite(0) || !graph.SameShape(dy.Shape, y.Shape) {
			if out, err = kern.NewUninit(n, y.DType, y.Shape); err != nil { // every element is written
				return nil, err
			}
		}
		switch ys := y.Data.(type) {
		case []float32:
			softmaxBackwardWith(kern.State[softmaxGradTask[float32]](n), log, dy.Data.([]float32), ys, out.Data.([]float32), b)
		case []float64:
			softmaxBackwardWith(kern.State[softmaxGradTask[float64]](n), log, dy.Data.([]float64), ys, out.Data.([]float64), b)
		}
		return kern.Results(n, out), nil
	}
}

// softmaxGradLayout reads the axis and coerce attributes.
func softmaxGradLayout(n *graph.Node, shape []int) (layout, error) {
	rank := len(shape)
	if rank == 0 {
		return layout{1, 1, 1}, nil
	}
	if !n.HasAttr("axis") {
		return layout{}, n.Errorf("attribute axis is required")
	}
	axis := int(n.AttrInt("axis", 0))
	if n.AttrInt("coerce", 0) != 0 {
		if axis < -rank || axis > rank {
			return layout{}, n.Errorf("axis %d is out of range for rank %d", axis, rank)
		}
		if axis < 0 {
			axis += rank
		}
		return layout{outer: product(shape[:axis]), r: product(shape[axis:]), inner: 1}, nil
	}
	a, err := kern.NormAxis(n, axis, rank)
	if err != nil {
		return layout{}, err
	}
	return layout{outer: product(shape[:a]), r: shape[a], inner: product(shape[a+1:])}, nil
}

// softmaxBackward writes the softmax (or log-softmax) gradient into dx.
// Contiguous ranges of outer indices go to the cores; rows are
// independent, so the split does not change the results.
func softmaxBackward[F float](log bool, dy, y, dx []F, b layout) {
	softmaxBackwardWith(new(softmaxGradTask[F]), log, dy, y, dx, b)
}

// softmaxGradTask is softmaxBackward's work over outer indices, kept in a
// node's state.
type softmaxGradTask[F float] struct {
	log       bool
	dy, y, dx []F
	b         layout
}

// Chunk writes the gradient of outer indices [lo, hi).
func (t *softmaxGradTask[F]) Chunk(lo, hi int) {
	b := t.b
	size := b.r * b.inner
	if b.inner == 1 {
		softmaxBackwardContiguous(t.log, t.dy[lo*size:hi*size], t.y[lo*size:hi*size], t.dx[lo*size:hi*size], size)
		return
	}
	softmaxBackwardRows(t.log, t.dy, t.y, t.dx, b, lo, hi, make([]float64, b.inner))
}

// softmaxBackwardWith is softmaxBackward with the work object t (a
// node's, kept between runs).
func softmaxBackwardWith[F float](t *softmaxGradTask[F], log bool, dy, y, dx []F, b layout) {
	size := b.r * b.inner
	if b.outer == 0 || size == 0 {
		return
	}
	workers := gradWorkers(b.outer, 4*size)
	*t = softmaxGradTask[F]{log: log, dy: dy, y: y, dx: dx, b: b}
	kern.RunTask("SoftmaxGrad", b.outer, workers, t)
	*t = softmaxGradTask[F]{}
}

// softmaxBackwardRows is softmaxBackward on outer indices [lo, hi) of a
// layout with inner > 1, with acc (b.inner elements) as scratch.
func softmaxBackwardRows[F float](log bool, dy, y, dx []F, b layout, lo, hi int, acc []float64) {
	size := b.r * b.inner
	for o := lo; o < hi; o++ {
		g := dy[o*size : (o+1)*size]
		v := y[o*size : (o+1)*size]
		d := dx[o*size : (o+1)*size]
		clear(acc)
		for k := 0; k < b.r; k++ {
			gr := g[k*b.inner : (k+1)*b.inner]
			if log {
				for i, e := range gr {
					acc[i] += float64(e)
				}
				continue
			}
			vr := v[k*b.inner : (k+1)*b.inner]
			for i, e := range gr {
				acc[i] += float64(e) * float64(vr[i])
			}
		}
		for k := 0; k < b.r; k++ {
			gr := g[k*b.inner : (k+1)*b.inner]
			vr := v[k*b.inner : (k+1)*b.inner]
			dr := d[k*b.inner : (k+1)*b.inner]
			if log {
				for i, e := range gr {
					dr[i] = F(float64(e) - math.Exp(float64(vr[i]))*acc[i])
				}
				continue
			}
			for i, e := range gr {
				dr[i] = F(float64(vr[i]) * (float64(e) - acc[i]))
			}
		}
	}
}

// softmaxBackwardContiguous is softmaxBackwardRows for a softmax over the
// last axis: rows of size contiguous elements, each read twice while it
// sits in L1 (float32 softmax rows through SoftmaxGradRows32).
func softmaxBackwardContiguous[F float](log bool, dy, y, dx []F, size int) {
	if !log {
		if g32, ok := any(dy).([]float32); ok {
			SoftmaxGradRows32(g32, any(y).([]float32), any(dx).([]float32), size)
			return
		}
	}
	for o := 0; o+size <= len(dy); o += size {
		g, v, d := dy[o:o+size], y[o:o+size], dx[o:o+size]
		v, d = v[:len(g)], d[:len(g)]
		var acc float64
		if log {
			for _, e := range g {
				acc += float64(e)
			}
			for i, e := range g {
				d[i] = F(float64(e) - math.Exp(float64(v[i]))*acc)
			}
			continue
		}
		for i, e := range g {
			acc += float64(e) * float64(v[i])
		}
		for i, e := range g {
			d[i] = F(float64(v[i]) * (float64(e) - acc))
		}
	}
}

// SoftmaxGradCausalRows32 is SoftmaxGradRows32 over the rows of causal
// t×t matrices whose y reduce.SoftmaxCausalRows32 wrote (+0 past each row's
// diagonal) for a reader with the given reach (reduce.CausalRowEnd): each
// row r takes its prefix, reduce.MaskedPrefix(r, t) elements, after
// setting dy to +0 past the diagonal there (dy may hold anything past the
// prefix: the causal product that wrote it skips those tiles), and sets
// dx from the prefix to the row's end for that reach, leaving the rest as
// it was. Every value it writes is SoftmaxGradRows32's over the whole rows
// of such y with dy +0 past each diagonal (the terms past the prefix are
// y's +0 times dy, zeros in the lanes the whole row would add them to),
// bit for bit but where a row's sum is a zero whose sign those terms would
// change: dx is +0 or −0 past the diagonal, which no product's sum tells
// apart from its +0 start.
//
// With scale not 1 each row's written part is then multiplied by it, in
// float32, while it is in the cache (the fused attention's dS scale: a
// pass of its own over a T = 1024 head's buffer read it back from L3).
func SoftmaxGradCausalRows32(dy, y, dx []float32, t, reach int, scale float32) {
	if t <= 0 {
		return
	}
	n := len(dy) / t * t
	for o := 0; o < n; o += t {
		r := o / t % t
		l := reduce.MaskedPrefix(r, t)
		g, v, d := dy[o:o+l], y[o:o+l], dx[o:o+t]
		clear(g[r+1:])
		s := softmaxGradRow32(g, v, d[:l], nextRowBytes(o, t, n))
		// y·(dy − s) with y and dy +0: −0 where s > 0.
		end := reduce.CausalRowEnd(r, t, reach)
		rest := d[l:end]
		if s > 0 {
			z := float32(math.Copysign(0, -1))
			for i := range rest {
				rest[i] = z
			}
		} else {
			clear(rest)
		}
		if scale != 1 {
			for i, x := range d[:end] {
				d[i] = x * scale
			}
		}
	}
}

// SoftmaxGradRows32 writes dx = y·(dy − Σ dy·y) over each row of cols
// elements that dy holds end to end (y and dx alike; dx may be dy): the
// SoftmaxGrad kernel's arithmetic along the last axis, bit for bit (the
// fused attention gradient's rows, linalg). With the assembly row kernels
// a row is one call that takes the sum and writes the row
// (softmaxGradRowAVX2) and fetches the next row's lines of dy and y
// meanwhile: the fused attention gradient's rows, read just after the
// product that wrote them, spent twice as long per row as rows already in
// L1 (BenchmarkAttentionSoftmaxViT at -cpu 1, 7 December 2026: 230 ns
// against 87 for a 197-element row). Rows under 8 elements, and every row
// without AVX2, take dot32 and softmaxRowGrad32.
func SoftmaxGradRows32(dy, y, dx []float32, cols int) {
	if cols <= 0 {
		return
	}
	n := len(dy) / cols * cols
	if n == 0 {
		return
	}
	dy, y, dx = dy[:n], y[:n], dx[:n]
	for o := 0; o < n; o += cols {
		softmaxGradRow32(dy[o:o+cols], y[o:o+cols], dx[o:o+cols], nextRowBytes(o, cols, n))
	}
}

// softmaxGradRow32 writes d = v·(g − s) over one row and returns s = Σ
// g·v: with the assembly row kernels and 8 elements or more one call
// that also fetches the lines pf bytes on (the next row's), otherwise
// dot32 and softmaxRowGrad32.
func softmaxGradRow32(g, v, d []float32, pf int) float64 {
	if !rowAsm || len(g) < 8 {
		s := dot32(g, v)
		softmaxRowGrad32(g, v, d, s)
		return s
	}
	return softmaxGradRowAVX2(&g[0], &v[0], &d[0], len(g), pf)
}

// nextRowBytes is the distance in bytes from the row at offset o (rows
// stride elements apart, n elements in all) to the next one, 0 for the
// last row: what softmaxGradRow32 fetches.
func nextRowBytes(o, stride, n int) int {
	if o+stride >= n {
		return 0
	}
	return 4 * stride
}
