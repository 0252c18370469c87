package reduce

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.Register("InstanceNormalization", instanceNorm)
	kern.RegisterHalf("LayerNormalization", layerNorm)
	kern.Register("GroupNormalization", groupNorm)
	kern.Register("LRN", lrn)
	kern.Register("MeanVarianceNormalization", meanVarianceNorm)
	kern.Register("LpNormalization", lpNorm)
}

// meanVar returns the mean and population variance of row (two passes in
// float64).
func meanVar[F float](row []F) (mean, variance float64) {
	if len(row) == 0 {
		return math.NaN(), math.NaN()
	}
	var s float64
	for _, v := range row {
		s += float64(v)
	}
	mean = s / float64(len(row))
	var q float64
	for _, v := range row {
		d := float64(v) - mean
		q += d * d
	}
	return mean, q / float64(len(row))
}

// normalizeRow writes (row - mean) * inv to dst.
func normalizeRow[F float](row, dst []F, mean, inv float64) {
	for i, v := range row {
		dst[i] = F((float64(v) - mean) * inv)
	}
}

// channelParams checks that the rank is at least 2 and returns N, C and the
// spatial size of X (N, C, D1, ...).
func channelParams(n *graph.Node, x *graph.Tensor) (int, int, int, error) {
	if x.Rank() < 2 {
		return 0, 0, 0, n.Errorf("input must have rank 2 or more (N, C, ...), has shape %v", x.Shape)
	}
	return x.Shape[0], x.Shape[1], product(x.Shape[2:]), nil
}

