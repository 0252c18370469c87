package gradient

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/elementwise"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/nn"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterSpec(graph.FusedDomain, graph.BatchNormReluGrad, kern.Spec{Fn: batchNormReluGrad, Half: true, Overwrites: []int{0}})
	kern.RegisterSpec(graph.FusedDomain, graph.BatchNormAddReluGrad, kern.Spec{Fn: batchNormAddReluGrad, Half: true, Overwrites: []int{0}})
}

// batchNormAddReluGrad is graph.BatchNormAddReluGrad(A, B, R, X, scale,
// mean, var) = (dS, BatchNormalizationGrad(dS, X, scale, mean, var)...)
// with dS = AddReluGrad(A, B, R): for float32 A, B, R and X of one shape,
// each channel's dS is computed (as the AddReluGrad kernel does) just
// before the gradient's sums read it, so they find it in cache; the
// results are bit for bit the two kernels'. Anything else runs the two
// kernels.
func batchNormAddReluGrad(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 7); err != nil {
		return nil, err
	}
	a, b, r, x := in[0], in[1], in[2], in[3]
	fast := x.Rank() >= 2
	for _, t := range []*graph.Tensor{a, b, r, x} {
		fast = fast && t.DType == graph.Float32 && graph.SameShape(t.Shape, x.Shape) && len(t.Float32s()) == t.Size()
	}
	if fast {
		// dS over A when the executor hands A's storage over: each
		// channel's dS is written after its A and B were read.
		ds := a
		if !ctx.MayOverwrite(0) {
			var err error
			if ds, err = kern.NewUninit(n, graph.Float32, x.Shape); err != nil { // the gradient task writes every element
				return nil, err
			}
		}
		pre := kern.State[addReluPre](n)
		*pre = addReluPre{a: a.Float32s(), b: b.Float32s(), r: r.Float32s(), ds: ds.Float32s()}
		out, err := batchNormGradMasked(n, []*graph.Tensor{ds, x, in[4], in[5], in[6]}, nil, pre, false)
		*pre = addReluPre{} // drop the operands
		return out, err
	}
	// The two kernels on operands of their own: A's donation is not
	// theirs (BatchNormalizationGrad would write dX over dS).
	dsOut, err := kern.RunNested(ctx, n, graph.FusedDomain, graph.AddReluGrad, in[:3])
	if err != nil {
		return nil, err
	}
	ds := dsOut[0]
	grads, err := batchNormGrad(ctx.Nested(), n, []*graph.Tensor{ds, x, in[4], in[5], in[6]})
	if err != nil {
		return nil, err
	}
	return append([]*graph.Tensor{ds}, grads...), nil
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
func batchNormGrad(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 5); err != nil {
		return nil, err
	}
	return batchNormGradMasked(n, in, nil, nil, ctx.MayOverwrite(0))
}

// batchNormReluGrad is graph.BatchNormReluGrad(dR, R, X, scale, mean, var):
// BatchNormalizationGrad(ReluGrad(dR, R), X, scale, mean, var), with the
// Relu gradient's mask (R > 0; NaN and zeros give 0) applied to dR as the
// sums read it, so the masked gradient is never stored. The results are
// bit for bit those of the two kernels.
func batchNormReluGrad(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 6); err != nil {
		return nil, err
	}
	return batchNormGradMasked(n, []*graph.Tensor{in[0], in[2], in[3], in[4], in[5]}, in[1], nil, ctx.MayOverwrite(0))
}

