package graph

import (
	"fmt"
	"math"
)

// Inference rules of the elementwise ops and of the ops that compute on
// shapes (Shape, Gather, Concat, Unsqueeze, Reshape, ...): these also carry
// the element values of small integer tensors through the graph.

func init() {
	for _, op := range []string{
		"Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Sigmoid", "Erf", "Relu",
		"Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan",
		"Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Softplus", "Softsign", "Elu", "Selu",
		"Celu", "LeakyRelu", "HardSigmoid", "HardSwish", "ThresholdedRelu", "Mish", "Gelu",
		"Softmax", "LogSoftmax", "Hardmax", "Clip", "Not", "Shrink", "BitwiseNot",
		"LRN", "InstanceNormalization", "MeanVarianceNormalization", "LpNormalization",
		"GroupNormalization", "CumSum", "Trilu",
	} {
		inferRules[op] = inferSameAsInput
	}
	for _, op := range []string{"Add", "Sub", "Mul", "Div", "Mod", "Pow", "BitShift",
		"BitwiseAnd", "BitwiseOr", "BitwiseXor"} {
		inferRules[op] = inferBinary
	}
	inferRules["PRelu"] = inferPRelu
	inferRules["Neg"] = inferNegAbs
	inferRules["Abs"] = inferNegAbs
	for _, op := range []string{"Max", "Min", "Sum", "Mean"} {
		inferRules[op] = inferVariadic
	}
	for _, op := range []string{"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"} {
		inferRules[op] = inferCompare
	}
	for _, op := range []string{"IsNaN", "IsInf"} {
		inferRules[op] = inferBoolLike
	}
	inferRules["Identity"] = inferIdentity
	inferRules["Dropout"] = inferDropout
	inferRules["Cast"] = inferCast
	inferRules["CastLike"] = inferCastLike
	inferRules["Where"] = inferWhere
	inferRules["Constant"] = inferConstant
	inferRules["Shape"] = inferShapeOp
	inferRules["Size"] = inferSize
	inferRules["Reshape"] = inferReshape
	inferRules["Transpose"] = inferTranspose
	inferRules["Concat"] = inferConcat
	inferRules["Split"] = inferSplit
	inferRules["Slice"] = inferSlice
	inferRules["Gather"] = inferGather
	inferRules["GatherElements"] = inferGatherElements
	inferRules["GatherND"] = inferGatherND
	for _, op := range []string{"ScatterElements", "ScatterND", "Scatter"} {
		inferRules[op] = inferSameAsInput
	}
	inferRules["Squeeze"] = inferSqueeze
	inferRules["Unsqueeze"] = inferUnsqueeze
	inferRules["Flatten"] = inferFlatten
	inferRules["Expand"] = inferExpand
	inferRules["ConstantOfShape"] = inferConstantOfShape
	inferRules["Range"] = inferRange
	inferRules["Tile"] = inferTile
	inferRules["Pad"] = inferPad
	inferRules["OneHot"] = inferOneHot
	inferRules["NonZero"] = inferNonZero
	inferRules["Compress"] = inferCompress
	inferRules["EyeLike"] = inferEyeLike
	inferRules["DepthToSpace"] = inferDepthToSpace
	inferRules["SpaceToDepth"] = inferSpaceToDepth
	inferRules["RandomNormal"] = inferRandom
	inferRules["RandomUniform"] = inferRandom
	inferRules["RandomNormalLike"] = inferRandomLike
	inferRules["RandomUniformLike"] = inferRandomLike
	inferRules["Bernoulli"] = inferRandomLike
}

// inferSameAsInput: one output with the dtype and shape of input 0.
func inferSameAsInput(c *inferCall) error {
	t := c.typ(0)
	if t == nil {
		return nil
	}
	s, ok := c.shape(0)
	c.setShapeOrUnranked(0, t.DType, s, ok)
	return nil
}

// inferNegAbs is the elementwise rule, plus element values.
func inferNegAbs(c *inferCall) error {
	if err := inferSameAsInput(c); err != nil {
		return err
	}
	s := c.sym(0)
	if s == nil || !c.dtype(0).IsInt() {
		return nil
	}
	out := &symValue{scalar: s.scalar, dims: make([]Dim, len(s.dims))}
	for i, d := range s.dims {
		switch {
		case d.Known && c.n.OpType == "Neg":
			out.dims[i] = knownDim(-d.Value)
		case d.Known:
			out.dims[i] = knownDim(max(d.Value, -d.Value))
		case c.n.OpType == "Abs" && d.Param != "":
			out.dims[i] = d
		}
	}
	c.setSym(0, c.dtype(0), out)
	return nil
}

func inferBoolLike(c *inferCall) error {
	s, ok := c.shape(0)
	if c.typ(0) != nil {
		c.setShapeOrUnranked(0, Bool, s, ok)
	}
	return nil
}

func inferIdentity(c *inferCall) error {
	name := c.n.Input(0)
	if t := c.st.types[name]; t != nil && len(c.n.Outputs) > 0 && c.n.Outputs[0] != "" {
		c.st.types[c.n.Outputs[0]] = cloneType(t)
	}
	if t := c.tensor(0); t != nil {
		c.setConst(0, t)
	} else if s := c.sym(0); s != nil {
		c.setSym(0, c.dtype(0), s)
	}
	return nil
}

func inferDropout(c *inferCall) error {
	t := c.typ(0)
	if t == nil {
		return nil
	}
	s, ok := c.shape(0)
	c.setShapeOrUnranked(0, t.DType, s, ok)
	c.setShapeOrUnranked(1, Bool, s, ok)
	return nil
}

