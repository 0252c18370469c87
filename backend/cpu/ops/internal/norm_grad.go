package internal

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Backward kernels of the softmax, normalisation and loss ops (the rules
// are in graph/grad_nn_norm.go). Each recomputes the statistics it needs
// from the forward input in float64, so the rules need none of the forward
// node's optional outputs, and float32 sums accumulate in float64.

func init() {
	register("SoftmaxGrad", softmaxGradKernel(false))
	register("LogSoftmaxGrad", softmaxGradKernel(true))
	kern.RegisterSpec(graph.InternalDomain, "BatchNormalizationGrad", kern.Spec{Fn: batchNormGrad, Half: true})
	register("LayerNormalizationGrad", layerNormGrad)
	register("GroupNormalizationGrad", groupNormGrad)
	register("NegativeLogLikelihoodLossGrad", nllLossGrad)
	register("SoftmaxCrossEntropyLossGrad", softmaxCrossEntropyLossGrad)
}

// float is the element types the backward kernels run on (half types arrive
// as float32).
type float interface{ ~float32 | ~float64 }

// layout views a tensor as (outer, r, inner): r elements along the
// normalised axes, inner elements apart, repeated outer times.
type layout struct{ outer, r, inner int }

func product(dims []int) int {
	p := 1
	for _, d := range dims {
		p *= d
	}
	return p
}

// sameFloat checks that a and b are float32 or float64 tensors of one dtype
// and shape (a gradient and the forward value it belongs to).
func sameFloat(n *graph.Node, a, b *graph.Tensor, what string) error {
	if a.DType != graph.Float32 && a.DType != graph.Float64 {
		return n.Errorf("%s has dtype %v, want float32 or float64", what, a.DType)
	}
	if a.DType != b.DType {
		return n.Errorf("%s has dtype %v, the forward value %v", what, a.DType, b.DType)
	}
	if !graph.SameShape(a.Shape, b.Shape) {
		return n.Errorf("%s has shape %v, the forward value %v", what, a.Shape, b.Shape)
	}
	return nil
}

// toFloat64s returns t's elements as float64.
func toFloat64s(t *graph.Tensor) []float64 {
	out := make([]float64, t.Size())
	switch s := t.Data.(type) {
	case []float32:
		for i, v := range s {
			out[i] = float64(v)
		}
	case []float64:
		copy(out, s)
	default:
		for i := range out {
			out[i] = t.Float(i)
		}
	}
	return out
}

// fromFloat64s builds a tensor of dtype d and the given shape from values.
func fromFloat64s(n *graph.Node, d graph.DType, shape []int, v []float64) (*graph.Tensor, error) {
	t, err := kern.New(n, d, shape)
	if err != nil {
		return nil, err
	}
	switch s := t.Data.(type) {
	case []float32:
		for i, f := range v {
			s[i] = float32(f)
		}
	case []float64:
		copy(s, v)
	default:
		for i, f := range v {
			t.SetFloat(i, f)
		}
	}
	return t, nil
}

// halfToFloat32 converts a float16 or bfloat16 tensor to float32 and
// returns any other tensor as it is.
func halfToFloat32(n *graph.Node, t *graph.Tensor) (*graph.Tensor, error) {
	if t.DType != graph.Float16 && t.DType != graph.BFloat16 {
		return t, nil
	}
	c, err := kern.Cast(t, graph.Float32)
	if err != nil {
		return nil, n.Errorf("%v", err)
	}
	return c, nil
}

// labelsOf returns an integer tensor's elements as int64.
func labelsOf(n *graph.Node, t *graph.Tensor) ([]int64, error) {
	if !t.DType.IsInt() {
		return nil, n.Errorf("target has dtype %v, want int32 or int64", t.DType)
	}
	if s, ok := t.Data.([]int64); ok {
		return s, nil
	}
	out := make([]int64, t.Size())
	for i := range out {
		out[i] = t.Int(i)
	}
	return out, nil
}

// softmaxGradKernel returns SoftmaxGrad(dy, y) or LogSoftmaxGrad(dy, y),
// where y is the forward output. Attributes: axis (required) and coerce
// (1: the opset < 13 semantics, every dim from axis on is one row).
//
// Softmax: dx = y·(dy - Σ dy·y). LogSoftmax: dx = dy - exp(y)·Σ dy. Sums run
// along the softmax axis.
func softmaxGradKernel(log bool) kern.Kernel {
	return func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
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
		out, err := kern.New(n, y.DType, y.Shape)
		if err != nil {
			return nil, err
		}
		switch ys := y.Data.(type) {
		case []float32:
			softmaxBackward(log, dy.Data.([]float32), ys, out.Data.([]float32), b)
		case []float64:
			softmaxBackward(log, dy.Data.([]float64), ys, out.Data.([]float64), b)
		}
		return []*graph.Tensor{out}, nil
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
// Blocks of rows (outer indices) go to the cores; rows are independent, so
// the split does not change the results.
func softmaxBackward[F float](log bool, dy, y, dx []F, b layout) {
	size := b.r * b.inner
	const block = 64
	blocks := (b.outer + block - 1) / block
	workers := gradWorkers(blocks, 4*block*size)
	accs := make([]float64, b.inner*max(workers, 1))
	convGradParallel(blocks, workers, false, func(w, blk int) {
		softmaxBackwardRows(log, dy, y, dx, b, blk*block, min((blk+1)*block, b.outer), accs[w*b.inner:(w+1)*b.inner])
	})
}

// softmaxBackwardRows is softmaxBackward on outer indices [lo, hi), with
// acc (b.inner elements) as scratch.
func softmaxBackwardRows[F float](log bool, dy, y, dx []F, b layout, lo, hi int, acc []float64) {
	size := b.r * b.inner
	if b.inner == 1 {
		softmaxBackwardContiguous(log, dy[lo*size:hi*size], y[lo*size:hi*size], dx[lo*size:hi*size], size)
		return
	}
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
// last axis: rows of size contiguous elements.
func softmaxBackwardContiguous[F float](log bool, dy, y, dx []F, size int) {
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

// batchNormGrad is BatchNormalizationGrad(dy, X, scale, mean, var) with
// attributes epsilon and training_mode; outputs dX, dscale, dB, dmean, dvar.
//
// Training mode normalises with the batch statistics (population variance),
// which it recomputes from X, and differentiates through them as PyTorch's
// batch norm backward does:
//
//	dX = scale·invstd·(dy - mean(dy) - x̂·mean(dy·x̂)),  dscale = Σ dy·x̂,  dB = Σ dy
//
// the means and sums running over every element but the channel's; dmean
// and dvar are zero (the running statistics only feed the running outputs).
// Inference mode is an affine map with the given mean and var, and dmean and
// dvar are their exact gradients. Parameters of C·D1·... elements (the old
// spatial=0 form) take statistics over N only, as the forward does.
//
// The kernel handles half types itself so that each gradient takes the
// dtype of its forward value (from opset 15 the statistics may have a
// dtype other than X's).
func batchNormGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 5); err != nil {
		return nil, err
	}
	dy, err := halfToFloat32(n, in[0])
	if err != nil {
		return nil, err
	}
	x, err := halfToFloat32(n, in[1])
	if err != nil {
		return nil, err
	}
	if err := sameFloat(n, dy, x, "dy"); err != nil {
		return nil, err
	}
	for i := 2; i < 5; i++ {
		if !in[i].DType.IsFloat() {
			return nil, n.Errorf("input %d has dtype %v, want a float type", i, in[i].DType)
		}
	}
	if x.Rank() < 2 {
		return nil, n.Errorf("X must have rank 2 or more (N, C, ...), has shape %v", x.Shape)
	}
	c := x.Shape[1]
	spatial := product(x.Shape[2:])
	params := in[2].Size()
	for i := 3; i < 5; i++ {
		if in[i].Size() != params {
			return nil, n.Errorf("input %d has %d elements, scale has %d", i, in[i].Size(), params)
		}
	}
	b := layout{outer: x.Shape[0], r: c, inner: spatial}
	switch {
	case params == c:
	case params == c*spatial:
		b.r, b.inner = c*spatial, 1
	default:
		return nil, n.Errorf("scale has %d elements, want C = %d (or C·D = %d)", params, c, c*spatial)
	}
	eps := float64(n.AttrFloat("epsilon", 1e-5))
	training := n.AttrInt("training_mode", 0) != 0
	scale, mean, variance := toFloat64s(in[2]), toFloat64s(in[3]), toFloat64s(in[4])
	// dX comes from kern.New (the memory plan places it) unless X was
	// widened from a half type and dX must be cast back.
	var dx *graph.Tensor
	if x.DType == in[1].DType {
		if dx, err = kern.New(n, x.DType, x.Shape); err != nil {
			return nil, err
		}
	} else if dx, err = graph.NewTensor(x.DType, x.Shape); err != nil {
		return nil, n.Errorf("dX of shape %v: %w", x.Shape, err)
	}
	var g bnGrads
	switch xs := x.Data.(type) {
	case []float32:
		g = bnBackward(dy.Data.([]float32), xs, dx.Data.([]float32), b, scale, mean, variance, eps, training)
	case []float64:
		g = bnBackward(dy.Data.([]float64), xs, dx.Data.([]float64), b, scale, mean, variance, eps, training)
	}
	dxOut, err := kern.Cast(dx, in[1].DType)
	if err != nil {
		return nil, n.Errorf("%v", err)
	}
	outs := []*graph.Tensor{dxOut}
	// dscale and dB take scale's dtype and shape (B's are the same), dmean
	// and dvar those of mean and var.
	likes := []*graph.Tensor{in[2], in[2], in[3], in[4]}
	for i, v := range [][]float64{g.scale, g.bias, g.mean, g.variance} {
		like := likes[i]
		t, err := fromFloat64s(n, like.DType, like.Shape, v)
		if err != nil {
			return nil, err
		}
		outs = append(outs, t)
	}
	return outs, nil
}

// bnGrads are the per-parameter gradients of batch normalisation.
type bnGrads struct{ scale, bias, mean, variance []float64 }

// bnBackward writes dX into dx and returns the parameter gradients. The
// parameters (channels) are split over the cores; each channel's sums run
// in one goroutine in a fixed order, so the result does not depend on the
// split.
func bnBackward[F float](dy, x, dx []F, b layout, scale, mean, variance []float64, eps float64, training bool) bnGrads {
	g := bnGrads{
		scale:    make([]float64, b.r),
		bias:     make([]float64, b.r),
		mean:     make([]float64, b.r),
		variance: make([]float64, b.r),
	}
	count := float64(b.outer * b.inner)
	workers := gradWorkers(b.r, 4*b.outer*b.inner)
	per := (b.r + workers - 1) / workers
	convGradParallel(workers, workers, true, func(_, part int) {
		for p := part * per; p < min((part+1)*per, b.r); p++ {
			bnBackwardChannel(dy, x, dx, b, p, count, scale, mean, variance, eps, training, &g)
		}
	})
	return g
}

// bnBackwardChannel is bnBackward for parameter p.
func bnBackwardChannel[F float](dy, x, dx []F, b layout, p int, count float64, scale, mean, variance []float64, eps float64, training bool, g *bnGrads) {
	m, v := mean[p], variance[p]
	var sumDy, sumDyXc float64
	if training {
		// One pass for the batch statistics and both sums, on values
		// shifted by the channel's first element (near the mean, so the
		// shifted sums keep their precision): with d = x - x0,
		// var = Σd²/n - (Σd/n)² and Σdy·(x-m) = Σdy·d - (m-x0)·Σdy.
		var x0 float64
		if b.outer > 0 && b.inner > 0 {
			x0 = float64(x[p*b.inner])
		}
		var sd, sdd, sg, sgd float64
		for o := 0; o < b.outer; o++ {
			off := (o*b.r + p) * b.inner
			xr := x[off : off+b.inner]
			gr := dy[off : off+b.inner]
			gr = gr[:len(xr)]
			for i, e := range xr {
				d := float64(e) - x0
				gv := float64(gr[i])
				sd += d
				sdd += d * d
				sg += gv
				sgd += gv * d
			}
		}
		md := sd / count
		m = x0 + md
		v = max(sdd/count-md*md, 0)
		sumDy = sg
		sumDyXc = sgd - md*sg
	}
	inv := 1 / math.Sqrt(v+eps)
	if !training {
		for o := 0; o < b.outer; o++ {
			off := (o*b.r + p) * b.inner
			gr := dy[off : off+b.inner]
			xr := x[off : off+b.inner]
			gr = gr[:len(xr)]
			for i, e := range xr {
				gv := float64(gr[i])
				sumDy += gv
				sumDyXc += gv * (float64(e) - m)
			}
		}
	}
	sumDyXhat := sumDyXc * inv
	g.scale[p], g.bias[p] = sumDyXhat, sumDy
	a := scale[p] * inv
	if !training {
		g.mean[p] = -a * sumDy
		// d/dvar of (x-m)·scale·(var+eps)^-1/2 is -1/2·scale·inv³·(x-m).
		g.variance[p] = -0.5 * scale[p] * inv * inv * sumDyXhat
		for o := 0; o < b.outer; o++ {
			off := (o*b.r + p) * b.inner
			dr := dx[off : off+b.inner]
			for i, e := range dy[off : off+b.inner] {
				dr[i] = F(float64(e) * a)
			}
		}
		return
	}
	// dx = a·(dy − mean(dy) − x̂·mean(dy·x̂)) = k1·dy + k2·x + k0, with
	// x̂ = (x − m)·inv.
	meanDy, meanDyXhat := sumDy/count, sumDyXhat/count
	k1 := a
	k2 := -a * meanDyXhat * inv
	k0 := -a*meanDy + a*meanDyXhat*inv*m
	for o := 0; o < b.outer; o++ {
		off := (o*b.r + p) * b.inner
		gr := dy[off : off+b.inner]
		dr := dx[off : off+b.inner]
		xr := x[off : off+b.inner]
		gr, dr = gr[:len(xr)], dr[:len(xr)]
		for i, e := range xr {
			dr[i] = F(k1*float64(gr[i]) + k2*float64(e) + k0)
		}
	}
}

// normRowsBackward is the backward of normalising rows of size elements
// (x̂ = (x - mean)·invstd over the row, population variance) followed by a
// per-element affine map whose scale for element i of a row is
// scale[col(row, i)]. It writes dx and accumulates Σ dy·x̂ and Σ dy into
// dscale and dbias at col(row, i).
func normRowsBackward[F float](dy, x, dx []F, rows, size int, eps float64, scale []float64, col func(row, i int) int, dscale, dbias []float64) {
	if size == 0 {
		return
	}
	g := make([]float64, size)
	xhat := make([]float64, size)
	for j := 0; j < rows; j++ {
		xr := x[j*size : (j+1)*size]
		gr := dy[j*size : (j+1)*size]
		dr := dx[j*size : (j+1)*size]
		var s float64
		for _, e := range xr {
			s += float64(e)
		}
		m := s / float64(size)
		var q float64
		for _, e := range xr {
			d := float64(e) - m
			q += d * d
		}
		inv := 1 / math.Sqrt(q/float64(size)+eps)
		var sumG, sumGXhat float64
		for i, e := range xr {
			c := col(j, i)
			xh := (float64(e) - m) * inv
			dyv := float64(gr[i])
			xhat[i] = xh
			g[i] = dyv * scale[c]
			sumG += g[i]
			sumGXhat += g[i] * xh
			dscale[c] += dyv * xh
			dbias[c] += dyv
		}
		meanG, meanGXhat := sumG/float64(size), sumGXhat/float64(size)
		for i := range dr {
			dr[i] = F(inv * (g[i] - meanG - xhat[i]*meanGXhat))
		}
	}
}

// layerNormRowsBlock is the rows whose dscale and dbias terms
// layerNormRowsBackward sums in the element type before adding them to a
// float64 partial sum; layerNormChunks is the most work items (runs of
// whole blocks, each with its own float64 partial sums) it splits the rows
// into. Both are fixed, so that the partial sums, and hence the results, do
// not depend on GOMAXPROCS.
const (
	layerNormRowsBlock = 32
	layerNormChunks    = 16
)

// layerNormRowsBackward is normRowsBackward for LayerNormalization (element
// i of every row has scale[i]), without normRowsBackward's per-element
// indirect call and with the rows spread over the cores in up to
// layerNormChunks chunks of whole blocks of layerNormRowsBlock rows. Each
// block sums its rows' contributions to dscale and dbias in the element
// type (a worker's scratch) and adds them to its chunk's float64 sums; the
// chunks' sums are added in chunk order.
func layerNormRowsBackward[F float](dy, x, dx []F, rows, size int, eps float64, scale, dscale, dbias []float64) {
	if size == 0 || rows == 0 {
		return
	}
	blocks := (rows + layerNormRowsBlock - 1) / layerNormRowsBlock
	chunks := min(blocks, layerNormChunks)
	partial := make([]float64, 2*chunks*size)
	workers := min(gradWorkers(blocks, 8*layerNormRowsBlock*size), chunks)
	scaleF := make([]F, size)
	for i, s := range scale[:size] {
		scaleF[i] = F(s)
	}
	scratch := make([]F, 2*size*max(workers, 1))
	convGradParallel(chunks, workers, false, func(w, c int) {
		ds, db := scratch[2*w*size:(2*w+1)*size], scratch[(2*w+1)*size:(2*w+2)*size]
		pds, pdb := partial[2*c*size:(2*c+1)*size], partial[(2*c+1)*size:(2*c+2)*size]
		for b := c * blocks / chunks; b < (c+1)*blocks/chunks; b++ {
			clear(ds)
			clear(db)
			for j := b * layerNormRowsBlock; j < min((b+1)*layerNormRowsBlock, rows); j++ {
				layerNormRowBackward(dy[j*size:(j+1)*size], x[j*size:(j+1)*size], dx[j*size:(j+1)*size], eps, scale, scaleF, ds, db)
			}
			for i := range pds {
				pds[i] += float64(ds[i])
				pdb[i] += float64(db[i])
			}
		}
	})
	for c := 0; c < chunks; c++ {
		ds, db := partial[2*c*size:(2*c+1)*size], partial[(2*c+1)*size:(2*c+2)*size]
		for i := range dscale {
			dscale[i] += ds[i]
			dbias[i] += db[i]
		}
	}
}

// layerNormRowBackward writes the LayerNorm input gradient of one row x
// (upstream gradient dy, per-element scale, also given as scaleF in the
// element type) into dx and adds the row's dy·x̂ and dy into ds and db.
// All slices have len(x) elements (scale, scaleF, ds and db at least).
//
// It reads the row twice. The first pass accumulates in float64 the sums
// of d = x − x[0], d², g = dy·scale and g·d, two independent accumulators
// each; shifting by x[0] keeps Σd²/n − (Σd/n)² accurate when the mean is
// large next to the spread (for float32 data of similar magnitudes d and
// d² are exact in float64). The second pass, in the element type, writes
// dx = inv·(g − mean(g) − x̂·mean(g·x̂)) and adds dy·x̂ and dy to ds and db.
func layerNormRowBackward[F float](dy, x, dx []F, eps float64, scale []float64, scaleF, ds, db []F) {
	n := len(x)
	if n == 0 {
		return
	}
	dy, dx, scale, scaleF, ds, db = dy[:n], dx[:n], scale[:n], scaleF[:n], ds[:n], db[:n]
	x0 := float64(x[0])
	var sd0, sd1, sq0, sq1, sg0, sg1, sgd0, sgd1 float64
	i := 0
	for ; i+2 <= n; i += 2 {
		xs, gs, ss := x[i:i+2:i+2], dy[i:i+2:i+2], scale[i:i+2:i+2]
		d0, d1 := float64(xs[0])-x0, float64(xs[1])-x0
		g0, g1 := float64(gs[0])*ss[0], float64(gs[1])*ss[1]
		sd0 += d0
		sd1 += d1
		sq0 += d0 * d0
		sq1 += d1 * d1
		sg0 += g0
		sg1 += g1
		sgd0 += g0 * d0
		sgd1 += g1 * d1
	}
	if i < n {
		d := float64(x[i]) - x0
		g := float64(dy[i]) * scale[i]
		sd0 += d
		sq0 += d * d
		sg0 += g
		sgd0 += g * d
	}
	fn := float64(n)
	sg := sg0 + sg1
	md := (sd0 + sd1) / fn // mean − x0
	inv := 1 / math.Sqrt(max((sq0+sq1)/fn-md*md, 0)+eps)
	// mean(g·x̂) = inv·Σ g·(x − m)/n, with Σ g·(x − m) = Σ g·d − (m − x0)·Σ g.
	meanGXhat := inv * ((sgd0 + sgd1) - md*sg) / fn
	// dx = a·dy·scale + c·x̂ + k with a = inv, c = −inv·mean(g·x̂),
	// k = −inv·mean(g).
	// x − m is computed as (x − mHi) − mLo with mHi = F(m), so that rows
	// whose mean is large next to their spread lose no accuracy.
	m := x0 + md
	mHi := F(m)
	mLo, invF := F(m-float64(mHi)), F(inv)
	c, k := F(-inv*meanGXhat), F(-inv*sg/fn)
	i = 0
	for ; i+4 <= n; i += 4 {
		xs, gs, ss := x[i:i+4:i+4], dy[i:i+4:i+4], scaleF[i:i+4:i+4]
		out, dss, dbs := dx[i:i+4:i+4], ds[i:i+4:i+4], db[i:i+4:i+4]
		h0, h1, h2, h3 := ((xs[0]-mHi)-mLo)*invF, ((xs[1]-mHi)-mLo)*invF, ((xs[2]-mHi)-mLo)*invF, ((xs[3]-mHi)-mLo)*invF
		g0, g1, g2, g3 := gs[0], gs[1], gs[2], gs[3]
		out[0] = g0*ss[0]*invF + c*h0 + k
		out[1] = g1*ss[1]*invF + c*h1 + k
		out[2] = g2*ss[2]*invF + c*h2 + k
		out[3] = g3*ss[3]*invF + c*h3 + k
		dss[0] += g0 * h0
		dss[1] += g1 * h1
		dss[2] += g2 * h2
		dss[3] += g3 * h3
		dbs[0] += g0
		dbs[1] += g1
		dbs[2] += g2
		dbs[3] += g3
	}
	for ; i < n; i++ {
		h, g := ((x[i]-mHi)-mLo)*invF, dy[i]
		dx[i] = g*scaleF[i]*invF + c*h + k
		ds[i] += g * h
		db[i] += g
	}
}

// layerNormGrad is LayerNormalizationGrad(dy, X, Scale) with attributes
// axis and epsilon; outputs dX, and dScale and dB shaped like X.shape[axis:]
// (the rule sums them down to the shapes of Scale and B, which may
// broadcast).
func layerNormGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	dy, x, scaleT := in[0], in[1], in[2]
	if err := sameFloat(n, dy, x, "dy"); err != nil {
		return nil, err
	}
	rank := x.Rank()
	if rank == 0 {
		return nil, n.Errorf("X must have rank 1 or more")
	}
	axis, err := kern.NormAxis(n, int(n.AttrInt("axis", -1)), rank)
	if err != nil {
		return nil, err
	}
	normShape := x.Shape[axis:]
	outer, size := product(x.Shape[:axis]), product(normShape)
	bs, err := kern.BroadcastShape(scaleT.Shape, normShape)
	if err != nil || !graph.SameShape(bs, normShape) {
		return nil, n.Errorf("Scale of shape %v does not broadcast to the normalised shape %v", scaleT.Shape, normShape)
	}
	sv := toFloat64s(scaleT)
	scale := sv
	if !graph.SameShape(scaleT.Shape, normShape) {
		idx := kern.BroadcastIndex(scaleT.Shape, normShape)
		scale = make([]float64, len(idx))
		for i, j := range idx {
			scale[i] = sv[j]
		}
	}
	eps := float64(n.AttrFloat("epsilon", 1e-5))
	dscale := make([]float64, size)
	dbias := make([]float64, size)
	dx, err := kern.New(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	switch xs := x.Data.(type) {
	case []float32:
		layerNormRowsBackward(dy.Data.([]float32), xs, dx.Data.([]float32), outer, size, eps, scale, dscale, dbias)
	case []float64:
		layerNormRowsBackward(dy.Data.([]float64), xs, dx.Data.([]float64), outer, size, eps, scale, dscale, dbias)
	}
	ds, err := fromFloat64s(n, x.DType, normShape, dscale)
	if err != nil {
		return nil, err
	}
	db, err := fromFloat64s(n, x.DType, normShape, dbias)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{dx, ds, db}, nil
}

// groupNormGrad is GroupNormalizationGrad(dy, X, scale) with attributes
// num_groups (absent or 0: one group per channel, which is
// InstanceNormalization) and epsilon; outputs dX, dscale and dB, the last
// two shaped like scale (C elements, or num_groups for opset 18's
// per-group parameters).
func groupNormGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	dy, x, scaleT := in[0], in[1], in[2]
	if err := sameFloat(n, dy, x, "dy"); err != nil {
		return nil, err
	}
	if x.Rank() < 2 {
		return nil, n.Errorf("X must have rank 2 or more (N, C, ...), has shape %v", x.Shape)
	}
	batch, c, spatial := x.Shape[0], x.Shape[1], product(x.Shape[2:])
	groups := int(n.AttrInt("num_groups", 0))
	if groups == 0 {
		groups = c
	}
	if groups < 0 || c%groups != 0 {
		return nil, n.Errorf("num_groups = %d must be positive and divide C = %d", groups, c)
	}
	perGroup := c / groups
	params := scaleT.Size()
	if params != c && params != groups {
		return nil, n.Errorf("scale has %d elements, want C = %d (or num_groups = %d)", params, c, groups)
	}
	sv := toFloat64s(scaleT)
	// col maps element i of group row j to its parameter.
	col := func(j, i int) int { return (j*perGroup + i/spatial) % c }
	if params != c {
		// Opset 18: one parameter per group; row j is group j % groups.
		col = func(j, _ int) int { return j % groups }
	}
	eps := float64(n.AttrFloat("epsilon", 1e-5))
	dscale := make([]float64, params)
	dbias := make([]float64, params)
	dx, err := kern.New(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	rows, size := batch*groups, perGroup*spatial
	switch xs := x.Data.(type) {
	case []float32:
		normRowsBackward(dy.Data.([]float32), xs, dx.Data.([]float32), rows, size, eps, sv, col, dscale, dbias)
	case []float64:
		normRowsBackward(dy.Data.([]float64), xs, dx.Data.([]float64), rows, size, eps, sv, col, dscale, dbias)
	}
	ds, err := fromFloat64s(n, scaleT.DType, scaleT.Shape, dscale)
	if err != nil {
		return nil, err
	}
	db, err := fromFloat64s(n, scaleT.DType, scaleT.Shape, dbias)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{dx, ds, db}, nil
}

// lossGradOptions are the attributes the loss gradients share with their
// forward ops.
type lossGradOptions struct {
	reduction   string
	hasIgnore   bool
	ignoreIndex int64
}

func readLossGradOptions(n *graph.Node) (lossGradOptions, error) {
	o := lossGradOptions{
		reduction:   n.AttrString("reduction", "mean"),
		hasIgnore:   n.HasAttr("ignore_index"),
		ignoreIndex: n.AttrInt("ignore_index", 0),
	}
	switch o.reduction {
	case "none", "sum", "mean":
		return o, nil
	}
	return o, n.Errorf("reduction %q is not one of none, sum, mean", o.reduction)
}

// lossTargets checks target against an input of shape (N, C, d...) and
// returns, per target element, the weight it carries (0 when ignored), the
// labels, and the sum of the weights.
func lossTargets(n *graph.Node, shape []int, target, weight *graph.Tensor, o lossGradOptions) (w []float64, labels []int64, sum float64, err error) {
	if len(shape) < 2 {
		return nil, nil, 0, n.Errorf("input must have rank 2 or more (N, C, ...), has shape %v", shape)
	}
	c := shape[1]
	want := append([]int{shape[0]}, shape[2:]...)
	if !graph.SameShape(target.Shape, want) {
		return nil, nil, 0, n.Errorf("target has shape %v, want %v for input of shape %v", target.Shape, want, shape)
	}
	if labels, err = labelsOf(n, target); err != nil {
		return nil, nil, 0, err
	}
	var cw []float64
	if weight != nil {
		if weight.Rank() != 1 || weight.Size() != c {
			return nil, nil, 0, n.Errorf("weight has shape %v, want [%d]", weight.Shape, c)
		}
		cw = toFloat64s(weight)
	}
	w = make([]float64, len(labels))
	for k, t := range labels {
		if o.hasIgnore && t == o.ignoreIndex {
			continue
		}
		if t < 0 || t >= int64(c) {
			return nil, nil, 0, n.Errorf("target %d at element %d is out of range [0, %d)", t, k, c)
		}
		w[k] = 1
		if cw != nil {
			w[k] = cw[t]
		}
		sum += w[k]
	}
	return w, labels, sum, nil
}

// lossScales returns, per target element, d loss / d loss_k times the seed
// gradient dloss: dloss[k] for reduction none, dloss for sum, dloss divided
// by the weight sum for mean. A nil dloss gives nil.
func lossScales(n *graph.Node, dloss *graph.Tensor, count int, weightSum float64, o lossGradOptions) ([]float64, error) {
	if dloss == nil {
		return nil, nil
	}
	s := make([]float64, count)
	if o.reduction == "none" {
		if dloss.Size() != count {
			return nil, n.Errorf("loss gradient has %d elements, want %d", dloss.Size(), count)
		}
		return toFloat64s(dloss), nil
	}
	if dloss.Size() != 1 {
		return nil, n.Errorf("loss gradient has shape %v, want a scalar", dloss.Shape)
	}
	g := dloss.Float(0)
	if o.reduction == "mean" {
		g /= weightSum
	}
	for k := range s {
		s[k] = g
	}
	return s, nil
}

// nllLossGrad is NegativeLogLikelihoodLossGrad(dloss, shape, target[,
// weight]) with the forward's reduction and ignore_index attributes: the
// gradient of the loss with respect to the input of the given shape,
// -weight[t]·dloss_k at [n, t, d...] for every target t and zero elsewhere.
func nllLossGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	dloss, shapeT, target := in[0], in[1], in[2]
	if dloss.DType != graph.Float32 && dloss.DType != graph.Float64 {
		return nil, n.Errorf("loss gradient has dtype %v, want float32 or float64", dloss.DType)
	}
	o, err := readLossGradOptions(n)
	if err != nil {
		return nil, err
	}
	shape := shapeT.Ints()
	w, labels, sum, err := lossTargets(n, shape, target, kern.Opt(in, 3), o)
	if err != nil {
		return nil, err
	}
	s, err := lossScales(n, dloss, len(labels), sum, o)
	if err != nil {
		return nil, err
	}
	dx, err := kern.New(n, dloss.DType, shape)
	if err != nil {
		return nil, err
	}
	c, inner := shape[1], product(shape[2:])
	for k, t := range labels {
		if w[k] == 0 {
			continue
		}
		b, j := k/inner, k%inner
		dx.SetFloat((b*c+int(t))*inner+j, -w[k]*s[k])
	}
	return []*graph.Tensor{dx}, nil
}

// softmaxCrossEntropyLossGrad is SoftmaxCrossEntropyLossGrad(dloss, scores,
// target, weight, dlog_prob), any of dloss, weight and dlog_prob omitted,
// with the forward's reduction and ignore_index attributes. With
// p = softmax(scores) along axis 1 and G the gradient of log_prob (dlog_prob
// plus -weight[t]·dloss_k at each target), d scores = G - p·ΣG.
func softmaxCrossEntropyLossGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if len(in) < 3 || in[1] == nil || in[2] == nil {
		return nil, n.Errorf("needs the scores and target inputs (1 and 2)")
	}
	dloss, x, target := in[0], in[1], in[2]
	if x.DType != graph.Float32 && x.DType != graph.Float64 {
		return nil, n.Errorf("scores have dtype %v, want float32 or float64", x.DType)
	}
	o, err := readLossGradOptions(n)
	if err != nil {
		return nil, err
	}
	w, labels, sum, err := lossTargets(n, x.Shape, target, kern.Opt(in, 3), o)
	if err != nil {
		return nil, err
	}
	s, err := lossScales(n, dloss, len(labels), sum, o)
	if err != nil {
		return nil, err
	}
	dlogp := kern.Opt(in, 4)
	if dlogp != nil {
		if err := sameFloat(n, dlogp, x, "log_prob gradient"); err != nil {
			return nil, err
		}
	}
	dx, err := kern.New(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	b := layout{outer: x.Shape[0], r: x.Shape[1], inner: product(x.Shape[2:])}
	switch xs := x.Data.(type) {
	case []float32:
		var dl []float32
		if dlogp != nil {
			dl = dlogp.Data.([]float32)
		}
		sceBackward(xs, dl, dx.Data.([]float32), b, labels, w, s)
	case []float64:
		var dl []float64
		if dlogp != nil {
			dl = dlogp.Data.([]float64)
		}
		sceBackward(xs, dl, dx.Data.([]float64), b, labels, w, s)
	}
	return []*graph.Tensor{dx}, nil
}

// sceBackward writes d scores for every (sample, position) column along the
// class axis. dlogp may be nil (no gradient into log_prob), and so may s
// (no gradient into the loss).
func sceBackward[F float](x, dlogp, dx []F, b layout, labels []int64, w, s []float64) {
	p := make([]float64, b.r)
	g := make([]float64, b.r)
	size := b.r * b.inner
	for o := 0; o < b.outer; o++ {
		for j := 0; j < b.inner; j++ {
			base := o*size + j
			m := math.Inf(-1)
			for c := 0; c < b.r; c++ {
				m = math.Max(m, float64(x[base+c*b.inner]))
			}
			var z float64
			for c := 0; c < b.r; c++ {
				p[c] = math.Exp(float64(x[base+c*b.inner]) - m)
				z += p[c]
			}
			for c := 0; c < b.r; c++ {
				p[c] /= z
				g[c] = 0
				if dlogp != nil {
					g[c] = float64(dlogp[base+c*b.inner])
				}
			}
			k := o*b.inner + j
			if s != nil && w[k] != 0 {
				g[labels[k]] -= w[k] * s[k]
			}
			var sumG float64
			for _, v := range g {
				sumG += v
			}
			for c := 0; c < b.r; c++ {
				dx[base+c*b.inner] = F(g[c] - p[c]*sumG)
			}
		}
	}
}
