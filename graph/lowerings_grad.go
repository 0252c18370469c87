package graph

// Lowerings of the gradient ops autodiff emits (domain onnxtrain) into the
// primitive set. Most need static shapes: on a graph with symbolic dims
// they refuse, and a backend either keeps its kernel for the general plan
// or lowers them again once Specialize has made every shape known.

// domainLowerings holds the lowerings of ops outside ai.onnx, by
// "domain:op".
var domainLowerings = map[string]loweringFunc{}

func init() {
	domainLowerings[InternalDomain+":SumToShape"] = lowerSumToShape
	domainLowerings[InternalDomain+":UnreduceTo"] = lowerUnreduceTo
	domainLowerings[InternalDomain+":MatMulGradA"] = lowerMatMulGrad(0)
	domainLowerings[InternalDomain+":MatMulGradB"] = lowerMatMulGrad(1)
	domainLowerings[InternalDomain+":SoftmaxGrad"] = lowerSoftmaxGrad(false)
	domainLowerings[InternalDomain+":LogSoftmaxGrad"] = lowerSoftmaxGrad(true)
}

// HasDomainLowering reports whether op of a domain other than ai.onnx has
// a lowering to primitives.
func HasDomainLowering(domain, op string) bool {
	_, ok := domainLowerings[domain+":"+op]
	return ok
}

// lowerSumToShape sums g over the axes broadcasting expanded to reach the
// shape of like, then reshapes to it. It needs like's static shape and g's
// rank: summing over an axis where like has 1 is right whether or not g's
// dim there is 1, and g's other dims must equal like's (the Reshape checks).
func lowerSumToShape(l *lowering) error {
	g, like := l.in(0), l.in(1)
	ts, ok := l.staticShape(like)
	r := l.rank(g)
	if !ok || r < 0 {
		return l.unsupported("SumToShape needs the target's static shape and the gradient's rank")
	}
	if len(ts) > r {
		return l.unsupported("cannot sum rank %d down to %v", r, ts)
	}
	gs, static := l.staticShape(g)
	off := r - len(ts)
	var axes []int64
	for i := 0; i < r; i++ {
		switch {
		case i < off:
			axes = append(axes, int64(i))
		case static && gs[i] == ts[i-off]:
		case ts[i-off] == 1:
			axes = append(axes, int64(i))
		case static:
			return l.unsupported("cannot sum %v down to %v", gs, ts)
		}
	}
	if len(axes) == 0 && static {
		l.finish(0, l.op("Identity", g))
		return nil
	}
	y := g
	if len(axes) > 0 {
		var err error
		if y, err = l.reduce("ReduceSum", g, reduceAxes{list: axes}, true); err != nil {
			return err
		}
	}
	l.finish(0, l.reshape(y, append([]int64{}, ts...)...))
	return nil
}

// lowerUnreduceTo reinserts the reduced axes (keepdims=0) and broadcasts v
// to x's shape.
func lowerUnreduceTo(l *lowering) error {
	v, x := l.in(0), l.in(1)
	var axes []int64
	if a := l.in(2); a != "" {
		t := l.constant(a)
		if t == nil {
			return l.unsupported("axes computed at run time")
		}
		for i := 0; i < t.Size(); i++ {
			axes = append(axes, t.Int(i))
		}
	} else {
		axes = l.n.AttrInts("axes", nil)
	}
	if len(axes) == 0 && l.n.AttrInt("noop_with_empty_axes", 0) == 1 {
		l.finish(0, l.op("Identity", v))
		return nil
	}
	if l.n.AttrInt("keepdims", 1) == 0 {
		xs, ok := l.staticShape(x)
		if !ok {
			return l.unsupported("UnreduceTo with keepdims=0 needs x's static shape")
		}
		reduced := make([]bool, len(xs))
		for _, a := range axes {
			if a < 0 {
				a += int64(len(xs))
			}
			if a < 0 || a >= int64(len(xs)) {
				return l.unsupported("axis out of range")
			}
			reduced[a] = true
		}
		target := make([]int64, len(xs))
		for i := range xs {
			target[i] = xs[i]
			if len(axes) == 0 || reduced[i] {
				target[i] = 1
			}
		}
		v = l.reshape(v, target...)
	}
	l.finish(0, l.op("Expand", v, l.op("Shape", x)))
	return nil
}

