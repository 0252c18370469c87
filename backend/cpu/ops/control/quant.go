package control

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("QuantizeLinear", quantizeLinearKernel)
	kern.RegisterHalf("DequantizeLinear", dequantizeLinearKernel)
	kern.RegisterHalf("DynamicQuantizeLinear", dynamicQuantizeLinearKernel)
	kern.RegisterHalf("QLinearMatMul", qlinearMatMulKernel)
	kern.RegisterHalf("QLinearConv", qlinearConvKernel)
}

// quantRange is the saturation range of a quantized dtype.
func quantRange(d graph.DType) (lo, hi float64, ok bool) {
	switch d {
	case graph.Uint8:
		return 0, math.MaxUint8, true
	case graph.Int8:
		return math.MinInt8, math.MaxInt8, true
	case graph.Uint16:
		return 0, math.MaxUint16, true
	case graph.Int16:
		return math.MinInt16, math.MaxInt16, true
	case graph.Int32:
		return math.MinInt32, math.MaxInt32, true
	}
	return 0, 0, false
}

// asFloat32 returns t's values as float32 (the data itself when t is float32).
func asFloat32(n *graph.Node, what string, t *graph.Tensor) ([]float32, error) {
	if t.DType == graph.String || t.DType == graph.Bool {
		return nil, n.Errorf("%s has dtype %v, want a numeric type", what, t.DType)
	}
	c, err := kern.Cast(t, graph.Float32)
	if err != nil {
		return nil, n.Errorf("%s: %v", what, err)
	}
	return c.Float32s(), nil
}

// asInt32 returns t's integer values widened to int32 (zero points and
// quantized data).
func asInt32(n *graph.Node, what string, t *graph.Tensor) ([]int32, error) {
	out := make([]int32, t.Size())
	switch s := t.Data.(type) {
	case []uint8:
		for i, v := range s {
			out[i] = int32(v)
		}
	case []int8:
		for i, v := range s {
			out[i] = int32(v)
		}
	case []int16:
		for i, v := range s {
			out[i] = int32(v)
		}
	case []int32:
		copy(out, s)
	default:
		if t.DType != graph.Uint16 {
			return nil, n.Errorf("%s has dtype %v, want uint8, int8, uint16, int16 or int32", what, t.DType)
		}
		for i, v := range s.([]uint16) {
			out[i] = int32(v)
		}
	}
	return out, nil
}

// quantLayout says which scale (and zero point) applies to each element of
// a tensor viewed as [outer, dim, inner]: per tensor, per axis, or in blocks
// of block along the axis.
type quantLayout struct {
	outer, dim, inner int
	mode              int // 0 per tensor, 1 per axis, 2 blocked
	block, scaleDim   int
}

// index returns the scale index of element (o, d, i).
func (l *quantLayout) index(o, d, i int) int {
	switch l.mode {
	case 1:
		return d
	case 2:
		return (o*l.scaleDim+d/l.block)*l.inner + i
	}
	return 0
}

// newQuantLayout works out the quantization granularity from the shapes of
// x and its scale, the axis attribute (default 1) and block_size.
func newQuantLayout(n *graph.Node, x, scale, zp *graph.Tensor) (*quantLayout, error) {
	if zp != nil && !graph.SameShape(zp.Shape, scale.Shape) && zp.Size() != scale.Size() {
		return nil, n.Errorf("zero point has shape %v, the scale %v: they must match", zp.Shape, scale.Shape)
	}
	l := &quantLayout{outer: 1, dim: x.Size(), inner: 1}
	block := int(n.AttrInt("block_size", 0))
	if scale.Size() == 1 && block == 0 {
		return l, nil
	}
	if x.Rank() == 0 {
		return nil, n.Errorf("scale has shape %v, but x is a scalar", scale.Shape)
	}
	axis, err := kern.NormAxis(n, int(n.AttrInt("axis", 1)), x.Rank())
	if err != nil {
		return nil, err
	}
	l.outer, l.dim, l.inner = axisSplit(x.Shape, axis)
	if block <= 0 {
		if scale.Rank() != 1 || scale.Shape[0] != l.dim {
			return nil, n.Errorf("scale has shape %v: per-axis quantization along axis %d of x %v needs shape [%d]", scale.Shape, axis, x.Shape, l.dim)
		}
		l.mode = 1
		return l, nil
	}
	want := append([]int{}, x.Shape...)
	want[axis] = (l.dim + block - 1) / block
	if !graph.SameShape(scale.Shape, want) {
		return nil, n.Errorf("scale has shape %v: blocked quantization of x %v with block_size %d along axis %d needs %v", scale.Shape, x.Shape, block, axis, want)
	}
	l.mode, l.block, l.scaleDim = 2, block, want[axis]
	return l, nil
}

