package reduce

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// BatchNormalization handles half types itself: from opset 15 the running
// statistics may have a different dtype from X, and each output keeps the
// dtype its spec gives it.
func init() {
	kern.RegisterHalf("BatchNormalization", batchNorm)
	kern.RegisterSpec(graph.FusedDomain, graph.BatchNormRelu, kern.Spec{Fn: batchNormRelu, Half: true})
	kern.RegisterSpec(graph.FusedDomain, graph.BatchNormAddRelu, kern.Spec{Fn: batchNormAddRelu, Half: true})
}

// batchNormAddRelu is graph.BatchNormAddRelu(X, scale, B, mean, var, R):
// BatchNormalization, R added to Y and a Relu applied as Y is written, bit
// for bit the BatchNormalization, Add and Relu kernels' result. X and R of
// one float32 or float64 type and shape take that one pass; anything else
// (half types, a broadcast R) runs the three kernels.
func batchNormAddRelu(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 6); err != nil {
		return nil, err
	}
	x, r := in[0], in[5]
	if (x.DType == graph.Float32 || x.DType == graph.Float64) && r.DType == x.DType && graph.SameShape(r.Shape, x.Shape) {
		if err := checkFloat(n, r, "R"); err != nil {
			return nil, err
		}
		return batchNormKernel(ctx, n, in[:5], true, r)
	}
	// The unfused chain.
	outs, err := batchNormKernel(ctx, n, in[:5], false, nil)
	if err != nil {
		return nil, err
	}
	res := append([]*graph.Tensor(nil), outs...)
	for _, op := range []struct {
		name string
		args []*graph.Tensor
	}{{"Add", []*graph.Tensor{nil, r}}, {"Relu", []*graph.Tensor{nil}}} {
		op.args[0] = res[0]
		y, err := kern.RunNested(ctx, n, "", op.name, op.args)
		if err != nil {
			return nil, err
		}
		res[0] = y[0]
	}
	return res, nil
}

// batchNormRelu is graph.BatchNormRelu: BatchNormalization with a Relu on
// Y applied as Y is written (negative values become +0, -0 and NaN stay,
// as the Relu kernel does), bit for bit the two kernels' result for
// float32 and float64 X. For a half X the Relu applies before Y is
// rounded to the half type, so a tiny negative value gives +0 where the
// unfused ops give -0.
func batchNormRelu(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	return batchNormKernel(ctx, n, in, true, nil)
}

// batchNorm is BatchNormalization with inputs X (N, C, D1, ...), scale, B,
// mean and var.
//
// Inference: Y = (X - mean) / sqrt(var + epsilon) * scale + B per channel.
//
// Training (opset 14+: training_mode=1; earlier opsets: when the node names
// more than one output and is_test, which opset 6 has, is not set): Y is
// normalised with the batch statistics (population variance), and the running
// statistics come back updated as mean·momentum + batch·(1 - momentum). From
// opset 14 the outputs are Y, running_mean, running_var; before, they are Y,
// mean, var, saved_mean, saved_var, the saved ones being the batch mean and
// variance.
//
// Before opset 9, spatial=0 gave per-activation parameters of shape
// (C, D1, ...); parameters of that size are accepted at any opset and then
// statistics are taken over N only.
func batchNorm(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	return batchNormKernel(ctx, n, in, false, nil)
}