// swapLast transposes the last two axes of a value of static rank r >= 2.
func (l *lowering) swapLast(v string, r int) string {
	perm := make([]int64, r)
	for i := range perm {
		perm[i] = int64(i)
	}
	perm[r-1], perm[r-2] = perm[r-2], perm[r-1]
	return l.opAttrs("Transpose", []string{v}, IntsAttr("perm", perm...))
}

// lowerMatMulGrad is dY·Bᵀ (which=0) or Aᵀ·dY (which=1), summed to the
// operand's shape; operands of rank 2 or more.
func lowerMatMulGrad(which int) loweringFunc {
	return func(l *lowering) error {
		dy, a, b := l.in(0), l.in(1), l.in(2)
		ra, rb := l.rank(a), l.rank(b)
		if ra < 2 || rb < 2 {
			return l.unsupported("MatMul gradient of a 1-D or unknown-rank operand")
		}
		var g, like string
		if which == 0 {
			g, like = l.op("MatMul", dy, l.swapLast(b, rb)), a
		} else {
			g, like = l.op("MatMul", l.swapLast(a, ra), dy), b
		}
		l.b.OpTo("SumToShape", []string{g, like}, []string{l.n.Outputs[0]})
		l.b.Nodes[len(l.b.Nodes)-1].Domain = InternalDomain
		return nil
	}
}

// lowerSoftmaxGrad: softmax y*(dy - sum(dy*y)); log-softmax dy -
// exp(y)*sum(dy), the sums along axis (coerce: the 2-D view of opset < 13,
// lowered only where axis is the last one).
func lowerSoftmaxGrad(logOf bool) loweringFunc {
	return func(l *lowering) error {
		dy, y := l.in(0), l.in(1)
		axis := l.n.AttrInt("axis", -1)
		if l.n.AttrInt("coerce", 0) != 0 {
			r := l.rank(y)
			if r < 0 {
				return l.unsupported("coerced softmax gradient of unknown rank")
			}
			if axis < 0 {
				axis += int64(r)
			}
			if axis != int64(r-1) {
				return l.unsupported("coerced softmax gradient over several axes")
			}
		}
		ax := reduceAxes{list: []int64{axis}}
		if logOf {
			s, err := l.reduce("ReduceSum", dy, ax, true)
			if err != nil {
				return err
			}
			l.finish(0, l.sub(dy, l.mul(l.op("Exp", y), s)))
			return nil
		}
		s, err := l.reduce("ReduceSum", l.mul(dy, y), ax, true)
		if err != nil {
			return err
		}
		l.finish(0, l.mul(y, l.sub(dy, s)))
		return nil
	}
}

func init() {
	domainLowerings[InternalDomain+":GatherGrad"] = lowerGatherGrad
	domainLowerings[InternalDomain+":GatherElementsGrad"] = lowerGatherElementsGrad
	domainLowerings[InternalDomain+":MaxPoolGrad"] = lowerMaxPoolGrad
	domainLowerings[InternalDomain+":SliceGrad"] = lowerSliceGrad
	domainLowerings[InternalDomain+":SplitLike"] = lowerSplitLike
	domainLowerings[InternalDomain+":TileGrad"] = lowerTileGrad
}

// zerosLike is a constant zero tensor of a static shape and dtype.
func (l *lowering) zerosOf(d DType, shape []int64) string {
	s := make([]int, len(shape))
	for i, v := range shape {
		s[i] = int(v)
	}
	return l.b.Const(Zeros(d, s...))
}

// scatterAdd is ScatterElements with reduction add (an attribute from
// opset 16; backends take it at any opset of the primitive set).
func (l *lowering) scatterAdd(data, idx, upd string, axis int64) string {
	return l.opAttrs("ScatterElements", []string{data, idx, upd}, IntAttr("axis", axis), StringAttr("reduction", "add"))
}

// nonNegative adds n to negative int64 indices.
func (l *lowering) nonNegative(idx string, n int64) string {
	i := l.cast(idx, Int64)
	nn := l.b.Const(&Tensor{DType: Int64, Shape: []int{}, Data: []int64{n}})
	return l.op("Where", l.op("Less", i, l.scalarOf(Int64, 0)), l.add(i, nn), i)
}