func inferCast(c *inferCall) error {
	a := c.n.Attr("to")
	if a == nil {
		return c.errorf("Cast has no 'to' attribute")
	}
	to := DType(a.I)
	if a.Type == AttrString {
		d, err := ParseDType(a.S)
		if err != nil {
			return nil
		}
		to = d
	}
	s, ok := c.shape(0)
	if c.typ(0) != nil || c.sym(0) != nil {
		c.setShapeOrUnranked(0, to, s, ok)
	} else {
		c.setUnranked(0, to)
	}
	if to.IsInt() || to == Bool || to.IsFloat() {
		if sv := c.sym(0); sv != nil {
			c.setSym(0, to, castSym(sv, to))
		} else if t := c.tensor(0); t != nil && to.IsInt() && t.DType.IsFloat() {
			// Small float constants cast to integers (shape arithmetic done
			// in float, as some exporters do).
			if t.Rank() <= 1 && t.Size() <= maxSymLen && t.Validate() == nil {
				sv := &symValue{scalar: t.Rank() == 0}
				for i := 0; i < t.Size(); i++ {
					f := t.Float(i)
					if math.IsNaN(f) || math.IsInf(f, 0) {
						return nil
					}
					sv.dims = append(sv.dims, knownDim(int64(f)))
				}
				c.setSym(0, to, sv)
			}
		}
	}
	return nil
}

// castSym converts integer element values to dtype to.
func castSym(s *symValue, to DType) *symValue {
	out := &symValue{scalar: s.scalar, dims: make([]Dim, len(s.dims))}
	for i, d := range s.dims {
		switch {
		case to == Bool && d.Known:
			out.dims[i] = knownDim(b2i(d.Value != 0))
		case to == Bool:
			out.dims[i] = Dim{}
		case d.Known && to.IsInt():
			out.dims[i] = knownDim(wrapInt(d.Value, to))
		default:
			out.dims[i] = d
		}
	}
	return out
}

