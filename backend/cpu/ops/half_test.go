package ops

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// halfOf rounds float32 values to a half tensor of dtype d.
func halfOf(d graph.DType, shape []int, v []float32) *graph.Tensor {
	h := make([]uint16, len(v))
	for i, f := range v {
		h[i] = kern.Float32ToHalfAt(d, f)
	}
	return &graph.Tensor{DType: d, Shape: shape, Data: h}
}

// widen converts a half tensor to float32 exactly.
func widen(t *graph.Tensor) *graph.Tensor {
	src := t.Data.([]uint16)
	f := make([]float32, len(src))
	for i, h := range src {
		f[i] = kern.HalfToFloat32At(t.DType, h)
	}
	return graph.FromFloat32(f, t.Shape...)
}

// bitsOf is a float32 tensor's values as bits (NaN compares equal).
func bitsOf(t *graph.Tensor) []uint32 {
	b := make([]uint32, t.Size())
	for i, v := range t.Float32s() {
		b[i] = math.Float32bits(v)
	}
	return b
}

// run calls the registered kernel of op.
func run(t *testing.T, domain, op string, n *graph.Node, in ...*graph.Tensor) []*graph.Tensor {
	t.Helper()
	spec, ok := kern.Lookup(domain, op, 17)
	require.True(t, ok, op)
	require.True(t, spec.Half, "%s handles half types after AdaptHalfKernels", op)
	out, err := spec.Fn(&kern.Context{Opset: 17}, n, in)
	require.NoError(t, err, op)
	return out
}