// instanceNorm is InstanceNormalization: every (sample, channel) plane is
// normalised to zero mean and unit variance, then scaled and shifted per
// channel.
func instanceNorm(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	x := in[0]
	batch, c, spatial, err := channelParams(n, x)
	if err != nil {
		return nil, err
	}
	if in[1].Size() != c || in[2].Size() != c {
		return nil, n.Errorf("scale and B must have C = %d elements, have %d and %d", c, in[1].Size(), in[2].Size())
	}
	scale, bias := float64s(in[1]), float64s(in[2])
	eps := float64(n.AttrFloat("epsilon", 1e-5))
	out, err := kern.New(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	switch xs := x.Data.(type) {
	case []float32:
		instanceNormRows(xs, out.Data.([]float32), batch*c, spatial, scale, bias, eps)
	case []float64:
		instanceNormRows(xs, out.Data.([]float64), batch*c, spatial, scale, bias, eps)
	default:
		return nil, n.Errorf("dtype %v is not supported (want a float type)", x.DType)
	}
	return []*graph.Tensor{out}, nil
}

// instanceNormRows normalises rows rows of size elements; row j uses the
// parameters of channel j % len(scale).
func instanceNormRows[F float](x, y []F, rows, size int, scale, bias []float64, eps float64) {
	c := len(scale)
	for j := 0; j < rows; j++ {
		row := x[j*size : (j+1)*size]
		dst := y[j*size : (j+1)*size]
		m, v := meanVar(row)
		a := scale[j%c] / math.Sqrt(v+eps)
		mul, add := F(a), F(bias[j%c]-m*a)
		for i, e := range row {
			dst[i] = e*mul + add
		}
	}
}

// layerNorm is LayerNormalization (opset 17): X is normalised over the
// dims from axis (default -1) on, then multiplied by Scale and shifted by the
// optional B, both broadcast to X.shape[axis:]. The optional outputs Mean
// and InvStdDev have shape X.shape[:axis] followed by ones and the dtype
// stash_type names (default float32); the statistics are computed in
// float64 whatever stash_type says.
func layerNorm(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	xDType := in[0].DType
	x, err := toFloat32(n, in[0])
	if err != nil {
		return nil, err
	}
	if err := checkFloat(n, x, "X"); err != nil {
		return nil, err
	}
	stash := graph.DType(n.AttrInt("stash_type", int64(graph.Float32)))
	if !stash.IsFloat() {
		return nil, n.Errorf("stash_type %d is not a float type", int64(stash))
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
	// Parameters, the statistics' shape and the row task live in the
	// node's state, reused between runs.
	st := kern.State[layerNormState](n)
	scale, err := layerNormParam(n, st.scale, in[1], normShape, "Scale")
	if err != nil {
		return nil, err
	}
	st.scale = scale
	var bias []float64
	if bt := kern.Opt(in, 2); bt != nil {
		if bias, err = layerNormParam(n, st.bias, bt, normShape, "B"); err != nil {
			return nil, err
		}
		st.bias = bias
	}
	eps := float64(n.AttrFloat("epsilon", 1e-5))
	stats := kern.Scratch[float64](2 * outer)
	defer kern.ReleaseScratch(stats)
	mean, invStd := stats[:outer], stats[outer:]
	// Y comes from kern.NewUninit (the memory plan places it; every row is
	// written) unless X was widened from float16/bfloat16 and Y must be
	// cast back.
	var y *graph.Tensor
	if x.DType == xDType {
		if y, err = kern.NewUninit(n, x.DType, x.Shape); err != nil {
			return nil, err
		}
	} else {
		if y, err = graph.NewTensor(x.DType, x.Shape); err != nil {
			return nil, n.Errorf("Y of shape %v: %w", x.Shape, err)
		}
	}
	switch xs := x.Data.(type) {
	case []float32:
		layerNormRowsWith(kern.State[layerNormTask[float32]](n), xs, y.Data.([]float32), outer, size, scale, bias, eps, mean, invStd)
	case []float64:
		layerNormRowsWith(kern.State[layerNormTask[float64]](n), xs, y.Data.([]float64), outer, size, scale, bias, eps, mean, invStd)
	}
	yOut, err := castTo(n, y, xDType)
	if err != nil {
		return nil, err
	}
	statShape := append(st.statShape[:0], x.Shape...)
	for d := axis; d < rank; d++ {
		statShape[d] = 1
	}
	st.statShape = statShape
	meanOut, err := floatTensor(n, stash, statShape, mean)
	if err != nil {
		return nil, err
	}
	invOut, err := floatTensor(n, stash, statShape, invStd)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, yOut, meanOut, invOut), nil
}

// layerNormState is what a LayerNormalization node keeps between runs.
type layerNormState struct {
	scale, bias []float64
	statShape   []int
}

// layerNormParam returns a Scale or B tensor broadcast to normShape, as
// float64, in dst (grown as needed) when it has normShape already.
func layerNormParam(n *graph.Node, dst []float64, t *graph.Tensor, normShape []int, what string) ([]float64, error) {
	if !t.DType.IsFloat() {
		return nil, n.Errorf("%s has dtype %v, want a float type", what, t.DType)
	}
	if graph.SameShape(t.Shape, normShape) {
		return kern.Float64sInto(dst, t), nil
	}
	v := float64s(t)
	bs, err := kern.BroadcastShape(t.Shape, normShape)
	if err != nil || !graph.SameShape(bs, normShape) {
		return nil, n.Errorf("%s of shape %v does not broadcast to the normalised shape %v", what, t.Shape, normShape)
	}
	idx := kern.BroadcastIndex(t.Shape, normShape)
	out := make([]float64, len(idx))
	for i, j := range idx {
		out[i] = v[j]
	}
	return out, nil
}

// layerNormRows normalises outer rows of size elements into y, storing each
// row's mean and inverse standard deviation; rows are split over
// GOMAXPROCS goroutines when there are enough of them. The statistics are
// float64; the per-element affine map runs in the element type.
func layerNormRows[F float](x, y []F, outer, size int, scale, bias []float64, eps float64, mean, invStd []float64) {
	layerNormRowsWith(new(layerNormTask[F]), x, y, outer, size, scale, bias, eps, mean, invStd)
}

// layerNormRowsWith is layerNormRows with the work object t (a node's,
// kept between runs).
func layerNormRowsWith[F float](t *layerNormTask[F], x, y []F, outer, size int, scale, bias []float64, eps float64, mean, invStd []float64) {
	params := kern.Scratch[F](2 * size)
	defer kern.ReleaseScratch(params)
	scaleF := params[:size]
	for i, v := range scale[:size] {
		scaleF[i] = F(v)
	}
	var biasF []F
	if bias != nil {
		biasF = params[size:]
		for i, v := range bias[:size] {
			biasF[i] = F(v)
		}
	}
	*t = layerNormTask[F]{x: x, y: y, size: size, scale: scaleF, bias: biasF, eps: eps, mean: mean, invStd: invStd}
	runRows(outer, size, t)
	*t = layerNormTask[F]{}
}

// layerNormTask is layerNormRows's work over rows, kept in the node's
// state.
type layerNormTask[F float] struct {
	x, y, scale, bias []F
	size              int
	eps               float64
	mean, invStd      []float64
}

// Chunk normalises rows [lo, hi).
func (t *layerNormTask[F]) Chunk(lo, hi int) {
	layerNormRowRange(t.x, t.y, lo, hi, t.size, t.scale, t.bias, t.eps, t.mean, t.invStd)
}

func layerNormRowRange[F float](x, y []F, lo, hi, size int, scale, bias []F, eps float64, mean, invStd []float64) {
	if x32, ok := any(x).([]float32); ok && size > 0 {
		y32, s32 := any(y).([]float32), any(scale).([]float32)
		b32, _ := any(bias).([]float32)
		layerNormRows32(x32, y32, lo, hi, size, eps, s32, b32, mean, invStd)
		return
	}
	for o := lo; o < hi; o++ {
		row := x[o*size : (o+1)*size]
		m, v := layerNormStats(row)
		inv := 1 / math.Sqrt(v+eps)
		mean[o], invStd[o] = m, inv
		layerNormAffine(row, y[o*size:(o+1)*size], m, inv, scale, bias)
	}
}

// layerNormStats is meanVar for LayerNormalization rows in one pass: it
// sums d = x − row[0] and d² in float64 with four independent accumulators
// each and returns the mean and population variance Σd²/n − (Σd/n)² (at
// least 0). Shifting by row[0] keeps the subtraction accurate when the
// mean is large next to the spread (for float32 data of similar magnitudes
// d and d² are exact in float64).
func layerNormStats[F float](row []F) (mean, variance float64) {
	n := len(row)
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	x0 := float64(row[0])
	var s0, s1, s2, s3, q0, q1, q2, q3 float64
	i := 0
	for ; i+4 <= n; i += 4 {
		r := row[i : i+4 : i+4]
		d0, d1, d2, d3 := float64(r[0])-x0, float64(r[1])-x0, float64(r[2])-x0, float64(r[3])-x0
		s0 += d0
		s1 += d1
		s2 += d2
		s3 += d3
		q0 += d0 * d0
		q1 += d1 * d1
		q2 += d2 * d2
		q3 += d3 * d3
	}
	for ; i < n; i++ {
		d := float64(row[i]) - x0
		s0 += d
		q0 += d * d
	}
	fn := float64(n)
	md := ((s0 + s1) + (s2 + s3)) / fn
	return x0 + md, max(((q0+q1)+(q2+q3))/fn-md*md, 0)
}

// layerNormAffine writes (row − m)·inv·scale + bias (bias may be nil) to
// dst in the element type, four elements per step. m is split into
// mHi + mLo (mHi = F(m)), and x − m is computed as (x − mHi) − mLo, so
// that rows whose mean is large next to their spread lose no accuracy (x −
// mHi is then exact).
func layerNormAffine[F float](row, dst []F, m, inv float64, scale, bias []F) {
	n := len(row)
	dst, scale = dst[:n], scale[:n]
	mHi := F(m)
	mLo, invF := F(m-float64(mHi)), F(inv)
	if bias == nil {
		i := 0
		for ; i+4 <= n; i += 4 {
			r, s, d := row[i:i+4:i+4], scale[i:i+4:i+4], dst[i:i+4:i+4]
			d[0] = ((r[0] - mHi) - mLo) * invF * s[0]
			d[1] = ((r[1] - mHi) - mLo) * invF * s[1]
			d[2] = ((r[2] - mHi) - mLo) * invF * s[2]
			d[3] = ((r[3] - mHi) - mLo) * invF * s[3]
		}
		for ; i < n; i++ {
			dst[i] = ((row[i] - mHi) - mLo) * invF * scale[i]
		}
		return
	}
	bias = bias[:n]
	i := 0
	for ; i+4 <= n; i += 4 {
		r, s, b, d := row[i:i+4:i+4], scale[i:i+4:i+4], bias[i:i+4:i+4], dst[i:i+4:i+4]
		d[0] = ((r[0]-mHi)-mLo)*invF*s[0] + b[0]
		d[1] = ((r[1]-mHi)-mLo)*invF*s[1] + b[1]
		d[2] = ((r[2]-mHi)-mLo)*invF*s[2] + b[2]
		d[3] = ((r[3]-mHi)-mLo)*invF*s[3] + b[3]
	}
	for ; i < n; i++ {
		dst[i] = ((row[i]-mHi)-mLo)*invF*scale[i] + bias[i]
	}
}

// groupNorm is GroupNormalization: the C channels of every sample are split
// into num_groups groups, each normalised over its channels and spatial
// dims, then scaled and shifted. scale and bias have C elements (opset 21)
// or num_groups elements (opset 18, one value per group); which one is told
// by their size.
func groupNorm(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	x := in[0]
	batch, c, spatial, err := channelParams(n, x)
	if err != nil {
		return nil, err
	}
	if !n.HasAttr("num_groups") {
		return nil, n.Errorf("attribute num_groups is required")
	}
	groups := int(n.AttrInt("num_groups", 0))
	if groups <= 0 || c%groups != 0 {
		return nil, n.Errorf("num_groups = %d must be positive and divide C = %d", groups, c)
	}
	perGroup := c / groups
	scale, bias := float64s(in[1]), float64s(in[2])
	if len(scale) != len(bias) {
		return nil, n.Errorf("scale has %d elements, bias %d", len(scale), len(bias))
	}
	switch len(scale) {
	case c:
	case groups:
		// Opset 18: one value per group; expand to channels.
		s, b := make([]float64, c), make([]float64, c)
		for ch := range s {
			s[ch], b[ch] = scale[ch/perGroup], bias[ch/perGroup]
		}
		scale, bias = s, b
	default:
		return nil, n.Errorf("scale has %d elements, want C = %d (or num_groups = %d)", len(scale), c, groups)
	}
	eps := float64(n.AttrFloat("epsilon", 1e-5))
	out, err := kern.New(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	switch xs := x.Data.(type) {
	case []float32:
		groupNormRows(xs, out.Data.([]float32), batch*groups, perGroup, spatial, scale, bias, eps)
	case []float64:
		groupNormRows(xs, out.Data.([]float64), batch*groups, perGroup, spatial, scale, bias, eps)
	default:
		return nil, n.Errorf("dtype %v is not supported (want a float type)", x.DType)
	}
	return []*graph.Tensor{out}, nil
}

// groupNormRows normalises rows groups of perGroup channels of spatial
// elements each.
func groupNormRows[F float](x, y []F, rows, perGroup, spatial int, scale, bias []float64, eps float64) {
	size := perGroup * spatial
	c := len(scale)
	for j := 0; j < rows; j++ {
		row := x[j*size : (j+1)*size]
		m, v := meanVar(row)
		inv := 1 / math.Sqrt(v+eps)
		for k := 0; k < perGroup; k++ {
			ch := (j*perGroup + k) % c
			a := scale[ch] * inv
			mul, add := F(a), F(bias[ch]-m*a)
			off := j*size + k*spatial
			dst := y[off : off+spatial]
			for i, e := range x[off : off+spatial] {
				dst[i] = e*mul + add
			}
		}
	}
}

// lrn is LRN, local response normalisation across channels:
// y = x / (bias + alpha/size · Σ x²)^beta, the sum running over the
// channels c - ⌊(size-1)/2⌋ … c + ⌈(size-1)/2⌉ that exist.
func lrn(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	batch, c, spatial, err := channelParams(n, x)
	if err != nil {
		return nil, err
	}
	size := int(n.AttrInt("size", 0))
	if size <= 0 {
		return nil, n.Errorf("attribute size must be positive, is %d", size)
	}
	p := lrnParams{
		lo:    (size - 1) / 2,
		hi:    size - 1 - (size-1)/2,
		alpha: float64(n.AttrFloat("alpha", 1e-4)) / float64(size),
		beta:  float64(n.AttrFloat("beta", 0.75)),
		bias:  float64(n.AttrFloat("bias", 1)),
	}
	out, err := kern.New(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	b := blocks{outer: batch, r: c, inner: spatial}
	switch xs := x.Data.(type) {
	case []float32:
		lrnBlocks(xs, out.Data.([]float32), b, p)
	case []float64:
		lrnBlocks(xs, out.Data.([]float64), b, p)
	default:
		return nil, n.Errorf("dtype %v is not supported (want a float type)", x.DType)
	}
	return []*graph.Tensor{out}, nil
}

// lrnParams are LRN's window (lo channels before, hi after) and constants
// (alpha already divided by size).
type lrnParams struct {
	lo, hi            int
	alpha, beta, bias float64
}

func lrnBlocks[F float](x, y []F, b blocks, p lrnParams) {
	size := b.r * b.inner
	acc := make([]float64, b.inner)
	for o := 0; o < b.outer; o++ {
		block := x[o*size : (o+1)*size]
		for ch := 0; ch < b.r; ch++ {
			clear(acc)
			for k := max(0, ch-p.lo); k <= min(b.r-1, ch+p.hi); k++ {
				for i, v := range block[k*b.inner : (k+1)*b.inner] {
					f := float64(v)
					acc[i] += f * f
				}
			}
			src := block[ch*b.inner : (ch+1)*b.inner]
			dst := y[o*size+ch*b.inner : o*size+(ch+1)*b.inner]
			for i, v := range src {
				dst[i] = F(float64(v) / math.Pow(p.bias+p.alpha*acc[i], p.beta))
			}
		}
	}
}

// meanVarianceNorm is MeanVarianceNormalization: (X - E[X]) / (sqrt(Var[X])
// + 1e-9), the statistics taken over axes (default [0, 2, 3]). The 1e-9
// matches the op's function body.
func meanVarianceNorm(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	rank := x.Rank()
	reduced := make([]bool, rank)
	for _, a := range n.AttrInts("axes", []int64{0, 2, 3}) {
		ax := int(a)
		if ax < -rank || ax >= rank {
			return nil, n.Errorf("axis %d is out of range for an input of rank %d", a, rank)
		}
		if ax < 0 {
			ax += rank
		}
		reduced[ax] = true
	}
	perm, b := reduceLayout(x.Shape, reduced)
	src := x
	var err error
	if perm != nil {
		if src, err = permuteTensor(n, x, perm); err != nil {
			return nil, err
		}
	}
	y := &graph.Tensor{DType: x.DType, Shape: append([]int{}, src.Shape...)}
	switch xs := src.Data.(type) {
	case []float32:
		y.Data = mvnBlocks(xs, b)
	case []float64:
		y.Data = mvnBlocks(xs, b)
	default:
		return nil, n.Errorf("dtype %v is not supported (want a float type)", x.DType)
	}
	if perm != nil {
		inv := make([]int, len(perm))
		for d, p := range perm {
			inv[p] = d
		}
		if y, err = permuteTensor(n, y, inv); err != nil {
			return nil, err
		}
	}
	return []*graph.Tensor{y}, nil
}

// mvnBlocks normalises every (outer, inner) column of x along r.
func mvnBlocks[F float](x []F, b blocks) []F {
	y := make([]F, len(x))
	size := b.r * b.inner
	mean := make([]float64, b.inner)
	sq := make([]float64, b.inner)
	for o := 0; o < b.outer; o++ {
		block := x[o*size : (o+1)*size]
		clear(mean)
		clear(sq)
		for k := 0; k < b.r; k++ {
			for i, v := range block[k*b.inner : (k+1)*b.inner] {
				mean[i] += float64(v)
			}
		}
		for i := range mean {
			mean[i] /= float64(b.r)
		}
		for k := 0; k < b.r; k++ {
			for i, v := range block[k*b.inner : (k+1)*b.inner] {
				d := float64(v) - mean[i]
				sq[i] += d * d
			}
		}
		for i := range sq {
			sq[i] = 1 / (math.Sqrt(sq[i]/float64(b.r)) + 1e-9)
		}
		for k := 0; k < b.r; k++ {
			off := o*size + k*b.inner
			dst := y[off : off+b.inner]
			for i, v := range block[k*b.inner : (k+1)*b.inner] {
				dst[i] = F((float64(v) - mean[i]) * sq[i])
			}
		}
	}
	return y
}

// lpNorm is LpNormalization: x divided by its L1 (p=1) or L2 (p=2, the
// default) norm along axis (default -1); a zero norm gives zeros.
func lpNorm(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	p := n.AttrInt("p", 2)
	if p != 1 && p != 2 {
		return nil, n.Errorf("p = %d is not supported (want 1 or 2)", p)
	}
	if x.Rank() == 0 {
		return nil, n.Errorf("input must have rank 1 or more")
	}
	axis, err := kern.NormAxis(n, int(n.AttrInt("axis", -1)), x.Rank())
	if err != nil {
		return nil, err
	}
	out, err := kern.New(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	b := axisBlocks(x.Shape, axis)
	switch xs := x.Data.(type) {
	case []float32:
		lpNormBlocks(xs, out.Data.([]float32), b, p == 1)
	case []float64:
		lpNormBlocks(xs, out.Data.([]float64), b, p == 1)
	default:
		return nil, n.Errorf("dtype %v is not supported (want a float type)", x.DType)
	}
	return []*graph.Tensor{out}, nil
}

func lpNormBlocks[F float](x, y []F, b blocks, l1 bool) {
	size := b.r * b.inner
	acc := make([]float64, b.inner)
	for o := 0; o < b.outer; o++ {
		block := x[o*size : (o+1)*size]
		if l1 {
			sumAbsBlock(block, acc, b.r)
		} else {
			sumSquaresBlock(block, acc, b.r)
			for i, a := range acc {
				acc[i] = math.Sqrt(a)
			}
		}
		for i, a := range acc {
			if a != 0 {
				acc[i] = 1 / a
			}
		}
		for k := 0; k < b.r; k++ {
			off := o*size + k*b.inner
			dst := y[off : off+b.inner]
			for i, v := range block[k*b.inner : (k+1)*b.inner] {
				dst[i] = F(float64(v) * acc[i])
			}
		}
	}
}
