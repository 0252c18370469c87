package elementwise

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/vmath"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterSpec(graph.FusedDomain, graph.ReluGrad, kern.Spec{Fn: reluGradKernel})
	kern.RegisterSpec(graph.FusedDomain, graph.ErfGrad, kern.Spec{Fn: erfGradKernel})
	kern.RegisterSpec(graph.FusedDomain, graph.AddReluGrad, kern.Spec{Fn: addReluGradKernel})
}

// addReluGradKernel is graph.AddReluGrad(A, B, X) = ReluGrad(Add(A, B), X):
// one pass (read three, write one) for float32 or float64 operands of one
// type and shape, the sum rounded as the Add kernel rounds it; anything
// else (operands that broadcast) runs the Add kernel and then ReluGrad's.
func addReluGradKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	if err := validateData(n, in); err != nil {
		return nil, err
	}
	a, b, x := in[0], in[1], in[2]
	if a.DType == x.DType && b.DType == x.DType && graph.SameShape(a.Shape, x.Shape) && graph.SameShape(b.Shape, x.Shape) {
		switch xs := x.Data.(type) {
		case []float32:
			out, err := kern.NewUninit(n, x.DType, x.Shape) // every element is written
			if err != nil {
				return nil, err
			}
			t := kern.State[addReluGradTask](n)
			t.d, t.a, t.b, t.x = out.Float32s(), a.Float32s(), b.Float32s(), xs
			parallelTask(len(t.d), parallelGrain, t)
			*t = addReluGradTask{} // drop the operands
			return kern.Results(n, out), nil
		case []float64:
			out, err := kern.NewUninit(n, x.DType, x.Shape)
			if err != nil {
				return nil, err
			}
			dst, as, bs := out.Data.([]float64), a.Data.([]float64), b.Data.([]float64)
			parallelRange(len(dst), parallelGrain, func(lo, hi int) {
				d, g, h, x := dst[lo:hi], as[lo:hi], bs[lo:hi], xs[lo:hi]
				g, h, x = g[:len(d)], h[:len(d)], x[:len(d)]
				for i := range d {
					if x[i] > 0 {
						d[i] = g[i] + h[i]
					} else {
						d[i] = 0
					}
				}
			})
			return one(out), nil
		}
	}
	sum, err := unfusedStep(ctx, n, "Add", a, b)
	if err != nil {
		return nil, err
	}
	return reluGradKernel(ctx, n, []*graph.Tensor{sum, x})
}

// addReluGradTask is AddReluGrad's float32 pass as a kern.Chunker, kept in
// the node's state so that a step fans it out without allocating.
type addReluGradTask struct{ d, a, b, x []float32 }

func (t *addReluGradTask) Chunk(lo, hi int) {
	addReluGradF32(t.d[lo:hi], t.a[lo:hi], t.b[lo:hi], t.x[lo:hi])
}

// AddReluGradF32 is AddReluGrad's float32 loop (d = x > 0 ? a + b : +0,
// the sum rounded to float32), for the kernels that fuse it
// (graph.BatchNormAddReluGrad).
func AddReluGradF32(d, a, b, x []float32) { addReluGradF32(d, a, b, x) }

// addReluGradF32 is d = x > 0 ? a + b : +0 (the sum rounded to float32),
// reluGradF32's branch-free mask applied to the sum.
func addReluGradF32(d, a, b, x []float32) {
	a, b, x = a[:len(d)], b[:len(d)], x[:len(d)]
	k := addReluGradVecPrefix(d, a, b, x) // the same bits, 8 lanes at a time
	d, a, b, x = d[k:], a[k:], b[k:], x[k:]
	for i := range d {
		var m uint32
		if x[i] > 0 {
			m = ^uint32(0)
		}
		s := a[i] + b[i]
		d[i] = math.Float32frombits(math.Float32bits(s) & m)
	}
}