// On half inputs every kernel gives the float32 kernel's result on the
// widened inputs, rounded to the half type: the native half kernels (Cast,
// Relu, the comparisons, Add/Sub/Mul/Div, MaxPool, MaxPoolGrad, ReluGrad)
// and the converting adapter (Sqrt, MatMul, a broadcast Add) alike.
func TestHalfKernelsMatchFloat32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	for _, d := range []graph.DType{graph.BFloat16, graph.Float16} {
		t.Run(d.String(), func(t *testing.T) {
			x := randn(2 * 3 * 6 * 6)
			x[0], x[1], x[2] = 0, float32(math.Copysign(0, -1)), float32(math.NaN())
			hx := halfOf(d, []int{2, 3, 6, 6}, x)
			fx := widen(hx)
			zero := halfOf(d, []int{}, []float32{0})
			same := func(name string, got, want *graph.Tensor) {
				t.Helper()
				if want.DType == graph.Float32 {
					want = halfOf(d, want.Shape, want.Float32s())
				}
				assert.Equal(t, want.DType, got.DType, name)
				assert.Equal(t, want.Shape, got.Shape, name)
				assert.Equal(t, want.Data, got.Data, name)
			}
			node := func(op string, attrs ...*graph.Attr) *graph.Node {
				n := &graph.Node{Name: op, OpType: op, Attrs: map[string]*graph.Attr{}}
				for _, a := range attrs {
					n.Attrs[a.Name] = a
				}
				return n
			}
			relu := node("Relu")
			same("Relu", run(t, "", "Relu", relu, hx)[0], run(t, "", "Relu", relu, fx)[0])
			for _, op := range []string{"Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual"} {
				n := node(op)
				same(op, run(t, "", op, n, hx, zero)[0], run(t, "", op, n, fx, widen(zero))[0])
				same(op+" same shape", run(t, "", op, n, hx, hx)[0], run(t, "", op, n, fx, fx)[0])
			}
			// Casts between float32 and the half type (native) and between
			// the half types (the general kernel).
			cast := node("Cast", graph.IntAttr("to", int64(d)))
			wide := widen(hx)
			same("Cast to half", run(t, "", "Cast", cast, wide)[0], wide)
			back := node("Cast", graph.IntAttr("to", int64(graph.Float32)))
			assert.Equal(t, bitsOf(wide), bitsOf(run(t, "", "Cast", back, hx)[0]), "Cast to float32")
			assert.Equal(t, bitsOf(wide), bitsOf(run(t, "", "CastLike", node("CastLike"), hx, graph.FromFloat32([]float32{0}))[0]), "CastLike to float32")
			same("CastLike to half", run(t, "", "CastLike", node("CastLike"), wide, hx)[0], wide)
			// The fused ReLU gradient (when the fusion pass provides it).
			if _, ok := kern.Lookup("com.onnxtrain.fused", "ReluGrad", 17); ok {
				rg := node("ReluGrad")
				rg.Domain = "com.onnxtrain.fused"
				dy := halfOf(d, hx.Shape, randn(hx.Size()))
				same("ReluGrad", run(t, rg.Domain, "ReluGrad", rg, dy, hx)[0], run(t, rg.Domain, "ReluGrad", rg, widen(dy), fx)[0])
			}
			sqrt := node("Sqrt")
			same("Sqrt", run(t, "", "Sqrt", sqrt, hx)[0], run(t, "", "Sqrt", sqrt, fx)[0])

			// MaxPoolGrad with overlapping windows (kernel 3, stride 2, pad 1):
			// an element that is the maximum of two windows sums two gradients.
			x = randn(2 * 3 * 6 * 6)
			hx = halfOf(d, []int{2, 3, 6, 6}, x)
			fx = widen(hx)
			pool := node("MaxPoolGrad", graph.IntsAttr("kernel_shape", 3, 3), graph.IntsAttr("strides", 2, 2), graph.IntsAttr("pads", 1, 1, 1, 1))
			pool.Domain = graph.InternalDomain
			hdy := halfOf(d, []int{2, 3, 3, 3}, randn(2*3*3*3))
			same("MaxPoolGrad", run(t, graph.InternalDomain, "MaxPoolGrad", pool, hdy, hx)[0],
				run(t, graph.InternalDomain, "MaxPoolGrad", pool, widen(hdy), fx)[0])

			// The direct path of 2×2 stride 2 windows without padding, with
			// ties (equal values) in some windows.
			tied := make([]float32, len(x))
			for i, v := range x {
				tied[i] = float32(math.Round(float64(v))) // many windows hold their maximum twice
			}
			ht := halfOf(d, []int{2, 3, 6, 6}, tied)
			p2 := node("MaxPoolGrad", graph.IntsAttr("kernel_shape", 2, 2), graph.IntsAttr("strides", 2, 2))
			p2.Domain = graph.InternalDomain
			same("MaxPoolGrad 2x2", run(t, graph.InternalDomain, "MaxPoolGrad", p2, hdy, ht)[0],
				run(t, graph.InternalDomain, "MaxPoolGrad", p2, widen(hdy), widen(ht))[0])
			f2 := node("MaxPool", graph.IntsAttr("kernel_shape", 2, 2), graph.IntsAttr("strides", 2, 2))
			f2.Outputs = []string{"y"}
			same("MaxPool 2x2", run(t, "", "MaxPool", f2, ht)[0], run(t, "", "MaxPool", f2, widen(ht))[0])
			fwd := node("MaxPool", graph.IntsAttr("kernel_shape", 3, 3), graph.IntsAttr("strides", 2, 2), graph.IntsAttr("pads", 1, 1, 1, 1))
			fwd.Outputs = []string{"y"}
			same("MaxPool", run(t, "", "MaxPool", fwd, hx)[0], run(t, "", "MaxPool", fwd, fx)[0])
			fwd.Attrs["ceil_mode"] = graph.IntAttr("ceil_mode", 1)
			fwd.Attrs["strides"] = graph.IntsAttr("strides", 4, 4)
			same("MaxPool ceil", run(t, "", "MaxPool", fwd, hx)[0], run(t, "", "MaxPool", fwd, fx)[0])

			// Elementwise arithmetic: equal shapes, a scalar, a bias over the
			// last dim on either side.
			p := halfOf(d, []int{2, 4, 3}, randn(24))
			q := halfOf(d, []int{2, 4, 3}, randn(24))
			c := halfOf(d, []int{3}, randn(3))
			s1 := halfOf(d, []int{1}, randn(1))
			for _, op := range []string{"Add", "Sub", "Mul", "Div"} {
				n := node(op)
				for _, pair := range [][2]*graph.Tensor{{p, q}, {p, c}, {c, p}, {p, s1}, {s1, p}} {
					same(op, run(t, "", op, n, pair[0], pair[1])[0], run(t, "", op, n, widen(pair[0]), widen(pair[1]))[0])
				}
			}

			// The converting adapter: MatMul, and Add on a broadcast the
			// native kernel does not cover.
			a := halfOf(d, []int{4, 5}, randn(20))
			b := halfOf(d, []int{5, 3}, randn(15))
			col := halfOf(d, []int{5, 1}, randn(5))
			add := node("Add")
			same("Add broadcast", run(t, "", "Add", add, b, col)[0], run(t, "", "Add", add, widen(b), widen(col))[0])
			mm := node("MatMul")
			same("MatMul", run(t, "", "MatMul", mm, a, b)[0], run(t, "", "MatMul", mm, widen(a), widen(b))[0])
		})
	}
}