// lowerGatherGrad scatter-adds dy, viewed as [pre, k, post], into zeros of
// data's shape viewed as [pre, D, post], k the number of indices.
func lowerGatherGrad(l *lowering) error {
	dy, data, idx := l.in(0), l.in(1), l.in(2)
	ds, ok := l.staticShape(data)
	is, ok2 := l.staticShape(idx)
	if !ok || !ok2 {
		return l.unsupported("GatherGrad needs static shapes")
	}
	axis := l.n.AttrInt("axis", 0)
	if axis < 0 {
		axis += int64(len(ds))
	}
	if axis < 0 || axis >= int64(len(ds)) {
		return l.unsupported("axis out of range")
	}
	pre, post, k := int64(1), int64(1), int64(1)
	for _, d := range ds[:axis] {
		pre *= d
	}
	for _, d := range ds[axis+1:] {
		post *= d
	}
	for _, d := range is {
		k *= d
	}
	i := l.reshape(l.nonNegative(idx, ds[axis]), 1, k, 1)
	i = l.op("Expand", i, l.int64s(pre, k, post))
	d := l.dtypeOr(dy)
	if t := l.dtype(data); t != Undefined {
		d = t
	}
	z := l.zerosOf(d, []int64{pre, ds[axis], post})
	y := l.scatterAdd(z, i, l.reshape(dy, pre, k, post), 1)
	l.finish(0, l.reshape(y, ds...))
	return nil
}

// lowerGatherElementsGrad scatter-adds dy at the indices into zeros.
func lowerGatherElementsGrad(l *lowering) error {
	dy, data, idx := l.in(0), l.in(1), l.in(2)
	ds, ok := l.staticShape(data)
	if !ok {
		return l.unsupported("GatherElementsGrad needs static shapes")
	}
	axis := l.n.AttrInt("axis", 0)
	if axis < 0 {
		axis += int64(len(ds))
	}
	if axis < 0 || axis >= int64(len(ds)) {
		return l.unsupported("axis out of range")
	}
	z := l.zerosOf(l.dtypeOr(data), ds)
	l.finish(0, l.scatterAdd(z, l.nonNegative(idx, ds[axis]), dy, axis))
	return nil
}

// lowerMaxPoolGrad scatter-adds dy into the flat input at the indices of
// each window's maximum (MaxPool's second output, recomputed when the
// forward node did not name it).
func lowerMaxPoolGrad(l *lowering) error {
	dy, x, idx := l.in(0), l.in(1), l.in(2)
	xs, ok := l.staticShape(x)
	if !ok {
		return l.unsupported("MaxPoolGrad needs a static input shape")
	}
	if l.n.AttrInt("storage_order", 0) != 0 {
		return l.unsupported("MaxPoolGrad with storage_order=1")
	}
	if idx == "" {
		var attrs []*Attr
		for _, a := range windowOpAttrs(l.n) {
			attrs = append(attrs, a)
		}
		idx = l.b.Fresh("indices")
		l.b.OpTo("MaxPool", []string{x}, []string{l.b.Fresh("values"), idx}, attrs...)
	}
	total := int64(1)
	for _, d := range xs {
		total *= d
	}
	z := l.zerosOf(l.dtypeOr(x), []int64{total})
	y := l.scatterAdd(z, l.reshape(idx, -1), l.reshape(dy, -1), 0)
	l.finish(0, l.reshape(y, xs...))
	return nil
}

// lowerSliceGrad pads dy with zeros back to x's shape (steps of 1, constant
// starts and ends).
func lowerSliceGrad(l *lowering) error {
	dy, x := l.in(0), l.in(1)
	xs, ok := l.staticShape(x)
	if !ok {
		return l.unsupported("SliceGrad needs a static input shape")
	}
	read := func(i int, attr string) ([]int64, bool) {
		if l.in(i) != "" {
			return l.int64Values(l.in(i))
		}
		if a := l.n.Attr(attr); a != nil {
			return a.Ints, true
		}
		return nil, attr == "axes" || attr == "steps"
	}
	starts, ok1 := read(2, "starts")
	ends, ok2 := read(3, "ends")
	axes, ok3 := read(4, "axes")
	steps, ok4 := read(5, "steps")
	if !ok1 || !ok2 || !ok3 || !ok4 || len(starts) != len(ends) {
		return l.unsupported("SliceGrad needs constant starts, ends, axes and steps")
	}
	if axes == nil {
		for i := range starts {
			axes = append(axes, int64(i))
		}
	}
	r := int64(len(xs))
	pads := make([]int64, 2*r)
	for i, a := range axes {
		if a < 0 {
			a += r
		}
		if a < 0 || a >= r || (steps != nil && steps[i] != 1) {
			return l.unsupported("SliceGrad with a step other than 1")
		}
		d := xs[a]
		clamp := func(v int64) int64 {
			if v < 0 {
				v += d
			}
			return max(0, min(v, d))
		}
		s, e := clamp(starts[i]), clamp(ends[i])
		if e < s {
			e = s
		}
		pads[a], pads[r+a] = s, d-e
	}
	if l.opset() > 0 && l.opset() < 11 {
		l.finish(0, l.opAttrs("Pad", []string{dy}, IntsAttr("pads", pads...)))
		return nil
	}
	l.finish(0, l.op("Pad", dy, l.int64s(pads...)))
	return nil
}