// quantizeInto writes saturate(round(x/scale) + zp) into dst.
func quantizeInto[T uint8 | int8 | uint16 | int16 | int32](dst []T, x, scale []float32, zp []int32, l *quantLayout, lo, hi float64) {
	k := 0
	for o := 0; o < l.outer; o++ {
		for d := 0; d < l.dim; d++ {
			for i := 0; i < l.inner; i++ {
				s := l.index(o, d, i)
				z := 0.0
				if zp != nil {
					z = float64(zp[s])
				}
				v := math.RoundToEven(float64(x[k]/scale[s])) + z
				if v < lo {
					v = lo
				} else if v > hi {
					v = hi
				}
				dst[k] = T(v)
				k++
			}
		}
	}
}

// quantizeLinearKernel implements QuantizeLinear:
// y = saturate(round_half_even(x / y_scale) + y_zero_point).
func quantizeLinearKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x, scale, zpT := in[0], in[1], kern.Opt(in, 2)
	outType := graph.Uint8
	if od := graph.DType(n.AttrInt("output_dtype", 0)); od != graph.Undefined {
		outType = od
	}
	if zpT != nil {
		if od := graph.DType(n.AttrInt("output_dtype", 0)); od != graph.Undefined && od != zpT.DType {
			return nil, n.Errorf("output_dtype is %v but y_zero_point has dtype %v", od, zpT.DType)
		}
		outType = zpT.DType
	}
	lo, hi, ok := quantRange(outType)
	if !ok || outType == graph.Int32 {
		return nil, n.Errorf("cannot quantize to %v (supported: uint8, int8, uint16, int16)", outType)
	}
	l, err := newQuantLayout(n, x, scale, zpT)
	if err != nil {
		return nil, err
	}
	xs, err := asFloat32(n, "x", x)
	if err != nil {
		return nil, err
	}
	ss, err := asFloat32(n, "y_scale", scale)
	if err != nil {
		return nil, err
	}
	var zp []int32
	if zpT != nil {
		if zp, err = asInt32(n, "y_zero_point", zpT); err != nil {
			return nil, err
		}
	}
	y, err := kern.New(n, outType, x.Shape)
	if err != nil {
		return nil, err
	}
	switch dst := y.Data.(type) {
	case []uint8:
		quantizeInto(dst, xs, ss, zp, l, lo, hi)
	case []int8:
		quantizeInto(dst, xs, ss, zp, l, lo, hi)
	case []uint16:
		quantizeInto(dst, xs, ss, zp, l, lo, hi)
	case []int16:
		quantizeInto(dst, xs, ss, zp, l, lo, hi)
	}
	return []*graph.Tensor{y}, nil
}