// reluGradKernel is graph.ReluGrad(dY, X) = Where(Greater(X, 0), dY, 0):
// one pass for float operands of the same shape; anything else (operands
// that broadcast) runs the unfused Greater and Where kernels.
func reluGradKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	dy, x := in[0], in[1]
	if err := validateData(n, in); err != nil {
		return nil, err
	}
	if dy.DType == x.DType && graph.SameShape(dy.Shape, x.Shape) {
		switch xs := x.Data.(type) {
		case []float32:
			return reluGradSame(n, dy, xs)
		case []float64:
			return reluGradSame(n, dy, xs)
		}
	}
	if xs, ok := x.Data.([]float32); ok && dy.DType == x.DType {
		if inner, ok := planeBroadcast(dy.Shape, x.Shape); ok {
			out, err := kern.NewUninit(n, x.DType, x.Shape) // every element is written
			if err != nil {
				return nil, err
			}
			t := kern.State[reluGradPlanesTask](n)
			t.d, t.g, t.x, t.inner = out.Float32s(), dy.Float32s(), xs, inner
			parallelTask(len(t.g), max(1, parallelGrain/max(inner, 1)), t)
			*t = reluGradPlanesTask{} // drop the operands
			return kern.Results(n, out), nil
		}
	}
	// The unfused form, with scalar zeros of each operand's dtype.
	zero := func(like *graph.Tensor) (*graph.Tensor, error) {
		z, err := graph.NewTensor(like.DType, nil)
		if err != nil {
			return nil, n.Errorf("%v", err)
		}
		return z, nil
	}
	zx, err := zero(x)
	if err != nil {
		return nil, err
	}
	zdy, err := zero(dy)
	if err != nil {
		return nil, err
	}
	mask, err := compareKernel(opGreater)(ctx, n, []*graph.Tensor{x, zx})
	if err != nil {
		return nil, err
	}
	return whereKernel(ctx, n, []*graph.Tensor{mask[0], dy, zdy})
}

// planeBroadcast reports whether dY of shape dy broadcasts to x by
// repeating each of its elements over inner consecutive elements of x:
// dy is x's leading dims (after any leading ones) followed by ones, as a
// global pool's gradient [N, C, 1, 1] against [N, C, H, W] (the
// fold-expand-into-relu-grad pass makes such ReluGrads), with at least
// one element.
func planeBroadcast(dy, x []int) (inner int, ok bool) {
	if len(dy) > len(x) {
		return 0, false
	}
	off := len(x) - len(dy)
	lead := 1 // x's dims the two share
	k := 0
	for ; k < len(x) && (k < off && x[k] == 1 || k >= off && dy[k-off] == x[k]); k++ {
		lead *= x[k]
	}
	inner = 1
	for ; k < len(x); k++ {
		if k >= off && dy[k-off] != 1 {
			return 0, false
		}
		inner *= x[k]
	}
	return inner, lead > 0 && inner > 0
}

// reluGradPlanesTask is ReluGrad of a dY broadcast over planes of inner
// elements (planeBroadcast): chunk [lo, hi) writes those planes of d.
type reluGradPlanesTask struct {
	d, g, x []float32
	inner   int
}

func (t *reluGradPlanesTask) Chunk(lo, hi int) {
	in := t.inner
	if reluGradPlanesVec(t.d[lo*in:hi*in], t.g[lo:hi], t.x[lo*in:hi*in], in) {
		return
	}
	var buf [256]float32
	for p := lo; p < hi; p++ {
		v := t.g[p]
		for o := 0; o < in; o += len(buf) {
			b := buf[:min(len(buf), in-o)]
			for i := range b {
				b[i] = v
			}
			at := p*in + o
			reluGradF32(t.d[at:at+len(b)], b, t.x[at:at+len(b)])
		}
	}
}

// reluGradSame is ReluGrad for dY and X of one float type and shape.
func reluGradSame[T float](n *graph.Node, dy *graph.Tensor, xs []T) ([]*graph.Tensor, error) {
	out, err := newFull(n, dy.DType, dy.Shape)
	if err != nil {
		return nil, err
	}
	ds, dst := dy.Data.([]T), out.Data.([]T)
	if d32, ok := any(dst).([]float32); ok {
		t := kern.State[reluGradTask](n)
		t.d, t.g, t.x = d32, any(ds).([]float32), any(xs).([]float32)
		parallelTask(len(d32), parallelGrain, t)
		*t = reluGradTask{} // drop the operands
		return kern.Results(n, out), nil
	}
	parallelRange(len(dst), parallelGrain, func(lo, hi int) {
		d, g, x := dst[lo:hi], ds[lo:hi], xs[lo:hi]
		g, x = g[:len(d)], x[:len(d)]
		for i := range d {
			if x[i] > 0 {
				d[i] = g[i]
			} else {
				d[i] = 0
			}
		}
	})
	return one(out), nil
}

// reluGradTask is ReluGrad's float32 pass as a kern.Chunker, kept in the
// node's state so that a step fans it out without allocating.
type reluGradTask struct{ d, g, x []float32 }