// batchNormKernel is BatchNormalization, followed by a Relu on Y when relu
// is set (graph.BatchNormRelu); with a residual res (X's float32 or
// float64 type and shape, relu set) res is added to Y before the Relu
// (graph.BatchNormAddRelu).
func batchNormKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor, relu bool, res *graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 5); err != nil {
		return nil, err
	}
	xDType := in[0].DType
	statDType := in[3].DType
	conv := make([]*graph.Tensor, 5)
	for i := range conv {
		var err error
		if conv[i], err = toFloat32(n, in[i]); err != nil {
			return nil, err
		}
		if err := checkFloat(n, conv[i], bnInputNames[i]); err != nil {
			return nil, err
		}
	}
	x := conv[0]
	if x.Rank() < 2 {
		return nil, n.Errorf("X must have rank 2 or more (N, C, ...), has shape %v", x.Shape)
	}
	c := x.Shape[1]
	spatial := product(x.Shape[2:])
	params := conv[1].Size()
	for i := 2; i < 5; i++ {
		if conv[i].Size() != params {
			return nil, n.Errorf("%s has %d elements, scale has %d", bnInputNames[i], conv[i].Size(), params)
		}
	}
	// View X as (N, P, inner): P parameters, each applying to inner
	// contiguous elements of every sample.
	b := blocks{outer: x.Shape[0], r: c, inner: spatial}
	switch {
	case params == c:
	case params == c*spatial:
		b.r, b.inner = c*spatial, 1
	default:
		return nil, n.Errorf("scale has %d elements, want C = %d (or C·D = %d for per-activation statistics)", params, c, c*spatial)
	}
	eps := float64(n.AttrFloat("epsilon", 1e-5))
	momentum := float64(n.AttrFloat("momentum", 0.9))
	modern := ctx.Opset == 0 || ctx.Opset >= 14 // 0: no opset, the newest semantics
	var training bool
	if modern {
		training = n.AttrInt("training_mode", 0) != 0
	} else {
		named := 0
		for _, o := range n.Outputs {
			if o != "" {
				named++
			}
		}
		training = named > 1 && n.AttrInt("is_test", 0) == 0
	}
	// The parameters in float64 and the statistics live in the node's
	// state between runs (a training step allocates none of them).
	st := kern.State[bnState](n)
	st.scale = kern.Float64sInto(st.scale, conv[1])
	st.bias = kern.Float64sInto(st.bias, conv[2])
	st.mean = kern.Float64sInto(st.mean, conv[3])
	st.variance = kern.Float64sInto(st.variance, conv[4])
	scale, bias, mean, variance := st.scale, st.bias, st.mean, st.variance
	// Y comes from kern.New (the memory plan places it) unless X was
	// widened from a half type and Y must be cast back.
	var (
		y   *graph.Tensor
		err error
	)
	if x.DType == xDType {
		// bnApply writes every element of Y.
		if y, err = kern.NewUninit(n, x.DType, x.Shape); err != nil {
			return nil, err
		}
	} else if y, err = graph.NewTensor(x.DType, x.Shape); err != nil {
		return nil, n.Errorf("Y of shape %v: %w", x.Shape, err)
	}
	if res != nil && (res.DType != x.DType || !graph.SameShape(res.Shape, x.Shape) || !relu) {
		return nil, n.Errorf("internal: residual %v%v for X %v%v", res.DType, res.Shape, x.DType, x.Shape)
	}
	if !training {
		switch xs := x.Data.(type) {
		case []float32:
			bnApply(xs, residual[float32](res), y.Data.([]float32), b, scale, bias, mean, variance, eps, relu)
		case []float64:
			bnApply(xs, residual[float64](res), y.Data.([]float64), b, scale, bias, mean, variance, eps, relu)
		}
		out, err := castTo(n, y, xDType)
		if err != nil {
			return nil, err
		}
		// Running statistics, when a model names them in inference mode,
		// pass through unchanged.
		return []*graph.Tensor{out, in[3], in[4]}, nil
	}
	st.batchMean, st.batchVar = kern.Grow(st.batchMean, b.r), kern.Grow(st.batchVar, b.r)
	batchMean, batchVar := st.batchMean, st.batchVar
	switch xs := x.Data.(type) {
	case []float32:
		bnTrainInto(xs, residual[float32](res), y.Data.([]float32), b, scale, bias, eps, relu, batchMean, batchVar)
	case []float64:
		bnTrainInto(xs, residual[float64](res), y.Data.([]float64), b, scale, bias, eps, relu, batchMean, batchVar)
	}
	st.runMean, st.runVar = kern.Grow(st.runMean, params), kern.Grow(st.runVar, params)
	runMean, runVar := st.runMean, st.runVar
	// ONNX updates the running variance with the population variance;
	// PyTorch uses the unbiased one. onnxtrain's training graphs set the
	// (non-ONNX) attribute onnxtrain_unbiased_var so training matches PyTorch.
	correction := 1.0
	if count := b.outer * b.inner; n.AttrInt(graph.UnbiasedVarAttr, 0) == 1 && count > 1 {
		correction = float64(count) / float64(count-1)
	}
	for p := range runMean {
		runMean[p] = mean[p]*momentum + batchMean[p]*(1-momentum)
		runVar[p] = variance[p]*momentum + batchVar[p]*correction*(1-momentum)
	}
	pshape := in[3].Shape
	yOut, err := castTo(n, y, xDType)
	if err != nil {
		return nil, err
	}
	var outBuf [5]*graph.Tensor
	outs := append(outBuf[:0], yOut)
	for _, s := range []struct {
		v []float64
		d graph.DType
	}{{runMean, statDType}, {runVar, statDType}, {batchMean, xDType}, {batchVar, xDType}} {
		if modern && len(outs) == 3 {
			break
		}
		t, err := floatTensor(n, s.d, pshape, s.v)
		if err != nil {
			return nil, err
		}
		outs = append(outs, t)
	}
	return kern.Results(n, outs...), nil
}

