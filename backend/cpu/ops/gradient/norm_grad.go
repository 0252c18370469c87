package gradient

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
	kern.RegisterSpec(graph.InternalDomain, "SoftmaxGrad", kern.Spec{Fn: softmaxGradKernel(false), Overwrites: []int{0}})
	kern.RegisterSpec(graph.InternalDomain, "LogSoftmaxGrad", kern.Spec{Fn: softmaxGradKernel(true), Overwrites: []int{0}})
	kern.RegisterSpec(graph.InternalDomain, "BatchNormalizationGrad", kern.Spec{Fn: batchNormGrad, Half: true, Overwrites: []int{0}})
	kern.RegisterSpec(graph.InternalDomain, "LayerNormalizationGrad", kern.Spec{Fn: layerNormGrad, Overwrites: []int{0}})
	kern.RegisterSpec(graph.FusedDomain, graph.LayerNormGradAdd, kern.Spec{Fn: layerNormGrad, Overwrites: []int{3, 0}})
	register("GroupNormalizationGrad", groupNormGrad)
	register("NegativeLogLikelihoodLossGrad", nllLossGrad)
	kern.RegisterSpec(graph.InternalDomain, "SoftmaxCrossEntropyLossGrad", kern.Spec{Fn: softmaxCrossEntropyLossGrad, Overwrites: []int{1}})
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
	if groups <= 0 || c%groups != 0 {
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

// lossGradState is what a loss gradient node keeps between runs: the
// target shape, per-target weights and scales, and sceBackward's columns.
type lossGradState struct {
	shape, want []int
	w, s, p, g  []float64
	rows        sceRowsTask
}

// floats returns buf grown to n elements (contents unspecified).
func floats(buf *[]float64, n int) []float64 {
	if cap(*buf) < n {
		*buf = make([]float64, n)
	}
	return (*buf)[:n]
}

// lossTargets checks target against an input of shape (N, C, d...) and
// returns, per target element, the weight it carries (0 when ignored), the
// labels, and the sum of the weights. w and the target shape live in st.
func lossTargets(n *graph.Node, st *lossGradState, shape []int, target, weight *graph.Tensor, o lossGradOptions) (w []float64, labels []int64, sum float64, err error) {
	if len(shape) < 2 {
		return nil, nil, 0, n.Errorf("input must have rank 2 or more (N, C, ...), has shape %v", shape)
	}
	c := shape[1]
	want := append(append(st.want[:0], shape[0]), shape[2:]...)
	st.want = want
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
	w = floats(&st.w, len(labels))
	clear(w)
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
// by the weight sum for mean. A nil dloss gives nil. The scales live in
// st.
func lossScales(n *graph.Node, st *lossGradState, dloss *graph.Tensor, count int, weightSum float64, o lossGradOptions) ([]float64, error) {
	if dloss == nil {
		return nil, nil
	}
	s := floats(&st.s, count)
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
	st := kern.State[lossGradState](n)
	shape := st.shape[:0]
	for i := range shapeT.Size() {
		shape = append(shape, int(shapeT.Int(i)))
	}
	st.shape = shape
	w, labels, sum, err := lossTargets(n, st, shape, target, kern.Opt(in, 3), o)
	if err != nil {
		return nil, err
	}
	s, err := lossScales(n, st, dloss, len(labels), sum, o)
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
	return kern.Results(n, dx), nil
}

// softmaxCrossEntropyLossGrad is SoftmaxCrossEntropyLossGrad(dloss, scores,
// target, weight, dlog_prob), any of dloss, weight and dlog_prob omitted,
// with the forward's reduction and ignore_index attributes. With
// p = softmax(scores) along axis 1 and G the gradient of log_prob (dlog_prob
// plus -weight[t]·dloss_k at each target), d scores = G - p·ΣG.
func softmaxCrossEntropyLossGrad(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
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
	st := kern.State[lossGradState](n)
	w, labels, sum, err := lossTargets(n, st, x.Shape, target, kern.Opt(in, 3), o)
	if err != nil {
		return nil, err
	}
	s, err := lossScales(n, st, dloss, len(labels), sum, o)
	if err != nil {
		return nil, err
	}
	dlogp := kern.Opt(in, 4)
	if dlogp != nil {
		if err := sameFloat(n, dlogp, x, "log_prob gradient"); err != nil {
			return nil, err
		}
	}
	b := layout{outer: x.Shape[0], r: x.Shape[1], inner: product(x.Shape[2:])}
	if xs, ok := x.Data.([]float32); ok && b.inner == 1 && dlogp == nil && s != nil && b.r > 0 {
		// The row kernel writes every element (a row of weight 0 is
		// cleared), so the storage comes unzeroed: zeroing 512×50257
		// logits' worth first was a third pass over memory. When the
		// executor hands the scores' storage over (their last reader),
		// the gradient goes over them: each row's exponentials are
		// written element by element after its maximum read the row.
		dx := x
		if !ctx.MayOverwrite(1) {
			if dx, err = kern.NewUninit(n, x.DType, x.Shape); err != nil {
				return nil, err
			}
		}
		st.rows = sceRowsTask{x: xs, dx: dx.Data.([]float32), c: b.r, labels: labels, w: w, s: s}
		st.rows.run(b.outer)
		return kern.Results(n, dx), nil
	}
	dx, err := kern.New(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	switch xs := x.Data.(type) {
	case []float32:
		var dl []float32
		if dlogp != nil {
			dl = dlogp.Data.([]float32)
		}
		sceBackward(xs, dl, dx.Data.([]float32), b, labels, w, s, floats(&st.p, b.r), floats(&st.g, b.r))
	case []float64:
		var dl []float64
		if dlogp != nil {
			dl = dlogp.Data.([]float64)
		}
		sceBackward(xs, dl, dx.Data.([]float64), b, labels, w, s, floats(&st.p, b.r), floats(&st.g, b.r))
	}
	return kern.Results(n, dx), nil
}

// sceBackward writes d scores for every (sample, position) column along the
// class axis. dlogp may be nil (no gradient into log_prob), and so may s
// (no gradient into the loss). p and g are scratch of b.r elements.
func sceBackward[F float](x, dlogp, dx []F, b layout, labels []int64, w, s, p, g []float64) {
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
