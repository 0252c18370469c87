package kern

import (
	"math"
	"sync"

	"github.com/onnxtrain/onnxtrain/graph"
)

// Half-precision support for kernels written for float32.
//
// The executor converts the half inputs of a kernel registered without Half
// to float32 and its float32 outputs back, on the heap and element by
// element. AdaptHalfKernels replaces that, for every kernel registered so
// far, by HalfAdapter: the same conversion, but with the storage served by
// New (so the executor's memory plan places the float32 temporaries, which
// die with the step, and the half outputs, which are what the graph keeps)
// and with typed loops. The saved activations of a mixed-precision graph
// thus take half the bytes, and no tensor of a step comes from the heap
// (small per-call bookkeeping aside). Kernels registered with
// RegisterNativeHalf read and write half values directly, without the
// float32 copies.

// AdaptHalfKernels wraps every registered kernel that does not handle half
// types itself in HalfAdapter and marks it Half. Kernel packages call it
// once, after registering (backend/cpu/ops does).
func AdaptHalfKernels() {
	for k, specs := range registry {
		for i, s := range specs {
			if s.Fn == nil {
				continue
			}
			if s.Half {
				// A kernel that handles half types itself (Cast) may still
				// have a faster native path; it decides case by case.
				if native := nativeHalf[k]; native != nil {
					s.Fn = firstNative(native, s.Fn)
					specs[i] = s
				}
				continue
			}
			fn := HalfAdapter(s.Fn)
			if native := nativeHalf[k]; native != nil {
				fn = withNativeHalf(native, fn)
			}
			s.Fn = fn
			s.Half = true
			specs[i] = s
		}
		registry[k] = specs
	}
}

// HalfKernel computes a node on half inputs without converting them whole
// to float32 (it reads and writes half values, using float32 arithmetic).
// ok is false when it does not cover the case at hand (a layout, a
// broadcast, a dtype mix): the converting adapter then runs instead.
type HalfKernel func(ctx *Context, n *graph.Node, in []*graph.Tensor) (out []*graph.Tensor, ok bool, err error)

// nativeHalf holds the half kernels by registry key.
var nativeHalf = map[string]HalfKernel{}

// RegisterNativeHalf adds a half kernel for op in domain ("" for ai.onnx),
// used by AdaptHalfKernels: for a float32 kernel, fn runs first when a node
// has half inputs; for a kernel registered with Half (Cast), fn runs first
// on every call.
func RegisterNativeHalf(domain, op string, fn HalfKernel) { nativeHalf[key(domain, op)] = fn }

func withNativeHalf(native HalfKernel, adapted Kernel) Kernel {
	return func(ctx *Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		for _, t := range in {
			if t != nil && (t.DType == graph.Float16 || t.DType == graph.BFloat16) {
				out, ok, err := native(ctx, n, in)
				if ok || err != nil {
					return out, err
				}
				break
			}
		}
		return adapted(ctx, n, in)
	}
}

// firstNative runs native, and fn when native does not cover the case.
func firstNative(native HalfKernel, fn Kernel) Kernel {
	return func(ctx *Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		out, ok, err := native(ctx, n, in)
		if ok || err != nil {
			return out, err
		}
		return fn(ctx, n, in)
	}
}

// HalfToFloat32At converts one half value of dtype d.
func HalfToFloat32At(d graph.DType, h uint16) float32 {
	if d == graph.BFloat16 {
		return math.Float32frombits(uint32(h) << 16)
	}
	return float16ToFloat32(h)
}

// Float32ToHalfAt rounds one float32 value to the half dtype d.
func Float32ToHalfAt(d graph.DType, f float32) uint16 {
	if d == graph.BFloat16 {
		return graph.Float32ToBFloat16(f)
	}
	return float32ToFloat16(f)
}

// HalfAdapter runs fn, a float32 kernel, on half inputs: inputs of dtype
// Float16 or BFloat16 are converted to float32, and float32 outputs are
// converted to the (last) half type among the inputs, as the executor does
// for kernels without Half support. Without half inputs fn runs as is.
func HalfAdapter(fn Kernel) Kernel {
	return func(ctx *Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		half := graph.Undefined
		for _, t := range in {
			if t != nil && (t.DType == graph.Float16 || t.DType == graph.BFloat16) {
				half = t.DType
			}
		}
		if half == graph.Undefined {
			return fn(ctx, n, in)
		}
		var buf [8]*graph.Tensor
		conv := append(buf[:0], in...)
		for i, t := range conv {
			if t != nil && (t.DType == graph.Float16 || t.DType == graph.BFloat16) {
				f, err := HalfToFloat32(n, t)
				if err != nil {
					return nil, err
				}
				conv[i] = f
			}
		}
		out, err := fn(ctx, n, conv)
		if err != nil {
			return nil, err
		}
		for i, t := range out {
			if t != nil && t.DType == graph.Float32 {
				if out[i], err = Float32ToHalf(n, t, half); err != nil {
					return nil, err
				}
			}
		}
		return out, nil
	}
}