// bnState is what a BatchNormalization node keeps between runs: its
// parameters in float64 and its statistics.
type bnState struct {
	scale, bias, mean, variance []float64
	batchMean, batchVar         []float64
	runMean, runVar             []float64
}

// residual returns res's elements (nil for no residual).
func residual[F float](res *graph.Tensor) []F {
	if res == nil {
		return nil
	}
	return res.Data.([]F)[:res.Size()]
}

// bnInputNames names BatchNormalization's inputs for errors.
var bnInputNames = []string{"X", "scale", "B", "input_mean", "input_var"}

// bnApply writes x normalised per parameter p of blocks b into y:
// (x - mean[p]) / sqrt(variance[p] + eps) * scale[p] + bias[p], plus r
// (x's layout; nil for none) and Relu'd when relu is set. The parameters
// are split over the cores (each writes its own channels).
func bnApply[F float](x, r, y []F, b blocks, scale, bias, mean, variance []float64, eps float64, relu bool) {
	if x32, ok := any(x).([]float32); ok && b.inner < bnVecMin {
		parallelRowsOf(b.r, b.outer*b.inner, bnShortTask{x: x32, r: any(r).([]float32), y: any(y).([]float32), b: b,
			scale: scale, bias: bias, mean: mean, variance: variance, eps: eps, relu: relu})
		return
	}
	parallelRowsOf(b.r, b.outer*b.inner, bnTask[F]{x: x, r: r, y: y, b: b, scale: scale, bias: bias,
		mean: mean, variance: variance, eps: eps, relu: relu, apply: true})
}

// bnTask is the work of bnApply, bnTrainInto and bnStats over the
// parameters [lo, hi): with stats set it computes their mean and
// variance first (into mean and variance), with apply set it normalises
// x (plus r, when r is not nil) into y.
type bnTask[F float] struct {
	x, r, y                     []F
	b                           blocks
	scale, bias, mean, variance []float64
	eps                         float64
	relu, stats, apply          bool
}

func (t *bnTask[F]) Chunk(lo, hi int) {
	for p := lo; p < hi; p++ {
		if t.stats {
			// With apply set, the statistics pass asks for the lines of
			// y and r that the apply pass is about to write and read.
			var pfY, pfR []F
			if t.apply {
				pfY, pfR = t.y, t.r
			}
			t.mean[p], t.variance[p] = bnChannelStats(t.x, t.b, p, pfY, pfR)
		}
		if t.apply {
			// The apply pass asks for the next channel's rows of x (in
			// L2), which the next statistics pass reads.
			bnApplyChannelAdd(t.x, t.r, t.y, t.b, p, t.scale[p], t.bias[p], t.mean[p], t.variance[p], t.eps, t.relu, t.stats && p+1 < hi)
		}
	}
}

// bnTrain computes the batch mean and population variance of each
// parameter (as bnStats) and normalises x with them into y (as bnApply),
// one parameter at a time, so that the second pass over a channel's
// elements finds them in cache.
func bnTrain[F float](x, y []F, b blocks, scale, bias []float64, eps float64, relu bool) (mean, variance []float64) {
	mean, variance = make([]float64, b.r), make([]float64, b.r)
	bnTrainInto(x, nil, y, b, scale, bias, eps, relu, mean, variance)
	return mean, variance
}

// bnTrainInto is bnTrain into mean and variance (b.r elements each), with
// the residual r (x's layout; nil for none) added before the Relu.
func bnTrainInto[F float](x, r, y []F, b blocks, scale, bias []float64, eps float64, relu bool, mean, variance []float64) {
	if x32, ok := any(x).([]float32); ok && b.inner < bnVecMin {
		// Short rows: blocks of channels at once (bnShortTask).
		parallelRowsOf(b.r, b.outer*b.inner, bnShortTask{x: x32, r: any(r).([]float32), y: any(y).([]float32), b: b,
			scale: scale, bias: bias, mean: mean, variance: variance, eps: eps, relu: relu, stats: true})
		return
	}
	parallelRowsOf(b.r, b.outer*b.inner, bnTask[F]{x: x, r: r, y: y, b: b, scale: scale, bias: bias,
		mean: mean, variance: variance, eps: eps, relu: relu, stats: true, apply: true})
}

