package graph

import "math"

// More lowerings into the primitive set: integer and rounding arithmetic,
// inverse trigonometry, and shape ops whose sizes are static once shapes
// are known (they refuse while a size they need is symbolic).

func init() {
	registerTyped("Scatter", lowerScatter)
	registerTyped("Mod", lowerMod)
	registerTyped("Round", lowerRound)
	registerTyped("Atan", lowerAtan)
	registerTyped("Asin", lowerAsin)
	registerTyped("Acos", lowerAcos)
	registerTyped("Size", lowerSize)
	registerTyped("Split", lowerSplit)
	registerTyped("Tile", lowerTile)
	registerTyped("Trilu", lowerTrilu)
	registerTyped("Hardmax", lowerHardmax)
	registerTyped("EyeLike", lowerEyeLike)
	registerTyped("OneHot", lowerOneHot)
	registerTyped("ReduceProd", lowerReduceProd)
	registerTyped("SpaceToDepth", lowerSpaceToDepth)
	registerTyped("DepthToSpace", lowerDepthToSpace)
}

// Scatter (deprecated at opset 11) is ScatterElements.
func lowerScatter(l *lowering) error {
	var attrs []*Attr
	if a := l.n.Attr("axis"); a != nil {
		attrs = append(attrs, a)
	}
	l.finish(0, l.opAttrs("ScatterElements", []string{l.in(0), l.in(1), l.in(2)}, attrs...))
	return nil
}

// trunc rounds x (of dtype d) toward zero.
func (l *lowering) trunc(x string, d DType) string {
	return l.op("Where", l.op("Less", x, l.scalarOf(d, 0)), l.op("Ceil", x), l.op("Floor", x))
}

// lowerMod: integers r = a - b*(a/b) (Div truncates), then, unless fmod,
// r+b where r is non-zero and its sign differs from b's; floats (fmod=1)
// a - b*trunc(a/b).
func lowerMod(l *lowering) error {
	a, b := l.in(0), l.in(1)
	d := l.dtype(a)
	fmod := l.n.AttrInt("fmod", 0) != 0
	switch {
	case d == Undefined:
		return l.unsupported("Mod of unknown dtype")
	case d.IsFloat():
		if !fmod {
			return l.unsupported("Mod of floats needs fmod=1")
		}
		l.finish(0, l.sub(a, l.mul(b, l.trunc(l.div(a, b), d))))
		return nil
	case !d.IsInt():
		return l.unsupported("Mod of %v", d)
	}
	r := l.sub(a, l.mul(b, l.div(a, b)))
	if fmod || isUnsigned(d) {
		l.finish(0, r)
		return nil
	}
	zero := l.scalarOf(d, 0)
	nonZero := l.op("Equal", l.op("Equal", r, zero), l.boolConst(false))
	signDiffers := l.op("Equal", l.op("Equal", l.op("Less", r, zero), l.op("Less", b, zero)), l.boolConst(false))
	fix := l.op("Where", nonZero, signDiffers, l.boolConst(false))
	l.finish(0, l.op("Where", fix, l.add(r, b), r))
	return nil
}

// lowerRound rounds half to even: floor(x+0.5), one less where x was half
// way and that is odd; values too large to have a fraction pass through.
func lowerRound(l *lowering) error {
	x := l.in(0)
	limit := float64(1 << 23)
	if l.dtype(x) == Float64 {
		limit = 1 << 52
	}
	half, one, two := l.scalar(x, 0.5), l.scalar(x, 1), l.scalar(x, 2)
	y := l.op("Floor", l.add(x, half))
	tie := l.op("Equal", l.sub(y, x), half)
	odd := l.op("Equal", l.sub(y, l.mul(l.op("Floor", l.mul(y, half)), two)), one)
	r := l.op("Where", l.op("Where", tie, odd, l.boolConst(false)), l.sub(y, one), y)
	small := l.op("Less", l.op("Abs", x), l.scalar(x, limit))
	l.finish(0, l.op("Where", small, r, x))
	return nil
}