// lowerSplitLike cuts dy along axis into pieces as long as each like.
func lowerSplitLike(l *lowering) error {
	dy := l.in(0)
	axis := l.n.AttrInt("axis", 0)
	r := l.rank(dy)
	if axis < 0 && r >= 0 {
		axis += int64(r)
	}
	if axis < 0 {
		return l.unsupported("SplitLike needs a rank")
	}
	start := int64(0)
	for i, like := range l.n.Inputs[1:] {
		s, ok := l.staticShape(like)
		if !ok || axis >= int64(len(s)) {
			return l.unsupported("SplitLike needs static shapes")
		}
		if i < len(l.n.Outputs) && l.n.Outputs[i] != "" {
			l.finish(i, l.sliceAxis(dy, axis, start, start+s[axis]))
		}
		start += s[axis]
	}
	return nil
}

// lowerTileGrad views dy as [r0, d0, r1, d1, ...] and sums over the
// repeats.
func lowerTileGrad(l *lowering) error {
	dy, x := l.in(0), l.in(1)
	ys, ok := l.staticShape(dy)
	xs, ok2 := l.staticShape(x)
	if !ok || !ok2 || len(xs) != len(ys) {
		return l.unsupported("TileGrad needs static shapes")
	}
	var view, axes []int64
	for i, d := range xs {
		if d == 0 || ys[i]%d != 0 {
			return l.unsupported("TileGrad of an empty or uneven tiling")
		}
		view = append(view, ys[i]/d, d)
		axes = append(axes, int64(2*i))
	}
	y, err := l.reduce("ReduceSum", l.reshape(dy, view...), reduceAxes{list: axes}, false)
	if err != nil {
		return err
	}
	l.finish(0, y)
	return nil
}

func init() {
	domainLowerings[InternalDomain+":ConvBackwardData"] = lowerConvBackwardData
	domainLowerings[InternalDomain+":ConvBackwardFilter"] = lowerConvBackwardFilter
}

// convGeometry is a Conv node's window with every size known: input
// spatial dims, kernel, strides, dilations and resolved pads.
type convGeometry struct {
	in, kernel, strides, dilations, padBegin, padEnd []int64
}

// convGeometryOf resolves the window of a Conv whose input has shape xs and
// weight ws (auto_pad included).
func (l *lowering) convGeometryOf(xs, ws []int64) (*convGeometry, error) {
	r := len(xs) - 2
	if r < 1 || len(ws) != len(xs) {
		return nil, l.unsupported("Conv gradient needs input and weight of the same rank >= 3")
	}
	ints := func(name string, n int, def int64) ([]int64, error) {
		v := l.n.AttrInts(name, nil)
		if v == nil {
			v = make([]int64, n)
			for i := range v {
				v[i] = def
			}
		}
		if len(v) != n {
			return nil, l.unsupported("%s has %d values, want %d", name, len(v), n)
		}
		return v, nil
	}
	g := &convGeometry{in: xs[2:], kernel: ws[2:]}
	var err error
	if g.strides, err = ints("strides", r, 1); err != nil {
		return nil, err
	}
	if g.dilations, err = ints("dilations", r, 1); err != nil {
		return nil, err
	}
	pads, err := ints("pads", 2*r, 0)
	if err != nil {
		return nil, err
	}
	g.padBegin, g.padEnd = append([]int64{}, pads[:r]...), append([]int64{}, pads[r:]...)
	switch mode := l.n.AttrString("auto_pad", "NOTSET"); mode {
	case "NOTSET", "":
	case "VALID":
		for i := range g.padBegin {
			g.padBegin[i], g.padEnd[i] = 0, 0
		}
	case "SAME_UPPER", "SAME_LOWER":
		for i := 0; i < r; i++ {
			s := g.strides[i]
			out := (g.in[i] + s - 1) / s
			total := max(0, (out-1)*s+(g.kernel[i]-1)*g.dilations[i]+1-g.in[i])
			small, big := total/2, total-total/2
			if mode == "SAME_UPPER" {
				g.padBegin[i], g.padEnd[i] = small, big
			} else {
				g.padBegin[i], g.padEnd[i] = big, small
			}
		}
	default:
		return nil, l.unsupported("auto_pad %q", mode)
	}
	return g, nil
}