// HalfToFloat32 converts a Float16 or BFloat16 tensor to a new float32
// tensor allocated with NewUninit (for n).
func HalfToFloat32(n *graph.Node, t *graph.Tensor) (*graph.Tensor, error) {
	src, ok := t.Data.([]uint16)
	if !ok || (t.DType != graph.Float16 && t.DType != graph.BFloat16) {
		return nil, n.Errorf("half to float32: tensor is %v, not float16 or bfloat16", t.DType)
	}
	out, err := NewUninit(n, graph.Float32, t.Shape)
	if err != nil {
		return nil, err
	}
	dst := out.Data.([]float32)
	if len(src) < len(dst) {
		return nil, n.Errorf("half to float32: %d elements for shape %v", len(src), t.Shape)
	}
	bf := t.DType == graph.BFloat16
	parallelChunks(len(dst), func(lo, hi int) {
		if bf {
			BFloat16sToFloat32s(dst[lo:hi], src[lo:hi])
		} else {
			Float16sToFloat32s(dst[lo:hi], src[lo:hi])
		}
	})
	return out, nil
}

// Float32ToHalf converts a float32 tensor to a new tensor of the half type
// d allocated with NewUninit (for n), rounding to nearest even.
func Float32ToHalf(n *graph.Node, t *graph.Tensor, d graph.DType) (*graph.Tensor, error) {
	src, ok := t.Data.([]float32)
	if !ok || (d != graph.Float16 && d != graph.BFloat16) {
		return nil, n.Errorf("float32 to half: cannot convert %v to %v", t.DType, d)
	}
	out, err := NewUninit(n, d, t.Shape)
	if err != nil {
		return nil, err
	}
	dst := out.Data.([]uint16)
	if len(src) < len(dst) {
		return nil, n.Errorf("float32 to half: %d elements for shape %v", len(src), t.Shape)
	}
	parallelChunks(len(dst), func(lo, hi int) {
		if d == graph.BFloat16 {
			Float32sToBFloat16s(dst[lo:hi], src[lo:hi])
		} else {
			Float32sToFloat16s(dst[lo:hi], src[lo:hi])
		}
	})
	return out, nil
}

// parallelChunks runs fn over [0, n) in one contiguous chunk per processor
// when n is large enough to repay the goroutines (the conversions are
// memory-bound loops of about a nanosecond per element).
func parallelChunks(n int, fn func(lo, hi int)) {
	const grain = 1 << 15
	p := min(Workers(), n/grain)
	if p <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	per := (n + p - 1) / p
	for lo := per; lo < n; lo += per {
		wg.Add(1)
		go func(lo int) {
			defer wg.Done()
			fn(lo, min(lo+per, n))
		}(lo)
	}
	fn(0, min(per, n))
	wg.Wait()
}

// BFloat16sToFloat32s widens len(dst) bfloat16 values.
func BFloat16sToFloat32s(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, h := range src {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
}

// Float32sToBFloat16s rounds len(dst) float32 values to bfloat16 (nearest
// even; NaN stays NaN), as graph.Float32ToBFloat16.
func Float32sToBFloat16s(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i, f := range src {
		b := math.Float32bits(f)
		if b&0x7fffffff > 0x7f800000 {
			dst[i] = uint16(b>>16) | 0x40
			continue
		}
		dst[i] = uint16((b + 0x7fff + (b>>16)&1) >> 16)
	}
}

// Float16sToFloat32s widens len(dst) IEEE half values.
func Float16sToFloat32s(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, h := range src {
		dst[i] = float16ToFloat32(h)
	}
}

// Float32sToFloat16s rounds len(dst) float32 values to IEEE half (nearest
// even; overflow to infinity), as graph.Float32ToFloat16.
func Float32sToFloat16s(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i, f := range src {
		dst[i] = float32ToFloat16(f)
	}
}

// float32ToFloat16 is graph.Float32ToFloat16 without calls for finite
// values: normal results round the mantissa to nearest even (a carry runs
// into the exponent, up to infinity); results below float16's normal range
// round |f| to a multiple of 2^-24 by adding 0.5, whose float32 ulp is
// 2^-24, so float32's own rounding is the nearest-even one.
func float32ToFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	e := int32(b>>23)&0xff - 127 + 15
	switch {
	case e >= 0x1f:
		return graph.Float32ToFloat16(f) // overflow, inf, NaN
	case e < -10:
		return sign // below half the smallest subnormal (float32 denormals too, which are slow to add)
	case e <= 0:
		abs := math.Float32frombits(b & 0x7fffffff)
		return sign | uint16(math.Float32bits(abs+0.5)-0x3f000000)
	}
	r := uint32(e)<<10 | (b&0x7fffff)>>13
	rem := b & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++
	}
	return sign | uint16(r)
}

// float16ToFloat32 is graph.Float16ToFloat32 by table lookup.
func float16ToFloat32(h uint16) float32 { return float16Table[h] }

// float16Table holds every float16 value widened (256 KiB): one load per
// element, where the arithmetic costs a switch on subnormals, infinities
// and NaN.
var float16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = graph.Float16ToFloat32(uint16(h))
	}
	return &t
}()