// atan evaluates arctan in primitives: |x| > 1 maps to pi/2 - atan(1/|x|),
// |t| > tan(pi/8) to pi/4 + atan((t-1)/(t+1)), and what is left (at most
// tan(pi/8) ~ 0.414) to its Taylor series to u**23, accurate to about 1e-9;
// the sign is restored at the end.
func (l *lowering) atan(x string, d DType) string {
	c := func(v float64) string { return l.scalarOf(d, v) }
	one := c(1)
	ax := l.op("Abs", x)
	big := l.op("Less", one, ax)
	t := l.op("Where", big, l.div(one, ax), ax)
	mid := l.op("Less", c(math.Tan(math.Pi/8)), t)
	u := l.op("Where", mid, l.div(l.sub(t, one), l.add(t, one)), t)
	u2 := l.mul(u, u)
	// sum_{k=0..11} (-1)^k u^(2k+1)/(2k+1), by Horner in u2.
	p := c(-1.0 / 23)
	for k := 10; k >= 0; k-- {
		coef := 1.0 / float64(2*k+1)
		if k%2 == 1 {
			coef = -coef
		}
		p = l.add(l.mul(p, u2), c(coef))
	}
	at := l.mul(p, u)
	at = l.op("Where", mid, l.add(at, c(math.Pi/4)), at)
	at = l.op("Where", big, l.sub(c(math.Pi/2), at), at)
	return l.op("Where", l.op("Less", x, c(0)), l.mul(at, c(-1)), at)
}

func lowerAtan(l *lowering) error {
	l.finish(0, l.atan(l.in(0), l.dtypeOr(l.in(0))))
	return nil
}

// asin is atan(x / sqrt(1 - x*x)); at |x| = 1 the quotient is ±Inf and atan
// gives ±pi/2.
func (l *lowering) asin(x string) string {
	r := l.op("Sqrt", l.sub(l.scalar(x, 1), l.mul(x, x)))
	return l.atan(l.div(x, r), l.dtypeOr(x))
}

func lowerAsin(l *lowering) error {
	l.finish(0, l.asin(l.in(0)))
	return nil
}

func lowerAcos(l *lowering) error {
	x := l.in(0)
	l.finish(0, l.sub(l.scalar(x, math.Pi/2), l.asin(x)))
	return nil
}

// lowerSize is a constant once the shape is known.
func lowerSize(l *lowering) error {
	s, ok := l.staticShape(l.in(0))
	if !ok {
		return l.unsupported("Size of a symbolic shape")
	}
	n := int64(1)
	for _, d := range s {
		n *= d
	}
	l.b.OpTo("Identity", []string{l.b.Const(&Tensor{DType: Int64, Shape: []int{}, Data: []int64{n}})}, []string{l.n.Outputs[0]})
	return nil
}

// int64Values reads a constant integer tensor.
func (l *lowering) int64Values(name string) ([]int64, bool) {
	t := l.constant(name)
	if t == nil {
		return nil, false
	}
	v := make([]int64, t.Size())
	for i := range v {
		v[i] = t.Int(i)
	}
	return v, true
}

// sliceAxis takes [start, end) of x along axis.
func (l *lowering) sliceAxis(x string, axis, start, end int64) string {
	if l.opset() > 0 && l.opset() < 10 {
		return l.opAttrs("Slice", []string{x}, IntsAttr("starts", start), IntsAttr("ends", end), IntsAttr("axes", axis))
	}
	return l.op("Slice", x, l.int64s(start), l.int64s(end), l.int64s(axis))
}