func (t *reluGradTask) Chunk(lo, hi int) { reluGradF32(t.d[lo:hi], t.g[lo:hi], t.x[lo:hi]) }

// reluGradF32 is d = x > 0 ? g : +0 without a branch per element: the
// comparison selects an all-ones or all-zeros mask (a conditional move),
// and the mask keeps or clears g's bits. NaN x selects +0, as the branch
// did, and g's bits (NaN included) pass through unchanged.
func reluGradF32(d, g, x []float32) {
	g, x = g[:len(d)], x[:len(d)]
	k := reluGradVecPrefix(d, g, x) // the same bits, 8 lanes at a time
	d, g, x = d[k:], g[k:], x[k:]
	for i := range d {
		var m uint32
		if x[i] > 0 {
			m = ^uint32(0)
		}
		d[i] = math.Float32frombits(math.Float32bits(g[i]) & m)
	}
}

// reluF32 is Relu (v < 0 ? +0 : v) without a branch per element: negative
// values have their bits cleared; -0 and NaN (v < 0 is false) pass
// through unchanged, as in numUnaryLoop.
func reluF32(dst, src []float32) {
	dst = dst[:len(src)]
	k := reluVecPrefix(dst, src) // the same bits, 8 lanes at a time
	dst, src = dst[k:], src[k:]
	for i, v := range src {
		var m uint32
		if v < 0 {
			m = ^uint32(0)
		}
		dst[i] = math.Float32frombits(math.Float32bits(v) &^ m)
	}
}

// erfGradKernel is graph.ErfGrad(dY, X, C) = dY·(C·exp(-(X·X))), rounding
// after each operation as the unfused Mul, Neg, Exp, Mul, Mul kernels do
// (so the result is bit for bit theirs), in one pass for float operands of
// one shape and a scalar C; anything else runs the unfused kernels.
func erfGradKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	if err := validateData(n, in); err != nil {
		return nil, err
	}
	dy, x, c := in[0], in[1], in[2]
	if dy.DType == x.DType && c.DType == x.DType && c.Size() == 1 && graph.SameShape(dy.Shape, x.Shape) {
		switch xs := x.Data.(type) {
		case []float32:
			out, err := newFull(n, dy.DType, dy.Shape)
			if err != nil {
				return nil, err
			}
			ds, dst, cv := dy.Data.([]float32), out.Data.([]float32), c.Data.([]float32)[0]
			parallelRange(len(dst), parallelGrain, func(lo, hi int) {
				// One pass through vmath (the Exp kernel's exp, so
				// the bits are the unfused chain's).
				vmath.ErfGrad32(dst[lo:hi], ds[lo:hi], xs[lo:hi], cv)
			})
			return one(out), nil
		case []float64:
			out, err := newFull(n, dy.DType, dy.Shape)
			if err != nil {
				return nil, err
			}
			ds, dst, cv := dy.Data.([]float64), out.Data.([]float64), c.Data.([]float64)[0]
			parallelRange(len(dst), parallelGrain, func(lo, hi int) {
				d, g, x := dst[lo:hi], ds[lo:hi], xs[lo:hi]
				g, x = g[:len(d)], x[:len(d)]
				for i := range d {
					sq := x[i] * x[i]
					e := math.Exp(-sq)
					t := cv * e
					d[i] = g[i] * t
				}
			})
			return one(out), nil
		}
	}
	// The unfused chain.
	step := func(op string, args ...*graph.Tensor) (*graph.Tensor, error) { return unfusedStep(ctx, n, op, args...) }
	sq, err := step("Mul", x, x)
	if err != nil {
		return nil, err
	}
	neg, err := step("Neg", sq)
	if err != nil {
		return nil, err
	}
	e, err := step("Exp", neg)
	if err != nil {
		return nil, err
	}
	t, err := step("Mul", c, e)
	if err != nil {
		return nil, err
	}
	out, err := step("Mul", dy, t)
	if err != nil {
		return nil, err
	}
	return one(out), nil
}

// unfusedStep runs one op of a fused chain with its own kernel (the
// fallback of fused kernels for the dtypes they do not handle), returning
// its first output; errors name the fused node n.
func unfusedStep(ctx *kern.Context, n *graph.Node, op string, args ...*graph.Tensor) (*graph.Tensor, error) {
	out, err := kern.RunNested(ctx, n, "", op, args)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}
