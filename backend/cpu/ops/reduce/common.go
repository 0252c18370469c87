package reduce

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// integer is every Go integer type a tensor can hold.
type integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// float is the Go float types a tensor holds natively (half types arrive as
// float32 unless a kernel converts them itself).
type float interface{ ~float32 | ~float64 }

// number is every numeric element type.
type number interface{ integer | float }

// isNaN reports whether v is a NaN; always false for integer types.
func isNaN[T number](v T) bool { return v != v }

// blocks describes a tensor viewed as (outer, r, inner): r elements along the
// reduced (or normalised) axes, inner elements apart, repeated outer times.
type blocks struct{ outer, r, inner int }

// product multiplies dims.
func product(dims []int) int {
	p := 1
	for _, d := range dims {
		p *= d
	}
	return p
}

// axisBlocks views shape as (outer, r, inner) around a single axis.
func axisBlocks(shape []int, axis int) blocks {
	return blocks{outer: product(shape[:axis]), r: shape[axis], inner: product(shape[axis+1:])}
}

// reduceLayout plans a reduction of shape over the axes flagged in reduced.
// When the reduced axes form one contiguous run (after dropping size-1 dims
// and merging neighbours), the data can be read in place as blocks; otherwise
// perm is the transposition that moves every reduced axis last, after which
// the data is (outer, r, 1).
func reduceLayout(shape []int, reduced []bool) (perm []int, b blocks) {
	type group struct {
		size    int
		reduced bool
	}
	var groups []group
	for d, s := range shape {
		if s == 1 {
			continue
		}
		if k := len(groups); k > 0 && groups[k-1].reduced == reduced[d] {
			groups[k-1].size *= s
			continue
		}
		groups = append(groups, group{s, reduced[d]})
	}
	runs := 0
	for _, g := range groups {
		if g.reduced {
			runs++
		}
	}
	if runs <= 1 {
		b = blocks{outer: 1, r: 1, inner: 1}
		seen := false
		for _, g := range groups {
			switch {
			case g.reduced:
				b.r = g.size
				seen = true
			case seen:
				b.inner *= g.size
			default:
				b.outer *= g.size
			}
		}
		return nil, b
	}
	b = blocks{outer: 1, r: 1, inner: 1}
	for d, s := range shape {
		if !reduced[d] {
			perm = append(perm, d)
			b.outer *= s
		}
	}
	for d, s := range shape {
		if reduced[d] {
			perm = append(perm, d)
			b.r *= s
		}
	}
	return perm, b
}

// permuteSlice returns src (of the given shape) transposed so that output
// dim d is input dim perm[d].
func permuteSlice[T any](src []T, shape, perm []int) []T {
	dst := make([]T, len(src))
	permuteSliceInto(dst, src, shape, perm)
	return dst
}

// permuteSliceInto is permuteSlice writing every element of dst (which
// must be as long as src).
func permuteSliceInto[T any](dst, src []T, shape, perm []int) {
	if len(src) == 0 {
		return
	}
	rank := len(shape)
	var outBuf, strideBuf, counterBuf, srcBuf [8]int
	outShape, stride, counter, srcStrides := outBuf[:0], strideBuf[:0], counterBuf[:0], srcBuf[:0]
	if rank > len(outBuf) {
		outShape, stride, counter, srcStrides = make([]int, 0, rank), make([]int, 0, rank), make([]int, 0, rank), make([]int, 0, rank)
	}
	outShape, stride, counter, srcStrides = outShape[:rank], stride[:rank], counter[:rank], srcStrides[:rank]
	acc := 1
	for d := rank - 1; d >= 0; d-- {
		srcStrides[d] = acc
		acc *= shape[d]
	}
	for d, p := range perm {
		outShape[d] = shape[p]
		stride[d] = srcStrides[p]
	}
	last := rank - 1
	n, st := outShape[last], stride[last]
	off := 0
	for o := 0; o < len(dst); o += n {
		row := dst[o : o+n]
		s := off
		for i := range row {
			row[i] = src[s]
			s += st
		}
		for d := last - 1; d >= 0; d-- {
			counter[d]++
			off += stride[d]
			if counter[d] < outShape[d] {
				break
			}
			off -= stride[d] * counter[d]
			counter[d] = 0
		}
	}
}