// batchNormGradMasked is BatchNormalizationGrad(dy, X, scale, mean, var)
// for in = (dy, X, scale, mean, var), with dy masked by relu > 0 when relu
// is not nil. With pre (float32 X, relu nil), dy is pre.ds, which the
// kernel first fills channel by channel with AddReluGrad(pre.a, pre.b,
// pre.r), and which then comes first among the results.
func batchNormGradMasked(n *graph.Node, in []*graph.Tensor, relu *graph.Tensor, pre *addReluPre, overDY bool) ([]*graph.Tensor, error) {
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
	var r *graph.Tensor
	if relu != nil {
		if r, err = halfToFloat32(n, relu); err != nil {
			return nil, err
		}
		if err := sameFloat(n, r, x, "the Relu output"); err != nil {
			return nil, err
		}
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
	// The parameters in float64 and the gradients live in the node's
	// state between runs (a training step allocates none of them).
	st := kern.State[bnGradState](n)
	st.scale = kern.Float64sInto(st.scale, in[2])
	st.mean = kern.Float64sInto(st.mean, in[3])
	st.variance = kern.Float64sInto(st.variance, in[4])
	scale, mean, variance := st.scale, st.mean, st.variance
	// dX comes from kern.New (the memory plan places it) unless X was
	// widened from a half type and dX must be cast back.
	var dx *graph.Tensor
	if x.DType == in[1].DType {
		if overDY && pre == nil && dy == in[0] && graph.SameShape(dy.Shape, x.Shape) {
			// dX over dy (the executor handed its storage over): each
			// channel's dX is written after the channel's sums read dy.
			dx = dy
		} else if dx, err = kern.NewUninit(n, x.DType, x.Shape); err != nil { // bnBackward writes every element of dX
			return nil, err
		}
	} else if dx, err = graph.NewTensor(x.DType, x.Shape); err != nil {
		return nil, n.Errorf("dX of shape %v: %w", x.Shape, err)
	}
	g := &st.grads
	g.scale, g.bias = kern.Grow(g.scale, b.r), kern.Grow(g.bias, b.r)
	g.mean, g.variance = kern.Grow(g.mean, b.r), kern.Grow(g.variance, b.r)
	switch xs := x.Data.(type) {
	case []float32:
		var rs []float32
		if r != nil {
			rs = r.Data.([]float32)
		}
		bnBackwardPreInto(dy.Data.([]float32), rs, xs, dx.Data.([]float32), b, scale, mean, variance, eps, training, g, pre)
	case []float64:
		var rs []float64
		if r != nil {
			rs = r.Data.([]float64)
		}
		bnBackwardMaskedInto(dy.Data.([]float64), rs, xs, dx.Data.([]float64), b, scale, mean, variance, eps, training, g)
	}
	dxOut, err := kern.Cast(dx, in[1].DType)
	if err != nil {
		return nil, n.Errorf("%v", err)
	}
	var outBuf [6]*graph.Tensor
	outs := outBuf[:0]
	if pre != nil {
		outs = append(outs, in[0])
	}
	outs = append(outs, dxOut)
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
	return kern.Results(n, outs...), nil
}

// bnGrads are the per-parameter gradients of batch normalisation.
type bnGrads struct{ scale, bias, mean, variance []float64 }

// bnGradState is what a BatchNormalization gradient node keeps between
// runs: its parameters in float64 and its gradients.
type bnGradState struct {
	scale, mean, variance []float64
	grads                 bnGrads
}

// bnBackward writes dX into dx and returns the parameter gradients.
func bnBackward[F float](dy, x, dx []F, b layout, scale, mean, variance []float64, eps float64, training bool) bnGrads {
	return bnBackwardMasked(dy, nil, x, dx, b, scale, mean, variance, eps, training)
}

// bnBackwardMasked is bnBackward for the gradient dy masked by r > 0 when r
// is not nil (r is then a Relu's output and dy the Relu's gradient). The
// parameters (channels) are split over the cores; each channel's sums run
// in one goroutine in a fixed order, so the result does not depend on the
// split.
func bnBackwardMasked[F float](dy, r, x, dx []F, b layout, scale, mean, variance []float64, eps float64, training bool) bnGrads {
	g := bnGrads{
		scale:    make([]float64, b.r),
		bias:     make([]float64, b.r),
		mean:     make([]float64, b.r),
		variance: make([]float64, b.r),
	}
	bnBackwardMaskedInto(dy, r, x, dx, b, scale, mean, variance, eps, training, &g)
	return g
}

// bnBackwardMaskedInto is bnBackwardMasked into g, whose four slices hold
// b.r elements each (cleared first).
func bnBackwardMaskedInto[F float](dy, r, x, dx []F, b layout, scale, mean, variance []float64, eps float64, training bool, g *bnGrads) {
	bnBackwardPreInto(dy, r, x, dx, b, scale, mean, variance, eps, training, g, nil)
}

// addReluPre is what BatchNormAddReluGrad computes before the gradient's
// sums read it: ds = AddReluGrad(a, b, r), all float32 in X's layout.
type addReluPre struct{ a, b, r, ds []float32 }

// bnBackwardPreInto is bnBackwardMaskedInto, with dy first filled from pre
// (nil for none) a channel, or a block of channels, at a time, just before
// the sums read it (dy is then pre.ds, float32, and r nil).
func bnBackwardPreInto[F float](dy, r, x, dx []F, b layout, scale, mean, variance []float64, eps float64, training bool, g *bnGrads, pre *addReluPre) {
	clear(g.scale)
	clear(g.bias)
	clear(g.mean)
	clear(g.variance)
	workers := gradWorkers(b.r, 4*b.outer*b.inner)
	t := bnGradTask[F]{dy: dy, r: r, x: x, dx: dx, b: b, scale: scale, mean: mean, variance: variance,
		eps: eps, training: training, g: g, count: float64(b.outer * b.inner), per: (b.r + workers - 1) / workers, pre: pre}
	// Short float32 rows in training mode go channel block by channel
	// block over whole samples (see bnBackwardShort).
	_, t.short = any(x).([]float32)
	t.short = t.short && training && b.inner > 0 && b.inner < bnVecMin && b.outer > 0
	nn.ParallelItemsOf(workers, workers, true, t)
}

// bnGradTask is bnBackwardMaskedInto's work: item part is the channels
// [part·per, (part+1)·per).
type bnGradTask[F float] struct {
	dy, r, x, dx          []F
	b                     layout
	scale, mean, variance []float64
	eps, count            float64
	training, short       bool
	per                   int
	g                     *bnGrads
	pre                   *addReluPre
}

// fill computes pre.ds = AddReluGrad(pre.a, pre.b, pre.r) over the
// channels [lo, hi) of every sample (a no-op without pre).
func (t *bnGradTask[F]) fill(lo, hi int) {
	if t.pre == nil {
		return
	}
	b, p := t.b, t.pre
	for o := 0; o < b.outer; o++ {
		from, to := (o*b.r+lo)*b.inner, (o*b.r+hi)*b.inner
		elementwise.AddReluGradF32(p.ds[from:to], p.a[from:to], p.b[from:to], p.r[from:to])
	}
}

func (t *bnGradTask[F]) Item(_, part int) {
	b, per := t.b, t.per
	hi := min((part+1)*per, b.r)
	if t.short {
		x32, _ := any(t.x).([]float32)
		dy32, _ := any(t.dy).([]float32)
		dx32, _ := any(t.dx).([]float32)
		r32, _ := any(t.r).([]float32)
		block := min(bnShortBlock, bnShortCoef/b.inner)
		for lo := part * per; lo < hi; lo += block {
			t.fill(lo, min(lo+block, hi))
			bnBackwardShort(dy32, r32, x32, dx32, b, lo, min(lo+block, hi), t.count, t.scale, t.eps, t.g)
		}
		return
	}
	// With pre, dS is filled for a block of channels at a time (each
	// sample's rows of the block lie next to each other), about
	// bnFillElems elements, which stay in cache for the sums and dX.
	block := 1
	if t.pre != nil && b.outer*b.inner > 0 {
		block = max(1, bnFillElems/(b.outer*b.inner))
	}
	for p := part * per; p < hi; p++ {
		if (p-part*per)%block == 0 {
			t.fill(p, min(p+block, hi))
		}
		bnBackwardChannel(t.dy, t.r, t.x, t.dx, b, p, t.count, t.scale, t.mean, t.variance, t.eps, t.training, t.g)
	}
}

// bnFillElems is about how many elements of dS BatchNormAddReluGrad
// computes at once before their channels' gradients read them (128 KiB).
const bnFillElems = 32 << 10

// bnShortBlock is the most channels bnBackwardShort takes at once, and
// bnShortCoef the most elements of a sample in that block (its sums and
// coefficients live on the stack).
const (
	bnShortBlock = 128
	bnShortCoef  = 1024
)

// bnBackwardShort is bnBackwardChannel in training mode for float32 rows
// shorter than bnVecMin and the channels [lo, hi) (at most bnShortBlock,
// and at most bnShortCoef elements of a sample):
// rather than one channel's rows one after another, it walks each sample's
// rows of all the block's channels, which lie next to each other in memory,
// without a call per row. Every sum is taken in bnBackwardChannel's order
// (each row's partial sums from zero, then added to the channel's in sample
// order), so the results are bit for bit the same.
func bnBackwardShort(dy, r, x, dx []float32, b layout, lo, hi int, count float64, scale []float64, eps float64, g *bnGrads) {
	var acc [4 * bnShortBlock]float64
	var x0s [bnShortBlock]float64
	sd, sdd := acc[:bnShortBlock], acc[bnShortBlock:2*bnShortBlock]
	sg, sgd := acc[2*bnShortBlock:3*bnShortBlock], acc[3*bnShortBlock:]
	nc := hi - lo
	w := b.inner
	for k := range nc {
		x0s[k] = float64(x[(lo+k)*w])
	}
	for o := 0; o < b.outer; o++ {
		base := (o*b.r + lo) * w
		xs := x[base : base+nc*w]
		gs := dy[base : base+nc*w]
		var rs []float32
		if r != nil {
			rs = r[base : base+nc*w]
		}
		// The vector loop takes groups of four rows when it can.
		for k := bnGradShortSums(gs, rs, xs, w, nc, x0s[:nc], acc[:], bnShortBlock); k < nc; k++ {
			x0 := x0s[k]
			j := k * w
			var rd, rdd, rg, rgd float64
			if rs == nil {
				for i, e := range xs[j : j+w] {
					d := float64(e) - x0
					gv := float64(gs[j+i])
					rd += d
					rdd += float64(d * d)
					rg += gv
					rgd += float64(gv * d)
				}
			} else {
				for i, e := range xs[j : j+w] {
					d := float64(e) - x0
					var m uint32
					if rs[j+i] > 0 {
						m = ^uint32(0)
					}
					gv := float64(math.Float32frombits(math.Float32bits(gs[j+i]) & m))
					rd += d
					rdd += float64(d * d)
					rg += gv
					rgd += float64(gv * d)
				}
			}
			sd[k], sdd[k], sg[k], sgd[k] = sd[k]+rd, sdd[k]+rdd, sg[k]+rg, sgd[k]+rgd
		}
	}
	// The coefficients of dx = k1·dy + k2·x + k0 for each element of a
	// sample's block (the same for every sample), for the vector loop.
	var k1s, k2s, k0s [bnShortCoef]float64
	for k := range nc {
		p := lo + k
		md := sd[k] / count
		m := x0s[k] + md
		v := max(sdd[k]/count-md*md, 0)
		sumDy := sg[k]
		sumDyXc := sgd[k] - md*sg[k]
		inv := 1 / math.Sqrt(v+eps)
		sumDyXhat := sumDyXc * inv
		g.scale[p], g.bias[p] = sumDyXhat, sumDy
		a := scale[p] * inv
		meanDy, meanDyXhat := sumDy/count, sumDyXhat/count
		k1 := a
		k2 := -a * meanDyXhat * inv
		k0 := -a*meanDy + a*meanDyXhat*inv*m
		for i := k * w; i < (k+1)*w; i++ {
			k1s[i], k2s[i], k0s[i] = k1, k2, k0
		}
	}
	n := nc * w
	for o := 0; o < b.outer; o++ {
		base := (o*b.r + lo) * w
		var rs []float32
		if r != nil {
			rs = r[base : base+n]
		}
		bnGradApplyCoef(dx[base:base+n], dy[base:base+n], rs, x[base:base+n], k1s[:n], k2s[:n], k0s[:n])
	}
}

// bnGradApplyCoefGo is bnGradApplyCoef's loop in Go.
func bnGradApplyCoefGo(dx, dy, r, x []float32, k1, k2, k0 []float64) {
	dy, dx, k1, k2, k0 = dy[:len(x)], dx[:len(x)], k1[:len(x)], k2[:len(x)], k0[:len(x)]
	if r != nil {
		r = r[:len(x)]
	}
	for i, e := range x {
		dx[i] = float32(k1[i]*float64(maskedGrad32(dy, r, i)) + k2[i]*float64(e) + k0[i])
	}
}

// bnBackwardChannel is bnBackward for parameter p.
func bnBackwardChannel[F float](dy, r, x, dx []F, b layout, p int, count float64, scale, mean, variance []float64, eps float64, training bool, g *bnGrads) {
	m, v := mean[p], variance[p]
	// row returns the slices of dy, r (nil without a mask), x and dx for
	// sample o.
	row := func(o int) (gr, rr, xr, dr []F) {
		off := (o*b.r + p) * b.inner
		if r != nil {
			rr = r[off : off+b.inner]
		}
		return dy[off : off+b.inner], rr, x[off : off+b.inner], dx[off : off+b.inner]
	}
	// float32 rows go to the row loops (vectorised for long rows).
	x32, _ := any(x).([]float32)
	dy32, _ := any(dy).([]float32)
	dx32, _ := any(dx).([]float32)
	r32, _ := any(r).([]float32)
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
			if x32 != nil {
				off := (o*b.r + p) * b.inner
				var rr []float32
				if r32 != nil {
					rr = r32[off : off+b.inner]
				}
				var rd, rdd, rg, rgd float64
				if b.inner >= bnVecMin {
					// Ask for the row of dx written below.
					var pf []float32
					if bnGradPrefetch(b, r32 != nil) {
						pf = dx32[off : off+b.inner]
					}
					rd, rdd, rg, rgd = bnGradRowSums(dy32[off:off+b.inner], rr, x32[off:off+b.inner], x0, pf)
				} else {
					rd, rdd, rg, rgd = bnGradRowSumsGo(dy32[off:off+b.inner], rr, x32[off:off+b.inner], x0)
				}
				sd, sdd, sg, sgd = sd+rd, sdd+rdd, sg+rg, sgd+rgd
				continue
			}
			gr, rr, xr, _ := row(o)
			gr = gr[:len(xr)]
			for i, e := range xr {
				d := float64(e) - x0
				gv := maskedGrad(gr, rr, i)
				sd += d
				sdd += float64(d * d)
				sg += gv
				sgd += float64(gv * d)
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
			gr, rr, xr, _ := row(o)
			gr = gr[:len(xr)]
			for i, e := range xr {
				gv := maskedGrad(gr, rr, i)
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
			gr, rr, _, dr := row(o)
			for i := range dr {
				dr[i] = F(maskedGrad(gr, rr, i) * a)
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
	// The apply pass asks for the next channel's rows (they follow
	// this channel's in each sample), which its sums pass reads next.
	ahead := 0
	if p+1 < b.r && bnGradPrefetch(b, r32 != nil) {
		ahead = b.inner
	}
	for o := 0; o < b.outer; o++ {
		if x32 != nil {
			off := (o*b.r + p) * b.inner
			var rr []float32
			if r32 != nil {
				rr = r32[off : off+b.inner]
			}
			if b.inner >= bnVecMin {
				bnGradRowApply(dx32[off:off+b.inner], dy32[off:off+b.inner], rr, x32[off:off+b.inner], k1, k2, k0, ahead)
			} else {
				bnGradRowApplyGo(dx32[off:off+b.inner], dy32[off:off+b.inner], rr, x32[off:off+b.inner], k1, k2, k0)
			}
			continue
		}
		gr, rr, xr, dr := row(o)
		gr, dr = gr[:len(xr)], dr[:len(xr)]
		for i, e := range xr {
			dr[i] = F(k1*maskedGrad(gr, rr, i) + k2*float64(e) + k0)
		}
	}
}

// bnGradPrefetchBytes is the most bytes of a channel's operands (dy, x,
// the mask r) for which bnBackwardChannel's passes prefetch: the next
// channel's rows and dx's beside the ones in hand must fit in L2 (1 MiB on
// the Zen 4 host). Past it (ResNet-50's 112×112 channels at batch 8, 1.2
// MB) the apply pass reads from L3 anyway, and the prefetches measured
// 3-12% slower; at 56×56 they are 15-40% faster (BenchmarkMembound).
const bnGradPrefetchBytes = 512 << 10

// bnGradPrefetch reports whether bnBackwardChannel prefetches for b's
// channels (masked: r is read too).
func bnGradPrefetch(b layout, masked bool) bool {
	arrays := 2
	if masked {
		arrays = 3
	}
	return arrays*4*b.outer*b.inner <= bnGradPrefetchBytes
}

// maskedGrad returns g[i] in float64, or 0 when r is not nil and r[i] is
// not > 0 (the Relu gradient's mask: zeros and NaN give 0).
func maskedGrad[F float](g, r []F, i int) float64 {
	if r != nil && !(r[i] > 0) {
		return 0
	}
	return float64(g[i])
}

// bnVecMin is the shortest row bnBackwardChannel hands to the assembly
// loops: below it the calls cost more than the Go loops save (measured on
// ResNet-18's 4×4 activations).
const bnVecMin = 32

// bnGradRowSumsGo is bnGradRowSums's loop in Go.
func bnGradRowSumsGo(dy, r, x []float32, x0 float64) (sd, sdd, sg, sgd float64) {
	dy = dy[:len(x)]
	if r != nil {
		r = r[:len(x)]
	}
	for i, e := range x {
		d := float64(e) - x0
		gv := float64(maskedGrad32(dy, r, i))
		sd += d
		sdd += float64(d * d)
		sg += gv
		sgd += float64(gv * d)
	}
	return sd, sdd, sg, sgd
}

// bnGradRowApplyGo is bnGradRowApply's loop in Go.
func bnGradRowApplyGo(dx, dy, r, x []float32, k1, k2, k0 float64) {
	dy, dx = dy[:len(x)], dx[:len(x)]
	if r != nil {
		r = r[:len(x)]
	}
	for i, e := range x {
		dx[i] = float32(k1*float64(maskedGrad32(dy, r, i)) + k2*float64(e) + k0)
	}
}

// maskedGrad32 is maskedGrad for float32 without a branch on the data: the
// comparison picks an all-ones or zero mask (a conditional move) that keeps
// or clears g[i]'s bits, as the ReluGrad kernel does.
func maskedGrad32(g, r []float32, i int) float32 {
	if r == nil {
		return g[i]
	}
	var m uint32
	if r[i] > 0 {
		m = ^uint32(0)
	}
	return math.Float32frombits(math.Float32bits(g[i]) & m)
}