func lowerSplit(l *lowering) error {
	x := l.in(0)
	s, ok := l.staticShape(x)
	if !ok {
		return l.unsupported("Split of a symbolic shape")
	}
	axis := l.n.AttrInt("axis", 0)
	if axis < 0 {
		axis += int64(len(s))
	}
	if axis < 0 || axis >= int64(len(s)) {
		return l.unsupported("axis out of range")
	}
	dim := s[axis]
	outs := len(l.n.Outputs)
	var sizes []int64
	switch {
	case l.in(1) != "":
		v, ok := l.int64Values(l.in(1))
		if !ok {
			return l.unsupported("split sizes computed at run time")
		}
		sizes = v
	case l.n.Attr("split") != nil:
		sizes = l.n.AttrInts("split", nil)
	default:
		if n := l.n.AttrInt("num_outputs", 0); n > 0 {
			outs = int(n)
		}
		chunk := (dim + int64(outs) - 1) / int64(outs)
		for i := 0; i < outs; i++ {
			sizes = append(sizes, max(0, min(chunk, dim-int64(i)*chunk)))
		}
	}
	if len(sizes) != len(l.n.Outputs) {
		return l.unsupported("%d split sizes for %d outputs", len(sizes), len(l.n.Outputs))
	}
	start := int64(0)
	for i, n := range sizes {
		if o := l.n.Outputs[i]; o != "" {
			l.finish(i, l.sliceAxis(x, axis, start, start+n))
		}
		start += n
	}
	if start != dim {
		return l.unsupported("split sizes sum to %d, the axis has %d", start, dim)
	}
	return nil
}

// lowerTile views x as [1, d0, 1, d1, ...], expands it to [r0, d0, r1,
// d1, ...] and reshapes to [r0*d0, r1*d1, ...].
func lowerTile(l *lowering) error {
	x := l.in(0)
	s, ok := l.staticShape(x)
	reps, ok2 := l.int64Values(l.in(1))
	if !ok || !ok2 || len(reps) != len(s) {
		return l.unsupported("Tile needs a static shape and constant repeats")
	}
	var view, wide, out []int64
	for i, d := range s {
		view = append(view, 1, d)
		wide = append(wide, reps[i], d)
		out = append(out, reps[i]*d)
	}
	y := l.op("Expand", l.reshape(x, view...), l.int64s(wide...))
	l.finish(0, l.reshape(y, out...))
	return nil
}

// lowerTrilu keeps the triangle with a constant mask.
func lowerTrilu(l *lowering) error {
	x := l.in(0)
	s, ok := l.staticShape(x)
	if !ok || len(s) < 2 {
		return l.unsupported("Trilu needs a static shape of rank 2 or more")
	}
	for _, d := range s {
		if d == 0 {
			l.finish(0, l.op("Identity", x)) // empty: nothing to mask
			return nil
		}
	}
	k := int64(0)
	upper := l.n.AttrInt("upper", 1) != 0
	rows, cols := s[len(s)-2], s[len(s)-1]
	if l.in(1) != "" {
		v, ok := l.int64Values(l.in(1))
		if !ok {
			// k at run time: compare the constant j-i with it.
			diff := make([]int64, rows*cols)
			for i := int64(0); i < rows; i++ {
				for j := int64(0); j < cols; j++ {
					diff[i*cols+j] = j - i
				}
			}
			d := l.b.Const(&Tensor{DType: Int64, Shape: []int{int(rows), int(cols)}, Data: diff})
			kk := l.reshape(l.in(1))
			var outside string
			if upper {
				outside = l.op("Less", d, kk)
			} else {
				outside = l.op("Less", kk, d)
			}
			l.finish(0, l.op("Where", outside, l.scalar(x, 0), x))
			return nil
		}
		if len(v) != 1 {
			return l.unsupported("k must be a scalar")
		}
		k = v[0]
	}
	mask := make([]bool, rows*cols)
	for i := int64(0); i < rows; i++ {
		for j := int64(0); j < cols; j++ {
			mask[i*cols+j] = (upper && j-i >= k) || (!upper && j-i <= k)
		}
	}
	m := l.b.Const(&Tensor{DType: Bool, Shape: []int{int(rows), int(cols)}, Data: mask})
	l.finish(0, l.op("Where", m, x, l.scalar(x, 0)))
	return nil
}

// iotaAlong is the constant int64 0..n-1 laid along axis of a rank-r shape
// (every other dim 1).
func (l *lowering) iotaAlong(n int64, axis, r int) string {
	v := make([]int64, n)
	for i := range v {
		v[i] = int64(i)
	}
	shape := make([]int, r)
	for i := range shape {
		shape[i] = 1
	}
	shape[axis] = int(n)
	return l.b.Const(&Tensor{DType: Int64, Shape: shape, Data: v})
}