// bnShortCols is the most elements of a sample that bnShortTask takes in
// one block of channels: its per-element sums and coefficients live on
// the stack, and the block's rows of all the samples (bnShortCols·N
// floats) stay in cache between the statistics and the affine map.
const bnShortCols = 256

// bnShortTask is batch normalisation of float32 rows shorter than
// bnVecMin over the parameters [lo, hi): with stats set it computes their
// mean and population variance first (into mean and variance), then it
// normalises x (plus r, when r is not nil) into y. Rather than one
// channel's rows one after another (a call per row of a few elements), it
// takes blocks of channels whose rows lie next to each other in every
// sample (bnShortBlock).
type bnShortTask struct {
	x, r, y                     []float32
	b                           blocks
	scale, bias, mean, variance []float64
	eps                         float64
	relu, stats                 bool
}

func (t *bnShortTask) Chunk(lo, hi int) {
	block := max(1, bnShortCols/max(t.b.inner, 1))
	for p := lo; p < hi; p += block {
		t.block(p, min(p+block, hi))
	}
}

// block is bnShortTask's work on the parameters [lo, hi), whose rows
// span at most bnShortCols elements of a sample. The statistics are
// accumulated per element position over the samples (each position's
// sums in sample order, then a channel's positions in order), in float64
// on values shifted by the channel's first element as bnChannelStats
// does; the results do not depend on how the channels are split. Y is
// bit for bit bnApplyChannel's with the same statistics.
func (t *bnShortTask) block(lo, hi int) {
	b := t.b
	w := b.inner
	n := (hi - lo) * w
	if n == 0 || b.outer == 0 {
		if t.stats {
			// No elements: bnChannelStats's zeros.
			clear(t.mean[lo:hi])
			clear(t.variance[lo:hi])
		}
		return
	}
	stride := b.r * w
	base := lo * w
	span := (b.outer-1)*stride + n
	x, y := t.x[base:base+span], t.y[base:base+span]
	var mul, add [bnShortCols]float32
	if t.stats {
		var x0s, s, q [bnShortCols]float64
		for k := range hi - lo {
			x0 := float64(x[k*w])
			for i := k * w; i < (k+1)*w; i++ {
				x0s[i] = x0
			}
		}
		bnShortSums(x, stride, b.outer, x0s[:n], s[:n], q[:n])
		count := float64(b.outer * w)
		for k := range hi - lo {
			var sc, qc float64
			for i := k * w; i < (k+1)*w; i++ {
				sc, qc = sc+s[i], qc+q[i]
			}
			md := sc / count
			t.mean[lo+k], t.variance[lo+k] = x0s[k*w]+md, max(qc/count-md*md, 0)
		}
	}
	for k := range hi - lo {
		p := lo + k
		// bnApplyChannel's coefficients.
		a := t.scale[p] / math.Sqrt(t.variance[p]+t.eps)
		m, c := float32(a), float32(t.bias[p]-t.mean[p]*a)
		for i := k * w; i < (k+1)*w; i++ {
			mul[i], add[i] = m, c
		}
	}
	if t.r != nil {
		bnShortApplyAddRelu(y, x, t.r[base:base+span], stride, b.outer, mul[:n], add[:n])
		return
	}
	bnShortApply(y, x, stride, b.outer, mul[:n], add[:n], t.relu)
}

// bnShortSumsGo is bnShortSums's loop in Go over the columns [from,
// len(s)).
func bnShortSumsGo(x []float32, stride, rows int, x0, s, q []float64, from int) {
	n := len(s)
	x0, q = x0[:n], q[:n]
	for j := from; j < n; j++ {
		s[j], q[j] = 0, 0
	}
	for o := 0; o < rows; o++ {
		row := x[o*stride : o*stride+n]
		for j := from; j < n; j++ {
			d := float64(row[j]) - x0[j]
			s[j] += d
			q[j] += d * d
		}
	}
}