// dequantizeLinearKernel implements DequantizeLinear:
// y = (x - x_zero_point) * x_scale, in the dtype of x_scale (or output_dtype).
func dequantizeLinearKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x, scale, zpT := in[0], in[1], kern.Opt(in, 2)
	if zpT != nil && zpT.DType != x.DType {
		return nil, n.Errorf("x has dtype %v but x_zero_point %v: they must match", x.DType, zpT.DType)
	}
	outType := scale.DType
	if od := graph.DType(n.AttrInt("output_dtype", 0)); od != graph.Undefined {
		outType = od
	}
	if !outType.IsFloat() {
		return nil, n.Errorf("output dtype %v is not a float type", outType)
	}
	l, err := newQuantLayout(n, x, scale, zpT)
	if err != nil {
		return nil, err
	}
	xs, err := asInt32(n, "x", x)
	if err != nil {
		return nil, err
	}
	ss, err := asFloat32(n, "x_scale", scale)
	if err != nil {
		return nil, err
	}
	var zp []int32
	if zpT != nil {
		if zp, err = asInt32(n, "x_zero_point", zpT); err != nil {
			return nil, err
		}
	}
	y, err := kern.New(n, graph.Float32, x.Shape)
	if err != nil {
		return nil, err
	}
	dst := y.Float32s()
	k := 0
	for o := 0; o < l.outer; o++ {
		for d := 0; d < l.dim; d++ {
			for i := 0; i < l.inner; i++ {
				s := l.index(o, d, i)
				v := xs[k]
				if zp != nil {
					v -= zp[s]
				}
				dst[k] = float32(v) * ss[s]
				k++
			}
		}
	}
	if outType != graph.Float32 {
		if y, err = kern.Cast(y, outType); err != nil {
			return nil, n.Errorf("%v", err)
		}
	}
	return []*graph.Tensor{y}, nil
}

// dynamicQuantizeLinearKernel implements DynamicQuantizeLinear: uint8
// quantization with a scale and zero point chosen so that [min(x,0),
// max(x,0)] maps onto [0, 255].
func dynamicQuantizeLinearKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	xs, err := asFloat32(n, "x", in[0])
	if err != nil {
		return nil, err
	}
	var lo, hi float32
	for _, v := range xs {
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	scale := (hi - lo) / 255
	if scale == 0 {
		scale = 1 // all zeros: any scale represents them exactly
	}
	zpf := math.RoundToEven(math.Min(255, math.Max(0, float64(-lo/scale))))
	zp := int32(zpf)
	y, err := kern.New(n, graph.Uint8, in[0].Shape)
	if err != nil {
		return nil, err
	}
	l := &quantLayout{outer: 1, dim: len(xs), inner: 1}
	quantizeInto(y.Data.([]uint8), xs, []float32{scale}, []int32{zp}, l, 0, 255)
	return []*graph.Tensor{
		y,
		{DType: graph.Float32, Shape: []int{}, Data: []float32{scale}},
		{DType: graph.Uint8, Shape: []int{}, Data: []uint8{uint8(zp)}},
	}, nil
}

// requantize writes saturate(round_half_even(acc*mult) + zp) into dst[k].
func requantize(dst *graph.Tensor, k int, acc int32, mult float64, zp int32, lo, hi float64) {
	v := math.RoundToEven(float64(acc)*mult) + float64(zp)
	if v < lo {
		v = lo
	} else if v > hi {
		v = hi
	}
	switch s := dst.Data.(type) {
	case []uint8:
		s[k] = uint8(v)
	case []int8:
		s[k] = int8(v)
	case []uint16:
		s[k] = uint16(v)
	case []int16:
		s[k] = int16(v)
	case []int32:
		s[k] = int32(v)
	}
}

// igemm computes C = A×B for row-major int32 matrices (A m×k, B k×n),
// wrapping on overflow as 32-bit accumulation does.
func igemm(m, nn, k int, a, b, c []int32) {
	for i := 0; i < m; i++ {
		row := c[i*nn : (i+1)*nn]
		for j := range row {
			row[j] = 0
		}
		for p := 0; p < k; p++ {
			av := a[i*k+p]
			if av == 0 {
				continue
			}
			brow := b[p*nn : (p+1)*nn]
			for j, bv := range brow {
				row[j] += av * bv
			}
		}
	}
}