// lowerConvBackwardData is the ConvTranspose of dy by W with the forward
// Conv's strides, dilations, pads and groups, and the output padding that
// gives x's spatial dims.
func lowerConvBackwardData(l *lowering) error {
	dy, w := l.in(0), l.in(1)
	xs, ok1 := l.int64Values(l.in(2))
	ws, ok2 := l.staticShape(w)
	ys, ok3 := l.staticShape(dy)
	if !ok1 || !ok2 || !ok3 || len(ys) != len(xs) {
		return l.unsupported("ConvBackwardData needs static shapes")
	}
	g, err := l.convGeometryOf(xs, ws)
	if err != nil {
		return err
	}
	outPad := make([]int64, len(g.in))
	for i := range g.in {
		full := g.strides[i]*(ys[i+2]-1) + (g.kernel[i]-1)*g.dilations[i] + 1 - g.padBegin[i] - g.padEnd[i]
		outPad[i] = g.in[i] - full
		if outPad[i] < 0 {
			return l.unsupported("input dim %d is shorter than the transposed convolution's output", i)
		}
	}
	pads := append(append([]int64{}, g.padBegin...), g.padEnd...)
	l.finish(0, l.opAttrs("ConvTranspose", []string{dy, w},
		IntsAttr("strides", g.strides...), IntsAttr("dilations", g.dilations...), IntsAttr("pads", pads...),
		IntsAttr("output_padding", outPad...), IntAttr("group", l.n.AttrInt("group", 1))))
	return nil
}

// lowerConvBackwardFilter (one group) convolves x, viewed with batch and
// channels swapped, by dy viewed the same way, with the forward strides as
// dilations and dilations as strides; the result, cut to the kernel's size,
// is dW with its first two axes swapped back.
func lowerConvBackwardFilter(l *lowering) error {
	dy, x := l.in(0), l.in(1)
	ws, ok1 := l.int64Values(l.in(2))
	xs, ok2 := l.staticShape(x)
	if !ok1 || !ok2 {
		return l.unsupported("ConvBackwardFilter needs static shapes")
	}
	if l.n.AttrInt("group", 1) != 1 {
		return l.unsupported("ConvBackwardFilter of a grouped convolution")
	}
	g, err := l.convGeometryOf(xs, ws)
	if err != nil {
		return err
	}
	r := len(xs)
	perm := make([]int64, r)
	for i := range perm {
		perm[i] = int64(i)
	}
	perm[0], perm[1] = 1, 0
	xt := l.opAttrs("Transpose", []string{x}, IntsAttr("perm", perm...))
	yt := l.opAttrs("Transpose", []string{dy}, IntsAttr("perm", perm...))
	pads := append(append([]int64{}, g.padBegin...), g.padEnd...)
	c := l.opAttrs("Conv", []string{xt, yt}, IntsAttr("strides", g.dilations...), IntsAttr("dilations", g.strides...),
		IntsAttr("pads", pads...))
	// Keep the first kernel-size positions of each spatial axis.
	axes := make([]int64, len(g.kernel))
	zeros := make([]int64, len(g.kernel))
	for i := range axes {
		axes[i] = int64(i + 2)
	}
	if l.opset() > 0 && l.opset() < 10 {
		c = l.opAttrs("Slice", []string{c}, IntsAttr("starts", zeros...), IntsAttr("ends", g.kernel...), IntsAttr("axes", axes...))
	} else {
		c = l.op("Slice", c, l.int64s(zeros...), l.int64s(g.kernel...), l.int64s(axes...))
	}
	l.finish(0, l.opAttrs("Transpose", []string{c}, IntsAttr("perm", perm...)))
	return nil
}

func init() {
	domainLowerings[InternalDomain+":ConvTransposeBackwardData"] = lowerConvTransposeBackwardData
	domainLowerings[InternalDomain+":ConvTransposeBackwardFilter"] = lowerConvTransposeBackwardFilter
}