// lowerHardmax is Equal(iota, ArgMax(x)) along axis, cast to x's dtype.
func lowerHardmax(l *lowering) error {
	x := l.in(0)
	s, ok := l.staticShape(x)
	if !ok {
		return l.unsupported("Hardmax of a symbolic shape")
	}
	r := len(s)
	legacy := l.opset() > 0 && l.opset() < 13
	axis := l.n.AttrInt("axis", -1)
	if legacy {
		axis = l.n.AttrInt("axis", 1)
	}
	if axis < 0 {
		axis += int64(r)
	}
	if axis < 0 || axis >= int64(r) {
		return l.unsupported("axis out of range")
	}
	v := x
	if legacy && axis != int64(r-1) {
		outer := int64(1)
		for _, d := range s[:axis] {
			outer *= d
		}
		v = l.reshape(x, outer, -1)
		inner := int64(1)
		for _, d := range s[axis:] {
			inner *= d
		}
		s, r, axis = []int64{outer, inner}, 2, 1
	}
	am := l.opAttrs("ArgMax", []string{v}, IntAttr("axis", axis), IntAttr("keepdims", 1))
	hit := l.op("Equal", l.iotaAlong(s[axis], int(axis), r), am)
	y := l.cast(hit, l.dtypeOr(x))
	if v != x {
		y = l.op("Reshape", y, l.op("Shape", x))
	}
	l.finish(0, y)
	return nil
}

// dtypeOr is a value's dtype, float32 when unknown.
func (l *lowering) dtypeOr(x string) DType {
	if d := l.dtype(x); d != Undefined {
		return d
	}
	return Float32
}

// lowerEyeLike is a constant once the shape is known.
func lowerEyeLike(l *lowering) error {
	x := l.in(0)
	s, ok := l.staticShape(x)
	if !ok || len(s) != 2 {
		return l.unsupported("EyeLike needs a static 2-D shape")
	}
	d := l.dtypeOr(x)
	if a := l.n.Attr("dtype"); a != nil {
		d = DType(a.I)
	}
	k := l.n.AttrInt("k", 0)
	t, err := NewTensor(d, []int{int(s[0]), int(s[1])})
	if err != nil {
		return l.unsupported("EyeLike of %v: %v", d, err)
	}
	for i := int64(0); i < s[0]; i++ {
		if j := i + k; j >= 0 && j < s[1] {
			t.SetFloat(int(i*s[1]+j), 1)
		}
	}
	l.b.OpTo("Identity", []string{l.b.Const(t)}, []string{l.n.Outputs[0]})
	return nil
}

// lowerOneHot compares the indices (negative ones counted from depth) with
// a constant iota along axis and selects values[1] or values[0].
func lowerOneHot(l *lowering) error {
	idx, depthName, values := l.in(0), l.in(1), l.in(2)
	s, ok := l.staticShape(idx)
	dv, ok2 := l.int64Values(depthName)
	if !ok || !ok2 || len(dv) != 1 {
		if t := l.constant(depthName); t != nil && t.Size() == 1 && ok {
			dv, ok2 = []int64{int64(t.Float(0))}, true
		} else {
			return l.unsupported("OneHot needs a static indices shape and a constant depth")
		}
	}
	depth := dv[0]
	r := len(s) + 1
	axis := l.n.AttrInt("axis", -1)
	if axis < 0 {
		axis += int64(r)
	}
	if axis < 0 || axis >= int64(r) {
		return l.unsupported("axis out of range")
	}
	i := l.cast(idx, Int64) // float indices truncate
	i = l.op("Where", l.op("Less", i, l.scalarOf(Int64, 0)), l.add(i, l.b.Const(&Tensor{DType: Int64, Shape: []int{}, Data: []int64{depth}})), i)
	view := make([]int64, 0, r)
	view = append(view, s[:axis]...)
	view = append(view, 1)
	view = append(view, s[axis:]...)
	hit := l.op("Equal", l.reshape(i, view...), l.iotaAlong(depth, int(axis), r))
	off := l.reshape(l.sliceAxis(values, 0, 0, 1), []int64{}...)
	on := l.reshape(l.sliceAxis(values, 0, 1, 2), []int64{}...)
	l.finish(0, l.op("Where", hit, on, off))
	return nil
}