// wrapInt truncates v to the width of an integer dtype, as a cast does.
func wrapInt(v int64, d DType) int64 {
	switch d {
	case Int8:
		return int64(int8(v))
	case Int16:
		return int64(int16(v))
	case Int32:
		return int64(int32(v))
	case Uint8:
		return int64(uint8(v))
	case Uint16:
		return int64(uint16(v))
	case Uint32:
		return int64(uint32(v))
	}
	return v
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func inferCastLike(c *inferCall) error {
	to := c.dtype(1)
	s, ok := c.shape(0)
	c.setShapeOrUnranked(0, to, s, ok)
	if sv := c.sym(0); sv != nil && (to.IsInt() || to == Bool || to.IsFloat()) {
		c.setSym(0, to, castSym(sv, to))
	}
	return nil
}

// legacyBroadcastShape handles the broadcast attribute of opsets before 7:
// the output has the first input's shape.
func legacyBroadcast(c *inferCall) bool {
	return c.opset() > 0 && c.opset() < 7 && c.n.AttrInt("broadcast", 0) != 0
}

// inferBinary: two inputs broadcast together; the output has input 0's dtype.
func inferBinary(c *inferCall) error {
	dt := c.dtype(0)
	if dt == Undefined && c.n.OpType != "Pow" {
		dt = c.dtype(1)
	}
	a, okA := c.shape(0)
	b, okB := c.shape(1)
	switch {
	case legacyBroadcast(c):
		c.setShapeOrUnranked(0, dt, a, okA)
	case okA && okB:
		s, err := broadcastShapes(a, b)
		if err != nil {
			return c.wrap(err)
		}
		c.setOut(0, dt, s)
	case dt != Undefined:
		c.setUnranked(0, dt)
	}
	if !(dt.IsInt() || dt == Undefined) {
		return nil
	}
	var f func(x, y Dim) Dim
	switch c.n.OpType {
	case "Add":
		f = symAdd
	case "Sub":
		f = symSub
	case "Mul":
		f = symMul
	case "Div":
		f = symDiv
	case "Mod":
		fmod := c.n.AttrInt("fmod", 0) != 0
		f = func(x, y Dim) Dim { return symMod(x, y, fmod) }
	default:
		return nil
	}
	if s := symBinary(c.sym(0), c.sym(1), f); s != nil {
		c.setSym(0, dt, s)
	}
	return nil
}

// inferPRelu: the slope broadcasts to X (before opset 7, along the channel
// axis), so the output has X's shape.
func inferPRelu(c *inferCall) error {
	x, ok := c.shape(0)
	if s, okS := c.shape(1); ok && okS && c.opset() >= 7 {
		out, err := broadcastShapes(x, s)
		if err != nil || len(out) != len(x) {
			return c.errorf("slope %s does not broadcast to %s", dimsString(s), dimsString(x))
		}
	}
	c.setShapeOrUnranked(0, c.dtype(0), x, ok)
	return nil
}

func inferVariadic(c *inferCall) error {
	var shapes [][]Dim
	dt := Undefined
	ranked := true
	for i := range c.n.Inputs {
		if !c.has(i) {
			continue
		}
		if dt == Undefined {
			dt = c.dtype(i)
		}
		s, ok := c.shape(i)
		if !ok {
			ranked = false
			continue
		}
		shapes = append(shapes, s)
	}
	if ranked && len(shapes) > 0 {
		s, err := broadcastShapes(shapes...)
		if err != nil {
			return c.wrap(err)
		}
		c.setOut(0, dt, s)
	} else if dt != Undefined {
		c.setUnranked(0, dt)
	}
	if !dt.IsInt() {
		return nil
	}
	var f func(x, y Dim) Dim
	switch c.n.OpType {
	case "Max":
		f = func(x, y Dim) Dim { return symKnown2(x, y, func(a, b int64) int64 { return max(a, b) }) }
	case "Min":
		f = func(x, y Dim) Dim { return symKnown2(x, y, func(a, b int64) int64 { return min(a, b) }) }
	case "Sum":
		f = symAdd
	default:
		return nil
	}
	acc := c.sym(0)
	for i := 1; i < len(c.n.Inputs) && acc != nil; i++ {
		acc = symBinary(acc, c.sym(i), f)
	}
	if acc != nil {
		c.setSym(0, dt, acc)
	}
	return nil
}

func inferCompare(c *inferCall) error {
	a, okA := c.shape(0)
	b, okB := c.shape(1)
	switch {
	case legacyBroadcast(c):
		c.setShapeOrUnranked(0, Bool, a, okA)
	case okA && okB:
		s, err := broadcastShapes(a, b)
		if err != nil {
			return c.wrap(err)
		}
		c.setOut(0, Bool, s)
	default:
		c.setUnranked(0, Bool)
	}
	var f func(x, y Dim) Dim
	switch c.n.OpType {
	case "Equal":
		f = symEqual
	case "Less":
		f = func(x, y Dim) Dim { return symLess(x, y, false) }
	case "Greater":
		f = func(x, y Dim) Dim { return symLess(y, x, false) }
	case "LessOrEqual":
		f = func(x, y Dim) Dim { return symLess(x, y, true) }
	case "GreaterOrEqual":
		f = func(x, y Dim) Dim { return symLess(y, x, true) }
	case "And":
		f = func(x, y Dim) Dim { return symKnown2(x, y, func(a, b int64) int64 { return b2i(a != 0 && b != 0) }) }
	case "Or":
		f = func(x, y Dim) Dim { return symKnown2(x, y, func(a, b int64) int64 { return b2i(a != 0 || b != 0) }) }
	case "Xor":
		f = func(x, y Dim) Dim {
			return symKnown2(x, y, func(a, b int64) int64 { return b2i((a != 0) != (b != 0)) })
		}
	}
	if s := symBinary(c.sym(0), c.sym(1), f); s != nil {
		c.setSym(0, Bool, s)
	}
	return nil
}

func inferWhere(c *inferCall) error {
	dt := c.dtype(1)
	if dt == Undefined {
		dt = c.dtype(2)
	}
	var shapes [][]Dim
	ranked := true
	for i := 0; i < 3; i++ {
		s, ok := c.shape(i)
		if !ok {
			ranked = false
			break
		}
		shapes = append(shapes, s)
	}
	if ranked {
		s, err := broadcastShapes(shapes...)
		if err != nil {
			return c.wrap(err)
		}
		c.setOut(0, dt, s)
	} else if dt != Undefined {
		c.setUnranked(0, dt)
	}
	cond, x, y := c.sym(0), c.sym(1), c.sym(2)
	if cond == nil || x == nil || y == nil {
		return nil
	}
	xy := symBinary(x, y, func(a, b Dim) Dim { return a })
	yx := symBinary(x, y, func(a, b Dim) Dim { return b })
	picked := symBinary(cond, xy, func(k, v Dim) Dim { return k })
	if xy == nil || yx == nil || picked == nil {
		return nil
	}
	n := len(picked.dims)
	at := func(s *symValue, i int) Dim {
		if len(s.dims) == 1 {
			return s.dims[0]
		}
		return s.dims[i]
	}
	out := &symValue{scalar: picked.scalar, dims: make([]Dim, n)}
	for i := range out.dims {
		k := at(cond, i)
		switch {
		case !k.Known:
			if a, b := at(xy, i), at(yx, i); sameDim(a, b) {
				out.dims[i] = a
			}
		case k.Value != 0:
			out.dims[i] = at(xy, i)
		default:
			out.dims[i] = at(yx, i)
		}
	}
	c.setSym(0, dt, out)
	return nil
}

// ConstantValue returns the tensor a Constant node produces, from whichever
// of its value attributes is set. ok is false for forms it cannot turn into
// a dense tensor.
func ConstantValue(n *Node) (t *Tensor, ok bool) {
	for _, a := range n.Attrs {
		switch a.Name {
		case "value", "sparse_value":
			if a.T != nil {
				return a.T, true
			}
		case "value_float":
			return FromFloat32([]float32{a.F}), true
		case "value_floats":
			return FromFloat32(append([]float32{}, a.Floats...), len(a.Floats)), true
		case "value_int":
			return FromInt64([]int64{a.I}), true
		case "value_ints":
			return FromInt64(append([]int64{}, a.Ints...), len(a.Ints)), true
		case "value_string":
			return &Tensor{DType: String, Data: []string{a.S}}, true
		case "value_strings":
			return &Tensor{DType: String, Shape: []int{len(a.Strings)}, Data: append([]string{}, a.Strings...)}, true
		}
	}
	return nil, false
}

func inferConstant(c *inferCall) error {
	if t, ok := ConstantValue(c.n); ok {
		if err := t.Validate(); err != nil {
			return c.errorf("value: %v", err)
		}
		c.setConst(0, t)
	}
	return nil
}

// shapeRange returns the [start, end) that Shape's attributes select.
func shapeRange(n *Node, rank int) (int, int) {
	clamp := func(v int64) int {
		if v < 0 {
			v += int64(rank)
		}
		return int(min(max(v, 0), int64(rank)))
	}
	start := clamp(n.AttrInt("start", 0))
	end := rank
	if n.HasAttr("end") {
		end = clamp(n.AttrInt("end", 0))
	}
	return start, max(start, end)
}

func inferShapeOp(c *inferCall) error {
	s, ok := c.shape(0)
	if !ok {
		c.setOut(0, Int64, []Dim{{}})
		return nil
	}
	start, end := shapeRange(c.n, len(s))
	dims := append([]Dim{}, s[start:end]...)
	c.setOut(0, Int64, []Dim{knownDim(int64(len(dims)))})
	c.setSym(0, Int64, &symValue{dims: dims})
	return nil
}

func inferSize(c *inferCall) error {
	c.setOut(0, Int64, []Dim{})
	if s, ok := c.shape(0); ok {
		c.setSym(0, Int64, &symValue{dims: []Dim{productDim(s)}, scalar: true})
	}
	return nil
}

func inferReshape(c *inferCall) error {
	dt := c.dtype(0)
	in, inOK := c.shape(0)
	var target []Dim
	switch {
	case c.opset() > 0 && c.opset() < 5:
		a := c.n.Attr("shape")
		if a == nil {
			c.setUnranked(0, dt)
			return nil
		}
		for _, v := range a.Ints {
			target = append(target, knownDim(v))
		}
	case c.sym(1) != nil:
		target = append([]Dim{}, c.sym(1).dims...)
	default:
		if s, ok := c.shape(1); ok && len(s) == 1 && s[0].Known {
			c.setOut(0, dt, make([]Dim, s[0].Value))
		} else {
			c.setUnranked(0, dt)
		}
		return nil
	}
	allowZero := c.n.AttrInt("allowzero", 0) != 0
	out := make([]Dim, len(target))
	inferAt := -1
	for i, d := range target {
		switch {
		case !d.Known:
			out[i] = d
		case d.Value == 0 && !allowZero:
			if inOK && i < len(in) {
				out[i] = in[i]
			} else if inOK {
				return c.errorf("target shape %v copies dim %d of an input of rank %d", dimsString(target), i, len(in))
			}
		case d.Value == -1:
			if inferAt >= 0 {
				return c.errorf("target shape %v has more than one -1", dimsString(target))
			}
			inferAt = i
		case d.Value < -1:
			return c.errorf("target shape %v has a negative dim", dimsString(target))
		default:
			out[i] = d
		}
	}
	if inOK {
		if inferAt >= 0 {
			rest := append(append([]Dim{}, out[:inferAt]...), out[inferAt+1:]...)
			d, err := quotientDim(in, rest)
			if err != nil {
				return c.errorf("cannot reshape %v to %v: %v", dimsString(in), dimsString(target), err)
			}
			out[inferAt] = d
		} else if err := sameElementCount(in, out); err != nil {
			return c.errorf("cannot reshape %v to %v: %v", dimsString(in), dimsString(target), err)
		}
	}
	c.setOut(0, dt, out)
	if s := c.sym(0); s != nil && len(out) <= 1 {
		c.setSym(0, dt, &symValue{dims: s.dims, scalar: len(out) == 0})
	}
	return nil
}

// cancelDims multiplies the known dims of a and b, and returns the
// non-numeric dims of each that the other does not share. unknown is true
// when a dim is neither a number nor a named parameter.
func cancelDims(a, b []Dim) (pa, pb int64, restA, restB []string, unknown bool) {
	pa, pb = 1, 1
	count := map[string]int{}
	for _, d := range a {
		switch {
		case d.Known:
			pa *= d.Value
		case d.Param != "":
			count[d.Param]++
		default:
			unknown = true
		}
	}
	for _, d := range b {
		switch {
		case d.Known:
			pb *= d.Value
		case d.Param != "":
			if count[d.Param] > 0 {
				count[d.Param]--
			} else {
				restB = append(restB, d.Param)
			}
		default:
			unknown = true
		}
	}
	for p, k := range count {
		for ; k > 0; k-- {
			restA = append(restA, p)
		}
	}
	return
}

// quotientDim is the dim that makes product(rest)*dim == product(total).
func quotientDim(total, rest []Dim) (Dim, error) {
	for _, d := range append(append([]Dim{}, total...), rest...) {
		if d.Known && d.Value > math.MaxInt32*int64(math.MaxInt32) {
			return Dim{}, nil
		}
	}
	pa, pb, restA, restB, unknown := cancelDims(total, rest)
	if unknown || len(restB) > 0 {
		return Dim{}, nil
	}
	switch {
	case pb == 0:
		if len(restA) == 0 && pa != 0 {
			return Dim{}, fmt.Errorf("the other dims multiply to 0")
		}
		return Dim{}, nil
	case len(restA) == 0:
		if pa%pb != 0 {
			return Dim{}, fmt.Errorf("%d elements do not divide into dims multiplying to %d", pa, pb)
		}
		return knownDim(pa / pb), nil
	case len(restA) == 1 && pa == pb:
		return Dim{Param: restA[0]}, nil
	}
	return Dim{}, nil
}

// sameElementCount fails when a and b certainly hold different counts.
func sameElementCount(a, b []Dim) error {
	pa, pb, restA, restB, unknown := cancelDims(a, b)
	if !unknown && len(restA) == 0 && len(restB) == 0 && pa != pb {
		return fmt.Errorf("%d elements, want %d", pa, pb)
	}
	return nil
}

func inferTranspose(c *inferCall) error {
	dt := c.dtype(0)
	in, ok := c.shape(0)
	if !ok {
		if p := c.n.AttrInts("perm", nil); p != nil {
			c.setOut(0, dt, make([]Dim, len(p)))
		} else {
			c.setUnranked(0, dt)
		}
		return nil
	}
	perm := c.n.AttrInts("perm", nil)
	if perm == nil {
		perm = make([]int64, len(in))
		for i := range perm {
			perm[i] = int64(len(in) - 1 - i)
		}
	}
	if len(perm) != len(in) {
		return c.errorf("perm %v does not fit an input of rank %d", perm, len(in))
	}
	ax, err := normAxes(perm, len(in))
	if err != nil {
		return c.wrap(err)
	}
	out := make([]Dim, len(in))
	for i, p := range ax {
		out[i] = in[p]
	}
	c.setOut(0, dt, out)
	return nil
}

func inferConcat(c *inferCall) error {
	dt := Undefined
	var shapes [][]Dim
	allRanked := true
	for i := range c.n.Inputs {
		if !c.has(i) {
			continue
		}
		if dt == Undefined {
			dt = c.dtype(i)
		}
		s, ok := c.shape(i)
		if !ok {
			allRanked = false
			continue
		}
		shapes = append(shapes, s)
	}
	if len(shapes) == 0 {
		c.setUnranked(0, dt)
		return nil
	}
	rank := len(shapes[0])
	for _, s := range shapes[1:] {
		if len(s) != rank {
			return c.errorf("inputs have ranks %d and %d", rank, len(s))
		}
	}
	axis, err := normAxis(c.n.AttrInt("axis", 1), rank)
	if err != nil {
		return c.wrap(err)
	}
	out := append([]Dim{}, shapes[0]...)
	sum := Dim{}
	if allRanked {
		sum = shapes[0][axis]
	}
	for _, s := range shapes[1:] {
		for i := range out {
			if i == axis {
				sum = sumDim(sum, s[i])
				continue
			}
			if out[i], err = unifyDims(out[i], s[i]); err != nil {
				return c.errorf("inputs have shapes that differ off the concat axis: %s", dimsString(shapes...))
			}
		}
	}
	out[axis] = sum
	c.setOut(0, dt, out)
	if rank == 1 && allRanked && concatSmallConsts(c) {
		return nil
	}
	// Element values: concatenation of vectors.
	if rank == 1 && allRanked {
		sv := &symValue{}
		for i := range c.n.Inputs {
			if !c.has(i) {
				continue
			}
			s := c.sym(i)
			if s == nil {
				return nil
			}
			sv.dims = append(sv.dims, s.dims...)
		}
		c.setSym(0, dt, sv)
	}
	return nil
}

// concatSmallConsts makes the output of a Concat of short constant
// vectors (Resize scales, say) a constant.
func concatSmallConsts(c *inferCall) bool {
	var parts []*Tensor
	total := 0
	for i := range c.n.Inputs {
		if !c.has(i) {
			continue
		}
		t := c.tensor(i)
		if t == nil || t.Rank() != 1 || t.Validate() != nil || t.DType == String {
			return false
		}
		if len(parts) > 0 && t.DType != parts[0].DType {
			return false
		}
		parts = append(parts, t)
		total += t.Size()
	}
	if len(parts) == 0 || total > maxSymLen {
		return false
	}
	out, err := NewTensor(parts[0].DType, []int{total})
	if err != nil {
		return false
	}
	k := 0
	for _, p := range parts {
		for j := 0; j < p.Size(); j++ {
			if out.DType.IsInt() {
				setIntElem(out, k, p.Int(j))
			} else {
				out.SetFloat(k, p.Float(j))
			}
			k++
		}
	}
	c.setConst(0, out)
	return true
}

func sumDim(a, b Dim) Dim {
	switch {
	case a.Known && b.Known:
		return knownDim(a.Value + b.Value)
	case a.Known && a.Value == 0:
		return b
	case b.Known && b.Value == 0:
		return a
	}
	return Dim{}
}

func inferSplit(c *inferCall) error {
	dt := c.dtype(0)
	in, ok := c.shape(0)
	nOut := len(c.n.Outputs)
	if !ok {
		for i := 0; i < nOut; i++ {
			c.setUnranked(i, dt)
		}
		return nil
	}
	axis, err := normAxis(c.n.AttrInt("axis", 0), len(in))
	if err != nil {
		return c.wrap(err)
	}
	var sizes []int64
	known := true
	switch {
	case c.opset() >= 13 || (c.has(1) && !c.n.HasAttr("split")):
		if c.has(1) {
			sizes, known = c.ints(1)
		}
	default:
		sizes = c.n.AttrInts("split", nil)
	}
	dim := in[axis]
	outDims := make([]Dim, nOut)
	switch {
	case !known:
	case sizes != nil:
		if len(sizes) != nOut {
			return c.errorf("split %v has %d parts for %d outputs", sizes, len(sizes), nOut)
		}
		total := int64(0)
		for i, s := range sizes {
			if s < 0 {
				return c.errorf("split %v has a negative part", sizes)
			}
			outDims[i] = knownDim(s)
			total += s
		}
		if dim.Known && dim.Value != total {
			return c.errorf("split %v adds up to %d, but the axis has %d", sizes, total, dim.Value)
		}
	case dim.Known && nOut > 0:
		parts := int64(nOut)
		if c.opset() >= 18 && c.n.HasAttr("num_outputs") {
			parts = c.n.AttrInt("num_outputs", parts)
			chunk := (dim.Value + parts - 1) / max(parts, 1)
			left := dim.Value
			for i := range outDims {
				outDims[i] = knownDim(min(chunk, max(left, 0)))
				left -= chunk
			}
		} else {
			if dim.Value%parts != 0 {
				return c.errorf("axis of size %d does not split into %d equal parts", dim.Value, parts)
			}
			for i := range outDims {
				outDims[i] = knownDim(dim.Value / parts)
			}
		}
	}
	s := c.sym(0)
	offset := int64(0)
	for i := 0; i < nOut; i++ {
		sh := append([]Dim{}, in...)
		sh[axis] = outDims[i]
		c.setOut(i, dt, sh)
		if s != nil && len(in) == 1 && outDims[i].Known && offset+outDims[i].Value <= int64(len(s.dims)) {
			c.setSym(i, dt, &symValue{dims: append([]Dim{}, s.dims[offset:offset+outDims[i].Value]...)})
			offset += outDims[i].Value
		} else {
			s = nil
		}
	}
	return nil
}

// sliceParams collects Slice's starts, ends, axes and steps. ok is false
// when they are not all known.
func sliceParams(c *inferCall, rank int) (starts, ends []int64, axes []int, steps []int64, ok bool, err error) {
	var rawAxes []int64
	if c.opset() > 0 && c.opset() < 10 {
		starts = c.n.AttrInts("starts", nil)
		ends = c.n.AttrInts("ends", nil)
		rawAxes = c.n.AttrInts("axes", nil)
	} else {
		var okS, okE bool
		starts, okS = c.ints(1)
		ends, okE = c.ints(2)
		if !okS || !okE {
			return nil, nil, nil, nil, false, nil
		}
		if c.has(3) {
			if rawAxes, ok = c.ints(3); !ok {
				return nil, nil, nil, nil, false, nil
			}
		}
		if c.has(4) {
			if steps, ok = c.ints(4); !ok {
				return nil, nil, nil, nil, false, nil
			}
		}
	}
	if len(starts) != len(ends) {
		return nil, nil, nil, nil, false, fmt.Errorf("%d starts but %d ends", len(starts), len(ends))
	}
	if rawAxes == nil {
		rawAxes = make([]int64, len(starts))
		for i := range rawAxes {
			rawAxes[i] = int64(i)
		}
	}
	if steps == nil {
		steps = make([]int64, len(starts))
		for i := range steps {
			steps[i] = 1
		}
	}
	if len(rawAxes) != len(starts) || len(steps) != len(starts) {
		return nil, nil, nil, nil, false, fmt.Errorf("starts, ends, axes and steps have different lengths")
	}
	axes, err = normAxes(rawAxes, rank)
	if err != nil {
		return nil, nil, nil, nil, false, err
	}
	for _, s := range steps {
		if s == 0 {
			return nil, nil, nil, nil, false, fmt.Errorf("a step is 0")
		}
	}
	return starts, ends, axes, steps, true, nil
}

// sliceRange returns the first index, step and count that Slice selects
// along a dim of size dim.
func sliceRange(start, end, step, dim int64) (first, count int64) {
	if start < 0 {
		start += dim
	}
	if end < 0 {
		end += dim
	}
	if step > 0 {
		start = min(max(start, 0), dim)
		end = min(max(end, 0), dim)
		if end > start {
			count = (end - start + step - 1) / step
		}
	} else {
		start = min(max(start, 0), dim-1)
		end = min(max(end, -1), dim-1)
		if start > end {
			count = (start - end - step - 1) / -step
		}
	}
	return start, count
}

func inferSlice(c *inferCall) error {
	dt := c.dtype(0)
	in, ok := c.shape(0)
	if !ok {
		c.setUnranked(0, dt)
		return nil
	}
	starts, ends, axes, steps, ok, err := sliceParams(c, len(in))
	if err != nil {
		return c.wrap(err)
	}
	out := append([]Dim{}, in...)
	if !ok {
		axesKnown := c.opset() >= 10 && c.has(3)
		if axesKnown {
			if raw, ok := c.ints(3); ok {
				if ax, err := normAxes(raw, len(in)); err == nil {
					for _, a := range ax {
						out[a] = Dim{}
					}
					c.setOut(0, dt, out)
					return nil
				}
			}
		}
		c.setOut(0, dt, make([]Dim, len(in)))
		return nil
	}
	for i, a := range axes {
		d := in[a]
		switch {
		case d.Known:
			_, n := sliceRange(starts[i], ends[i], steps[i], d.Value)
			out[a] = knownDim(n)
		case starts[i] == 0 && steps[i] == 1 && ends[i] >= math.MaxInt32:
			out[a] = d
		default:
			out[a] = Dim{}
		}
	}
	c.setOut(0, dt, out)
	if s := c.sym(0); s != nil && len(in) == 1 && len(axes) == 1 {
		first, n := sliceRange(starts[0], ends[0], steps[0], int64(len(s.dims)))
		sv := &symValue{}
		for k := int64(0); k < n; k++ {
			sv.dims = append(sv.dims, s.dims[first+k*steps[0]])
		}
		c.setSym(0, dt, sv)
	}
	return nil
}

func inferGather(c *inferCall) error {
	dt := c.dtype(0)
	data, okD := c.shape(0)
	idx, okI := c.shape(1)
	if !okD || !okI {
		c.setUnranked(0, dt)
		return nil
	}
	if len(data) == 0 {
		return c.errorf("data is a scalar")
	}
	axis, err := normAxis(c.n.AttrInt("axis", 0), len(data))
	if err != nil {
		return c.wrap(err)
	}
	out := append(append(append([]Dim{}, data[:axis]...), idx...), data[axis+1:]...)
	c.setOut(0, dt, out)
	s := c.sym(0)
	if s == nil || len(data) != 1 {
		return nil
	}
	ix, ok := c.ints(1)
	if !ok || len(idx) > 1 {
		return nil
	}
	sv := &symValue{scalar: len(idx) == 0}
	n := int64(len(s.dims))
	for _, i := range ix {
		if i < -n || i >= n {
			return c.errorf("index %d is out of range for %d elements", i, n)
		}
		if i < 0 {
			i += n
		}
		sv.dims = append(sv.dims, s.dims[i])
	}
	c.setSym(0, dt, sv)
	return nil
}

func inferGatherElements(c *inferCall) error {
	dt := c.dtype(0)
	idx, ok := c.shape(1)
	data, okD := c.shape(0)
	if ok && okD && len(idx) != len(data) {
		return c.errorf("indices have rank %d, data rank %d", len(idx), len(data))
	}
	c.setShapeOrUnranked(0, dt, idx, ok)
	return nil
}

func inferGatherND(c *inferCall) error {
	dt := c.dtype(0)
	data, okD := c.shape(0)
	idx, okI := c.shape(1)
	if !okD || !okI || len(idx) == 0 || !idx[len(idx)-1].Known {
		c.setUnranked(0, dt)
		return nil
	}
	b := int(c.n.AttrInt("batch_dims", 0))
	k := int(idx[len(idx)-1].Value)
	if b+k > len(data) {
		return c.errorf("indices of depth %d (batch_dims %d) do not fit data of rank %d", k, b, len(data))
	}
	out := append(append([]Dim{}, idx[:len(idx)-1]...), data[b+k:]...)
	c.setOut(0, dt, out)
	return nil
}

func inferSqueeze(c *inferCall) error {
	dt := c.dtype(0)
	in, ok := c.shape(0)
	axes, present, axesOK := c.axesFrom(1, 13)
	if !ok || !axesOK {
		c.setUnranked(0, dt)
		return nil
	}
	var out []Dim
	if !present {
		for _, d := range in {
			if !d.Known {
				c.setUnranked(0, dt)
				return nil
			}
			if d.Value != 1 {
				out = append(out, d)
			}
		}
	} else {
		ax, err := normAxes(axes, len(in))
		if err != nil {
			return c.wrap(err)
		}
		drop := map[int]bool{}
		for _, a := range ax {
			if in[a].Known && in[a].Value != 1 {
				return c.errorf("cannot squeeze axis %d of size %d", a, in[a].Value)
			}
			drop[a] = true
		}
		for i, d := range in {
			if !drop[i] {
				out = append(out, d)
			}
		}
	}
	c.setOut(0, dt, out)
	if s := c.sym(0); s != nil && len(out) == 0 && len(s.dims) == 1 {
		c.setSym(0, dt, &symValue{dims: s.dims, scalar: true})
	} else if s != nil && len(out) == 1 {
		c.setSym(0, dt, s)
	}
	return nil
}

func inferUnsqueeze(c *inferCall) error {
	dt := c.dtype(0)
	in, ok := c.shape(0)
	axes, present, axesOK := c.axesFrom(1, 13)
	if !ok || !axesOK || !present {
		c.setUnranked(0, dt)
		return nil
	}
	rank := len(in) + len(axes)
	ax, err := normAxes(axes, rank)
	if err != nil {
		return c.wrap(err)
	}
	out := make([]Dim, rank)
	isNew := map[int]bool{}
	for _, a := range ax {
		isNew[a] = true
	}
	j := 0
	for i := range out {
		if isNew[i] {
			out[i] = knownDim(1)
		} else {
			out[i] = in[j]
			j++
		}
	}
	c.setOut(0, dt, out)
	if s := c.sym(0); s != nil && rank == 1 {
		c.setSym(0, dt, &symValue{dims: s.dims})
	}
	return nil
}

func inferFlatten(c *inferCall) error {
	dt := c.dtype(0)
	in, ok := c.shape(0)
	if !ok {
		c.setOut(0, dt, []Dim{{}, {}})
		return nil
	}
	axis := c.n.AttrInt("axis", 1)
	if axis < 0 {
		axis += int64(len(in))
	}
	if axis < 0 || axis > int64(len(in)) {
		return c.errorf("axis %d is out of range for rank %d", c.n.AttrInt("axis", 1), len(in))
	}
	c.setOut(0, dt, []Dim{productDim(in[:axis]), productDim(in[axis:])})
	return nil
}

func inferExpand(c *inferCall) error {
	dt := c.dtype(0)
	in, ok := c.shape(0)
	var target []Dim
	if s := c.sym(1); s != nil {
		target = s.dims
	} else if ts, tok := c.shape(1); tok && len(ts) == 1 && ts[0].Known {
		target = make([]Dim, ts[0].Value)
	} else {
		c.setUnranked(0, dt)
		return nil
	}
	if !ok {
		c.setUnranked(0, dt)
		return nil
	}
	out, err := broadcastShapes(in, target)
	if err != nil {
		return c.wrap(err)
	}
	c.setOut(0, dt, out)
	return nil
}

func inferConstantOfShape(c *inferCall) error {
	dt := Float32
	var fill *Tensor
	if a := c.n.Attr("value"); a != nil && a.T != nil {
		dt = a.T.DType
		fill = a.T
	}
	s := c.sym(0)
	if s == nil {
		if ts, ok := c.shape(0); ok && len(ts) == 1 && ts[0].Known {
			c.setOut(0, dt, make([]Dim, ts[0].Value))
		} else {
			c.setUnranked(0, dt)
		}
		return nil
	}
	for _, d := range s.dims {
		if d.Known && d.Value < 0 {
			return c.errorf("shape %s has a negative dim", dimsString(s.dims))
		}
	}
	c.setOut(0, dt, append([]Dim{}, s.dims...))
	if (dt.IsInt() || dt == Bool) && len(s.dims) == 1 && s.dims[0].Known && s.dims[0].Value <= maxSymLen {
		v := int64(0)
		if fill != nil && fill.Validate() == nil && fill.Size() > 0 {
			v = fill.Int(0)
		}
		sv := &symValue{dims: make([]Dim, s.dims[0].Value)}
		for i := range sv.dims {
			sv.dims[i] = knownDim(v)
		}
		c.setSym(0, dt, sv)
	}
	return nil
}

func inferRange(c *inferCall) error {
	dt := c.dtype(0)
	var v [3]float64
	for i := 0; i < 3; i++ {
		if s := c.sym(i); s != nil && len(s.dims) == 1 && s.dims[0].Known {
			v[i] = float64(s.dims[0].Value)
		} else if f, ok := c.floats(i); ok && len(f) == 1 {
			v[i] = f[0]
		} else {
			c.setOut(0, dt, []Dim{{}})
			return nil
		}
	}
	if v[2] == 0 {
		return c.errorf("delta is 0")
	}
	n := int64(max(math.Ceil((v[1]-v[0])/v[2]), 0))
	c.setOut(0, dt, []Dim{knownDim(n)})
	if dt.IsInt() && n <= maxSymLen {
		sv := &symValue{dims: make([]Dim, n)}
		for i := range sv.dims {
			sv.dims[i] = knownDim(int64(v[0]) + int64(i)*int64(v[2]))
		}
		c.setSym(0, dt, sv)
	}
	return nil
}

func inferTile(c *inferCall) error {
	dt := c.dtype(0)
	in, ok := c.shape(0)
	if !ok {
		c.setUnranked(0, dt)
		return nil
	}
	out := make([]Dim, len(in))
	s := c.sym(1)
	if s == nil {
		c.setOut(0, dt, out)
		return nil
	}
	if len(s.dims) != len(in) {
		return c.errorf("repeats has %d elements for an input of rank %d", len(s.dims), len(in))
	}
	for i, d := range in {
		out[i] = productDim([]Dim{d, s.dims[i]})
	}
	c.setOut(0, dt, out)
	return nil
}

func inferPad(c *inferCall) error {
	dt := c.dtype(0)
	in, ok := c.shape(0)
	if !ok {
		c.setUnranked(0, dt)
		return nil
	}
	var pads []int64
	known := true
	if c.opset() > 0 && c.opset() < 11 {
		pads = c.n.AttrInts("pads", c.n.AttrInts("paddings", nil))
	} else {
		pads, known = c.ints(1)
	}
	axes := make([]int, len(in))
	for i := range axes {
		axes[i] = i
	}
	if c.opset() >= 18 && c.has(3) {
		raw, ok := c.ints(3)
		if !ok {
			c.setOut(0, dt, make([]Dim, len(in)))
			return nil
		}
		ax, err := normAxes(raw, len(in))
		if err != nil {
			return c.wrap(err)
		}
		axes = ax
	}
	if !known || pads == nil {
		c.setOut(0, dt, make([]Dim, len(in)))
		return nil
	}
	if len(pads) != 2*len(axes) {
		return c.errorf("pads %v does not have 2 values per padded axis (%d axes)", pads, len(axes))
	}
	out := append([]Dim{}, in...)
	for i, a := range axes {
		d := in[a]
		p := pads[i] + pads[i+len(axes)]
		switch {
		case d.Known:
			if d.Value+p < 0 {
				return c.errorf("pads %v make axis %d negative", pads, a)
			}
			out[a] = knownDim(d.Value + p)
		case p == 0:
			out[a] = d
		default:
			out[a] = Dim{}
		}
	}
	c.setOut(0, dt, out)
	return nil
}

func inferOneHot(c *inferCall) error {
	dt := c.dtype(2)
	in, ok := c.shape(0)
	if !ok {
		c.setUnranked(0, dt)
		return nil
	}
	depth := Dim{}
	if f, ok := c.floats(1); ok && len(f) == 1 {
		depth = knownDim(int64(f[0]))
	}
	axis, err := normAxis(c.n.AttrInt("axis", -1), len(in)+1)
	if err != nil {
		return c.wrap(err)
	}
	out := append(append(append([]Dim{}, in[:axis]...), depth), in[axis:]...)
	c.setOut(0, dt, out)
	return nil
}

func inferNonZero(c *inferCall) error {
	r := Dim{}
	if n := c.rank(0); n >= 0 {
		r = knownDim(int64(n))
	}
	c.setOut(0, Int64, []Dim{r, {}})
	return nil
}

func inferCompress(c *inferCall) error {
	dt := c.dtype(0)
	in, ok := c.shape(0)
	if !c.n.HasAttr("axis") {
		c.setOut(0, dt, []Dim{{}})
		return nil
	}
	if !ok {
		c.setUnranked(0, dt)
		return nil
	}
	axis, err := normAxis(c.n.AttrInt("axis", 0), len(in))
	if err != nil {
		return c.wrap(err)
	}
	in[axis] = Dim{}
	c.setOut(0, dt, in)
	return nil
}

func inferEyeLike(c *inferCall) error {
	dt := c.dtype(0)
	if c.n.HasAttr("dtype") {
		dt = DType(c.n.AttrInt("dtype", 1))
	}
	s, ok := c.shape(0)
	c.setShapeOrUnranked(0, dt, s, ok)
	return nil
}

func inferDepthToSpace(c *inferCall) error {
	return inferBlockRearrange(c, false)
}

func inferSpaceToDepth(c *inferCall) error {
	return inferBlockRearrange(c, true)
}

func inferBlockRearrange(c *inferCall, toDepth bool) error {
	dt := c.dtype(0)
	in, ok := c.shape(0)
	if !ok || len(in) != 4 {
		c.setShapeOrUnranked(0, dt, make([]Dim, 4), true)
		return nil
	}
	b := c.n.AttrInt("blocksize", 0)
	if b <= 0 {
		return c.errorf("blocksize %d", b)
	}
	mul := func(d Dim, k int64) Dim { return productDim([]Dim{d, knownDim(k)}) }
	div := func(d Dim, k int64) (Dim, error) {
		if !d.Known {
			return Dim{}, nil
		}
		if d.Value%k != 0 {
			return Dim{}, fmt.Errorf("%w: dim %d is not a multiple of %d", ErrShapeMismatch, d.Value, k)
		}
		return knownDim(d.Value / k), nil
	}
	out := []Dim{in[0], {}, {}, {}}
	var err error
	if toDepth {
		out[1] = mul(in[1], b*b)
		if out[2], err = div(in[2], b); err == nil {
			out[3], err = div(in[3], b)
		}
	} else {
		out[1], err = div(in[1], b*b)
		out[2], out[3] = mul(in[2], b), mul(in[3], b)
	}
	if err != nil {
		return c.wrap(err)
	}
	c.setOut(0, dt, out)
	return nil
}

func inferRandom(c *inferCall) error {
	dt := DType(c.n.AttrInt("dtype", int64(Float32)))
	shape := c.n.AttrInts("shape", nil)
	out := make([]Dim, len(shape))
	for i, d := range shape {
		out[i] = knownDim(d)
	}
	c.setOut(0, dt, out)
	return nil
}

func inferRandomLike(c *inferCall) error {
	dt := c.dtype(0)
	if c.n.HasAttr("dtype") {
		dt = DType(c.n.AttrInt("dtype", int64(dt)))
	}
	s, ok := c.shape(0)
	c.setShapeOrUnranked(0, dt, s, ok)
	return nil
}

// symBinary combines two element-value vectors with numpy broadcasting (a
// scalar or a length-1 vector against any length).
func symBinary(a, b *symValue, f func(x, y Dim) Dim) *symValue {
	if a == nil || b == nil || f == nil {
		return nil
	}
	n := max(len(a.dims), len(b.dims))
	if (len(a.dims) != n && len(a.dims) != 1) || (len(b.dims) != n && len(b.dims) != 1) {
		return nil
	}
	out := &symValue{scalar: a.scalar && b.scalar, dims: make([]Dim, n)}
	for i := range out.dims {
		x, y := a.dims[min(i, len(a.dims)-1)], b.dims[min(i, len(b.dims)-1)]
		out.dims[i] = f(x, y)
	}
	return out
}

// symKnown2 applies f when both dims are numbers.
func symKnown2(x, y Dim, f func(a, b int64) int64) Dim {
	if x.Known && y.Known {
		return knownDim(f(x.Value, y.Value))
	}
	return Dim{}
}

func symAdd(x, y Dim) Dim { return sumDim(x, y) }

func symSub(x, y Dim) Dim {
	switch {
	case x.Known && y.Known:
		return knownDim(x.Value - y.Value)
	case y.Known && y.Value == 0:
		return x
	case sameDim(x, y):
		return knownDim(0)
	}
	return Dim{}
}

func symMul(x, y Dim) Dim {
	switch {
	case x.Known && y.Known:
		return knownDim(x.Value * y.Value)
	case x.Known && x.Value == 1:
		return y
	case y.Known && y.Value == 1:
		return x
	case (x.Known && x.Value == 0) || (y.Known && y.Value == 0):
		return knownDim(0)
	}
	return Dim{}
}

func symDiv(x, y Dim) Dim {
	switch {
	case x.Known && y.Known && y.Value != 0:
		return knownDim(x.Value / y.Value)
	case y.Known && y.Value == 1:
		return x
	}
	return Dim{}
}

func symMod(x, y Dim, fmod bool) Dim {
	if !x.Known || !y.Known || y.Value == 0 {
		return Dim{}
	}
	r := x.Value % y.Value
	if !fmod && r != 0 && (r < 0) != (y.Value < 0) {
		r += y.Value
	}
	return knownDim(r)
}

// symEqual compares element values; a named dim (a size, never negative)
// differs from every negative number.
func symEqual(x, y Dim) Dim {
	switch {
	case x.Known && y.Known:
		return knownDim(b2i(x.Value == y.Value))
	case sameDim(x, y):
		return knownDim(1)
	case x.Param != "" && y.Known && y.Value < 0, y.Param != "" && x.Known && x.Value < 0:
		return knownDim(0)
	}
	return Dim{}
}

// symLess is x < y (x <= y when orEqual); a named dim is never negative.
func symLess(x, y Dim, orEqual bool) Dim {
	switch {
	case x.Known && y.Known:
		if orEqual {
			return knownDim(b2i(x.Value <= y.Value))
		}
		return knownDim(b2i(x.Value < y.Value))
	case x.Param != "" && y.Known && y.Value < 0:
		return knownDim(0)
	case y.Param != "" && x.Known && x.Value < 0:
		return knownDim(1)
	case sameDim(x, y):
		return knownDim(b2i(orEqual))
	}
	return Dim{}
}