// permuteTensor transposes t by perm (see permuteSlice).
func permuteTensor(n *graph.Node, t *graph.Tensor, perm []int) (*graph.Tensor, error) {
	shape := make([]int, len(perm))
	for d, p := range perm {
		shape[d] = t.Shape[p]
	}
	out := &graph.Tensor{DType: t.DType, Shape: shape}
	switch s := t.Data.(type) {
	case []float32:
		out.Data = permuteSlice(s, t.Shape, perm)
	case []float64:
		out.Data = permuteSlice(s, t.Shape, perm)
	case []int8:
		out.Data = permuteSlice(s, t.Shape, perm)
	case []int16:
		out.Data = permuteSlice(s, t.Shape, perm)
	case []int32:
		out.Data = permuteSlice(s, t.Shape, perm)
	case []int64:
		out.Data = permuteSlice(s, t.Shape, perm)
	case []uint8:
		out.Data = permuteSlice(s, t.Shape, perm)
	case []uint16:
		out.Data = permuteSlice(s, t.Shape, perm)
	case []uint32:
		out.Data = permuteSlice(s, t.Shape, perm)
	case []uint64:
		out.Data = permuteSlice(s, t.Shape, perm)
	case []bool:
		out.Data = permuteSlice(s, t.Shape, perm)
	default:
		return nil, n.Errorf("dtype %v is not supported", t.DType)
	}
	return out, nil
}

// isHalf reports whether d is stored as raw 16-bit floats.
func isHalf(d graph.DType) bool { return d == graph.Float16 || d == graph.BFloat16 }

// toFloat32 converts a half-precision tensor to float32 (other tensors,
// including nil, are returned as they are). Kernels registered with
// RegisterHalf use it on their inputs.
func toFloat32(n *graph.Node, t *graph.Tensor) (*graph.Tensor, error) {
	if t == nil || !isHalf(t.DType) {
		return t, nil
	}
	c, err := kern.Cast(t, graph.Float32)
	if err != nil {
		return nil, n.Errorf("%v", err)
	}
	return c, nil
}

// castTo converts t to dtype d (t itself when it has d already).
func castTo(n *graph.Node, t *graph.Tensor, d graph.DType) (*graph.Tensor, error) {
	c, err := kern.Cast(t, d)
	if err != nil {
		return nil, n.Errorf("%v", err)
	}
	return c, nil
}

// float64s returns t's elements as float64 (for small parameter tensors:
// per-channel scales, biases, class weights).
func float64s(t *graph.Tensor) []float64 {
	n := t.Size()
	out := make([]float64, n)
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

// checkFloat fails unless t holds float32 or float64 data.
func checkFloat(n *graph.Node, t *graph.Tensor, what string) error {
	if t.DType != graph.Float32 && t.DType != graph.Float64 {
		return n.Errorf("%s has dtype %v, want a float type", what, t.DType)
	}
	return nil
}

// scalarInt reads a one-element integer tensor (an axis or k input).
func scalarInt(n *graph.Node, t *graph.Tensor, what string) (int64, error) {
	if t.Size() != 1 {
		return 0, n.Errorf("%s must hold one element, has shape %v", what, t.Shape)
	}
	if !t.DType.IsInt() {
		return 0, n.Errorf("%s has dtype %v, want an integer type", what, t.DType)
	}
	return t.Int(0), nil
}

// exp32 is e^x to float32 precision (within 1e-11 relative error over the
// float32 normal range), about three times as fast as math.Exp: the float32
// paths of the softmax family spend most of their time in exp. It rounds
// x·32/ln2 to an integer k and evaluates e^r, r = x - k·ln2/32 in
// [-ln2/64, ln2/64], by a degree-4 Taylor polynomial, then scales by
// 2^(k/32) = 2^(k>>5)·exp32Table[k&31].
func exp32(x float64) float64 {
	if !(x > -104) {
		if x != x {
			return x
		}
		return 0
	}
	if x > 89 {
		return math.Inf(1)
	}
	const (
		roundMagic = 0x1.8p52 // adding and subtracting rounds to an integer
		invLn2x32  = 32 / math.Ln2
		ln2Over32  = math.Ln2 / 32
	)
	k := (x*invLn2x32 + roundMagic) - roundMagic
	r := x - k*ln2Over32
	ki := int64(k)
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24))))
	return p * exp32Table[ki&31] * math.Float64frombits(uint64((ki>>5)+1023)<<52)
}

// exp32Table holds 2^(j/32) for j = 0..31.
var exp32Table = func() (t [32]float64) {
	for j := range t {
		t[j] = math.Exp2(float64(j) / 32)
	}
	return t
}()

// expFunc returns the exp that kernels on T data use: exp32 for float32
// (its precision is all a float32 result keeps), math.Exp otherwise.
func expFunc[T number]() func(float64) float64 {
	var z T
	if _, ok := any(z).(float32); ok {
		return exp32
	}
	return math.Exp
}