// lowerReduceProd of floats: zero where any element is zero, otherwise
// (-1)**(negatives) * exp(sum(log|x|)); accurate to a few ulp of the
// product's logarithm.
func lowerReduceProd(l *lowering) error {
	x := l.in(0)
	if d := l.dtype(x); !d.IsFloat() {
		return l.unsupported("ReduceProd of %v", d)
	}
	axes := l.sourceAxes()
	keep := l.keepdims()
	if axes.noop && axes.input == "" && axes.list == nil {
		l.finish(0, l.op("Identity", x))
		return nil
	}
	zero := l.scalar(x, 0)
	one := l.scalar(x, 1)
	logs, err := l.reduce("ReduceSum", l.op("Log", l.op("Abs", x)), axes, keep)
	if err != nil {
		return err
	}
	negs, err := l.reduce("ReduceSum", l.op("Where", l.lessThanZero(x), one, zero), axes, keep)
	if err != nil {
		return err
	}
	zeros, err := l.reduce("ReduceSum", l.op("Where", l.op("Equal", x, zero), one, zero), axes, keep)
	if err != nil {
		return err
	}
	half := l.scalar(x, 0.5)
	odd := l.op("Equal", l.sub(negs, l.mul(l.op("Floor", l.mul(negs, half)), l.scalar(x, 2))), one)
	mag := l.op("Exp", logs)
	signed := l.op("Where", odd, l.negLike(mag, x), mag)
	l.finish(0, l.op("Where", l.op("Less", zero, zeros), zero, signed))
	return nil
}

// spaceDepthShapes reads x's static [N, C, H, W] and the block size.
func (l *lowering) spaceDepthShapes() ([]int64, int64, error) {
	s, ok := l.staticShape(l.in(0))
	if !ok || len(s) != 4 {
		return nil, 0, l.unsupported("needs a static 4-D shape")
	}
	b := l.n.AttrInt("blocksize", 0)
	if b <= 0 {
		return nil, 0, l.unsupported("blocksize must be positive")
	}
	return s, b, nil
}

func lowerSpaceToDepth(l *lowering) error {
	s, b, err := l.spaceDepthShapes()
	if err != nil {
		return err
	}
	n, c, h, w := s[0], s[1], s[2], s[3]
	if h%b != 0 || w%b != 0 {
		return l.unsupported("H and W must be multiples of blocksize")
	}
	v := l.reshape(l.in(0), n, c, h/b, b, w/b, b)
	v = l.opAttrs("Transpose", []string{v}, IntsAttr("perm", 0, 3, 5, 1, 2, 4))
	l.finish(0, l.reshape(v, n, c*b*b, h/b, w/b))
	return nil
}

func lowerDepthToSpace(l *lowering) error {
	s, b, err := l.spaceDepthShapes()
	if err != nil {
		return err
	}
	n, c, h, w := s[0], s[1], s[2], s[3]
	if c%(b*b) != 0 {
		return l.unsupported("C must be a multiple of blocksize**2")
	}
	var v string
	if l.n.AttrString("mode", "DCR") == "CRD" {
		v = l.reshape(l.in(0), n, c/(b*b), b, b, h, w)
		v = l.opAttrs("Transpose", []string{v}, IntsAttr("perm", 0, 1, 4, 2, 5, 3))
	} else {
		v = l.reshape(l.in(0), n, b, b, c/(b*b), h, w)
		v = l.opAttrs("Transpose", []string{v}, IntsAttr("perm", 0, 3, 4, 1, 5, 2))
	}
	l.finish(0, l.reshape(v, n, c/(b*b), h*b, w*b))
	return nil
}