// bnShortApplyGo is bnShortApply's loop in Go over the columns [from,
// len(mul)): bnRowApplyGo's map with a coefficient per column.
func bnShortApplyGo(y, x []float32, stride, rows int, mul, add []float32, relu bool, from int) {
	n := len(mul)
	add = add[:n]
	for o := 0; o < rows; o++ {
		src := x[o*stride : o*stride+n]
		dst := y[o*stride : o*stride+n]
		if !relu {
			for j := from; j < n; j++ {
				dst[j] = src[j]*mul[j] + add[j]
			}
			continue
		}
		for j := from; j < n; j++ {
			// bnRowApplyGo's branch-free Relu.
			r := src[j]*mul[j] + add[j]
			var m uint32
			if r < 0 {
				m = ^uint32(0)
			}
			dst[j] = math.Float32frombits(math.Float32bits(r) &^ m)
		}
	}
}

// bnShortApplyAddReluGo is bnShortApplyAddRelu's loop in Go over the
// columns [from, len(mul)): bnShortApplyGo's map with relu, r added to
// each result (rounded) before the Relu, as the Add kernel adds.
func bnShortApplyAddReluGo(y, x, r []float32, stride, rows int, mul, add []float32, from int) {
	n := len(mul)
	add = add[:n]
	for o := 0; o < rows; o++ {
		src := x[o*stride : o*stride+n]
		res := r[o*stride : o*stride+n]
		dst := y[o*stride : o*stride+n]
		for j := from; j < n; j++ {
			v := src[j]*mul[j] + add[j]
			s := v + res[j]
			var m uint32
			if s < 0 {
				m = ^uint32(0)
			}
			dst[j] = math.Float32frombits(math.Float32bits(s) &^ m)
		}
	}
}

// bnApplyChannel is bnApply for parameter p.
func bnApplyChannel[F float](x, y []F, b blocks, p int, scale, bias, mean, variance, eps float64, relu bool) {
	bnApplyChannelAdd(x, nil, y, b, p, scale, bias, mean, variance, eps, relu, false)
}

// bnApplyChannelAdd is bnApply for parameter p, with the residual r (nil
// for none; with one, relu is set); with next set (p+1 < b.r) it asks for
// parameter p+1's rows of x as it reads parameter p's.
func bnApplyChannelAdd[F float](x, r, y []F, b blocks, p int, scale, bias, mean, variance, eps float64, relu, next bool) {
	a := scale / math.Sqrt(variance+eps)
	mul, add := F(a), F(bias-mean*a)
	x32, _ := any(x).([]float32)
	y32, _ := any(y).([]float32)
	r32, _ := any(r).([]float32)
	for o := 0; o < b.outer; o++ {
		off := (o*b.r + p) * b.inner
		var pf []float32
		if next && x32 != nil {
			pf = x32[off+b.inner : off+2*b.inner]
		}
		if x32 != nil && r32 != nil {
			if b.inner >= bnVecMin {
				bnRowApplyAddRelu(y32[off:off+b.inner], x32[off:off+b.inner], r32[off:off+b.inner], float32(mul), float32(add), pf)
			} else {
				bnRowApplyAddReluGo(y32[off:off+b.inner], x32[off:off+b.inner], r32[off:off+b.inner], float32(mul), float32(add))
			}
			continue
		}
		if x32 != nil {
			if b.inner >= bnVecMin {
				bnRowApply(y32[off:off+b.inner], x32[off:off+b.inner], float32(mul), float32(add), relu, pf)
			} else {
				bnRowApplyGo(y32[off:off+b.inner], x32[off:off+b.inner], float32(mul), float32(add), relu)
			}
			continue
		}
		src := x[off : off+b.inner]
		dst := y[off : off+b.inner]
		dst = dst[:len(src)]
		if r != nil {
			res := r[off : off+b.inner]
			res = res[:len(src)]
			for i, v := range src {
				t := v*mul + add
				t += res[i]
				if t < 0 {
					t = 0
				}
				dst[i] = t
			}
			continue
		}
		for i, v := range src {
			r := v*mul + add
			if relu && r < 0 {
				r = 0
			}
			dst[i] = r
		}
	}
}

// bnRowApplyAddReluGo is bnRowApplyAddRelu's loop in Go: dst =
// Relu(src·mul + add + res), rounded after the product and each sum (the
// BatchNormalization and Add kernels' roundings); negative sums become +0
// (-0 and NaN stay, as the Relu kernel does).
func bnRowApplyAddReluGo(dst, src, res []float32, mul, add float32) {
	dst, res = dst[:len(src)], res[:len(src)]
	for i, v := range src {
		t := v*mul + add
		s := t + res[i]
		var m uint32
		if s < 0 {
			m = ^uint32(0)
		}
		dst[i] = math.Float32frombits(math.Float32bits(s) &^ m)
	}
}