// convTransposeGeometry reads a ConvTranspose node's strides, dilations and
// explicit pads for spatial rank r; output_shape and auto_pad other than
// NOTSET refuse.
func (l *lowering) convTransposeGeometry(r int) (strides, dilations, pads []int64, err error) {
	if l.n.Attr("output_shape") != nil {
		return nil, nil, nil, l.unsupported("ConvTranspose gradient with output_shape")
	}
	if m := l.n.AttrString("auto_pad", "NOTSET"); m != "NOTSET" && m != "" {
		return nil, nil, nil, l.unsupported("ConvTranspose gradient with auto_pad %s", m)
	}
	get := func(name string, n int, def int64) ([]int64, error) {
		v := l.n.AttrInts(name, nil)
		if v == nil {
			v = make([]int64, n)
			for i := range v {
				v[i] = def
			}
		}
		if len(v) != n {
			return nil, l.unsupported("%s has %d values, want %d", name, len(v), n)
		}
		return v, nil
	}
	if strides, err = get("strides", r, 1); err != nil {
		return
	}
	if dilations, err = get("dilations", r, 1); err != nil {
		return
	}
	pads, err = get("pads", 2*r, 0)
	return
}

// lowerConvTransposeBackwardData is the Conv of dy by W (ConvTranspose's
// [C_in, C_out/group, k...] weight is Conv's [M, C/group, k...]) with the
// same strides, dilations, pads and groups.
func lowerConvTransposeBackwardData(l *lowering) error {
	dy, w := l.in(0), l.in(1)
	xs, ok1 := l.int64Values(l.in(2))
	ys, ok2 := l.staticShape(dy)
	ws, ok3 := l.staticShape(w)
	if !ok1 || !ok2 || !ok3 || len(xs) != len(ys) || len(ws) != len(ys) || len(xs) < 3 {
		return l.unsupported("ConvTransposeBackwardData needs static shapes")
	}
	r := len(xs) - 2
	strides, dilations, pads, err := l.convTransposeGeometry(r)
	if err != nil {
		return err
	}
	for i := 0; i < r; i++ {
		dk := (ws[i+2]-1)*dilations[i] + 1
		if out := (ys[i+2]+pads[i]+pads[r+i]-dk)/strides[i] + 1; out != xs[i+2] {
			return l.unsupported("the Conv of dy gives %d on spatial axis %d, x has %d", out, i, xs[i+2])
		}
	}
	l.finish(0, l.opAttrs("Conv", []string{dy, w}, IntsAttr("strides", strides...), IntsAttr("dilations", dilations...),
		IntsAttr("pads", pads...), IntAttr("group", l.n.AttrInt("group", 1))))
	return nil
}

// lowerConvTransposeBackwardFilter (one group) convolves dy, batch and
// channels swapped, by x viewed the same way, with strides and dilations
// exchanged; cut to the kernel's size and with the first two axes swapped
// it is dW [C_in, C_out, k...].
func lowerConvTransposeBackwardFilter(l *lowering) error {
	dy, x := l.in(0), l.in(1)
	ws, ok1 := l.int64Values(l.in(2))
	xs, ok2 := l.staticShape(x)
	if !ok1 || !ok2 || len(ws) != len(xs) || len(xs) < 3 {
		return l.unsupported("ConvTransposeBackwardFilter needs static shapes")
	}
	if l.n.AttrInt("group", 1) != 1 {
		return l.unsupported("ConvTransposeBackwardFilter of a grouped convolution")
	}
	r := len(xs) - 2
	strides, dilations, pads, err := l.convTransposeGeometry(r)
	if err != nil {
		return err
	}
	perm := make([]int64, r+2)
	for i := range perm {
		perm[i] = int64(i)
	}
	perm[0], perm[1] = 1, 0
	yt := l.opAttrs("Transpose", []string{dy}, IntsAttr("perm", perm...))
	xt := l.opAttrs("Transpose", []string{x}, IntsAttr("perm", perm...))
	c := l.opAttrs("Conv", []string{yt, xt}, IntsAttr("strides", dilations...), IntsAttr("dilations", strides...),
		IntsAttr("pads", pads...))
	axes := make([]int64, r)
	zeros := make([]int64, r)
	for i := range axes {
		axes[i] = int64(i + 2)
	}
	kernel := ws[2:]
	if l.opset() > 0 && l.opset() < 10 {
		c = l.opAttrs("Slice", []string{c}, IntsAttr("starts", zeros...), IntsAttr("ends", kernel...), IntsAttr("axes", axes...))
	} else {
		c = l.op("Slice", c, l.int64s(zeros...), l.int64s(kernel...), l.int64s(axes...))
	}
	l.finish(0, l.opAttrs("Transpose", []string{c}, IntsAttr("perm", perm...)))
	return nil
}