// bnRowApplyGo is bnRowApply's loop in Go: dst = src·mul + add, rounded
// after the product and the sum; with relu, negative results become +0
// (as the Relu kernel does: -0 and NaN stay).
func bnRowApplyGo(dst, src []float32, mul, add float32, relu bool) {
	dst = dst[:len(src)]
	if !relu {
		for i, v := range src {
			dst[i] = v*mul + add
		}
		return
	}
	for i, v := range src {
		// The sign test picks a mask without a branch (the Relu kernel's
		// way), which clears the bits of negative values.
		r := v*mul + add
		var m uint32
		if r < 0 {
			m = ^uint32(0)
		}
		dst[i] = math.Float32frombits(math.Float32bits(r) &^ m)
	}
}

// bnVecMin is the shortest row the callers hand to bnRowSums and
// bnRowApply's assembly loops: below it the calls cost more than the Go
// loops save (measured on ResNet-18's 4×4 activations).
const bnVecMin = 32

// bnRowSumsGo is bnRowSums's loop in Go: Σ(v-x0) and Σ(v-x0)² in float64.
func bnRowSumsGo(x []float32, x0 float64) (s, q float64) {
	var s1, q1 float64
	i := 0
	for ; i+2 <= len(x); i += 2 {
		d0, d1 := float64(x[i])-x0, float64(x[i+1])-x0
		s += d0
		s1 += d1
		q += d0 * d0
		q1 += d1 * d1
	}
	if i < len(x) {
		d := float64(x[i]) - x0
		s += d
		q += d * d
	}
	return s + s1, q + q1
}

// bnStats returns the mean and population variance of each parameter's
// elements (over outer and inner), accumulated in float64 in one pass over
// values shifted by the parameter's first element (which keeps the
// precision of the two-pass formula for data far from zero:
// var = Σd²/n − (Σd/n)² with d = x − x0). The parameters are split over
// the cores; each sum runs in one goroutine in a fixed order, so the
// result does not depend on the split.
func bnStats[F float](x []F, b blocks) (mean, variance []float64) {
	mean, variance = make([]float64, b.r), make([]float64, b.r)
	bnStatsInto(x, b, mean, variance)
	return mean, variance
}

// bnStatsInto is bnStats into mean and variance (b.r elements each).
func bnStatsInto[F float](x []F, b blocks, mean, variance []float64) {
	parallelRowsOf(b.r, b.outer*b.inner, bnTask[F]{x: x, b: b, mean: mean, variance: variance, stats: true})
}

// bnChannelStats is bnStats for parameter p (0, 0 for no elements). It
// asks for the same elements of pfY and pfR (x's layout; nil for none) as
// it reads x's: the lines the caller's next pass writes and reads.
func bnChannelStats[F float](x []F, b blocks, p int, pfY, pfR []F) (mean, variance float64) {
	count := float64(b.outer * b.inner)
	if count == 0 {
		return 0, 0
	}
	x32, _ := any(x).([]float32)
	y32, _ := any(pfY).([]float32)
	r32, _ := any(pfR).([]float32)
	x0 := float64(x[p*b.inner])
	var s, q float64
	for o := 0; o < b.outer; o++ {
		off := (o*b.r + p) * b.inner
		if x32 != nil && b.inner >= bnVecMin {
			var pf1, pf2 []float32
			if y32 != nil {
				pf1 = y32[off : off+b.inner]
			}
			if r32 != nil {
				pf2 = r32[off : off+b.inner]
			}
			rs, rq := bnRowSums(x32[off:off+b.inner], x0, pf1, pf2)
			s, q = s+rs, q+rq
			continue
		}
		v := x[off : off+b.inner]
		var s1, q1 float64
		i := 0
		for ; i+2 <= len(v); i += 2 {
			d0, d1 := float64(v[i])-x0, float64(v[i+1])-x0
			s += d0
			s1 += d1
			q += d0 * d0
			q1 += d1 * d1
		}
		if i < len(v) {
			d := float64(v[i]) - x0
			s += d
			q += d * d
		}
		s, q = s+s1, q+q1
	}
	md := s / count
	return x0 + md, max(q/count-md*md, 0)
}

// floatTensor builds a tensor of float dtype d from float64 values.
func floatTensor(n *graph.Node, d graph.DType, shape []int, v []float64) (*graph.Tensor, error) {
	t, err := kern.New(n, d, shape)
	if err != nil {
		return nil, err
	}
	if t.Size() != len(v) {
		return nil, n.Errorf("internal: %d values for shape %v", len(v), shape)
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
