package cpu_test

import (
	"math"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// reuseAllocator serves a node's tensors from storage kept between runs,
// as the executor's memory plan does: the i-th request of a run gets the
// i-th tensor of the previous run when its dtype and size match.
type reuseAllocator struct {
	ts   []*graph.Tensor
	next int
}

func (a *reuseAllocator) Alloc(_ *graph.Node, d graph.DType, shape []int, elems int) *graph.Tensor {
	k := a.next
	a.next++
	if k < len(a.ts) {
		if t := a.ts[k]; t.DType == d && t.Size() == elems {
			t.Shape = append(t.Shape[:0], shape...)
			switch s := t.Data.(type) {
			case []float32:
				clear(s)
			case []float64:
				clear(s)
			case []int64:
				clear(s)
			}
			return t
		}
	}
	t, err := graph.NewTensor(d, shape)
	if err != nil {
		return nil
	}
	if k < len(a.ts) {
		a.ts[k] = t
	} else {
		a.ts = append(a.ts, t)
	}
	return t
}

// boundKernel runs op's kernel on a node bound as the executor binds its
// nodes (reusable storage, results, views and state).
type boundKernel struct {
	n     *graph.Node
	b     *kern.Binding
	alloc *reuseAllocator
	fn    kern.Kernel
	ctx   *kern.Context
}

func newBoundKernel(t *testing.T, domain, op string, attrs ...*graph.Attr) *boundKernel {
	t.Helper()
	spec, ok := kern.Lookup(domain, op, 17)
	require.True(t, ok, "kernel %s:%s", domain, op)
	n := &graph.Node{Name: op, OpType: op, Domain: domain, Attrs: map[string]*graph.Attr{}}
	for _, a := range attrs {
		n.Attrs[a.Name] = a
	}
	bk := &boundKernel{n: n, alloc: &reuseAllocator{}, fn: spec.Fn, ctx: &kern.Context{Opset: 17}}
	bk.b = &kern.Binding{Allocator: bk.alloc}
	kern.Bind(n, bk.b)
	t.Cleanup(func() {
		kern.Unbind(n)
		runtime.KeepAlive(bk.b)
	})
	return bk
}

func (k *boundKernel) run(in ...*graph.Tensor) ([]*graph.Tensor, error) {
	k.alloc.next = 0
	k.b.Begin()
	return k.fn(k.ctx, k.n, in)
}

// steadyAllocs runs the kernel twice (planning, first reuse) and returns
// the heap objects of a further run, which must be none.
func (k *boundKernel) steadyAllocs(t *testing.T, in ...*graph.Tensor) float64 {
	t.Helper()
	for i := 0; i < 2; i++ {
		_, err := k.run(in...)
		require.NoError(t, err)
	}
	return testing.AllocsPerRun(10, func() {
		if _, err := k.run(in...); err != nil {
			panic(err)
		}
	})
}

// bkRamp is a float32 tensor of the given shape with distinct values.
func bkRamp(shape ...int) *graph.Tensor {
	t := graph.Zeros(graph.Float32, shape...)
	s := t.Float32s()
	for i := range s {
		s[i] = float32(math.Sin(float64(i)*0.7+0.3)) * 2
	}
	return t
}

func bkInt64s(shape []int, v ...int64) *graph.Tensor {
	return &graph.Tensor{DType: graph.Int64, Shape: shape, Data: v}
}

// bkMatmulRef is the float64 product of a (batch·m×k, batch dims of a)
// and a shared b (k×n).
func bkMatmulRef(a, b []float32, rows, k, n int) []float64 {
	out := make([]float64, rows*n)
	for i := 0; i < rows; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				s += float64(a[i*k+p]) * float64(b[p*n+j])
			}
			out[i*n+j] = s
		}
	}
	return out
}

func bkAssertClose(t *testing.T, want []float64, got []float32, tol float64, msg string) {
	t.Helper()
	require.Len(t, got, len(want), msg)
	for i, w := range want {
		if math.Abs(float64(got[i])-w) > tol*(1+math.Abs(w)) {
			t.Fatalf("%s: element %d is %v, want %v", msg, i, got[i], w)
		}
	}
}

// TestBoundMatMulPlanFollowsShapes: a MatMul node keeps its plan between
// runs; a run on other shapes plans again and the kept plan never serves
// the wrong shapes (float64 reference products).
func TestBoundMatMulPlanFollowsShapes(t *testing.T) {
	k := newBoundKernel(t, "", "MatMul")
	cases := []struct{ a, b []int }{{[]int{2, 3, 4, 5}, []int{5, 6}}, {[]int{3, 5}, []int{5, 2}}, {[]int{2, 3, 4, 5}, []int{5, 6}}, {[]int{7, 5}, []int{5, 6}}}
	for _, c := range cases {
		a, b := bkRamp(c.a...), bkRamp(c.b...)
		out, err := k.run(a, b)
		require.NoError(t, err)
		kk, n := c.a[len(c.a)-1], c.b[1]
		rows := a.Size() / kk
		wantShape := append(slices.Clone(c.a[:len(c.a)-1]), n)
		assert.Equal(t, wantShape, out[0].Shape)
		bkAssertClose(t, bkMatmulRef(a.Float32s(), b.Float32s(), rows, kk, n), out[0].Float32s(), 1e-5, "MatMul")
	}
	_, err := k.run(bkRamp(3, 4), bkRamp(5, 2))
	assert.Error(t, err, "inner dimensions differ")
	out, err := k.run(bkRamp(3, 5), bkRamp(5, 2))
	require.NoError(t, err, "a failed plan is not kept")
	assert.Equal(t, []int{3, 2}, out[0].Shape)
}

// TestBoundKernelsSteadyStateAllocations: the kernels of a training step,
// run again on the same shapes by a bound node, allocate nothing, and
// still compute the right values (float64 references where they are
// short).
func TestBoundKernelsSteadyStateAllocations(t *testing.T) {
	if cpu.RaceEnabled {
		testutil.Skip(t, "the race detector changes allocation behaviour")
	}
	x := bkRamp(4, 8)
	w := bkRamp(8, 6)
	wt := bkRamp(6, 8)
	bias := bkRamp(6)

	t.Run("MatMul", func(t *testing.T) {
		k := newBoundKernel(t, "", "MatMul")
		a := bkRamp(2, 4, 8)
		assert.Zero(t, k.steadyAllocs(t, a, w))
		out, _ := k.run(a, w)
		bkAssertClose(t, bkMatmulRef(a.Float32s(), w.Float32s(), 8, 8, 6), out[0].Float32s(), 1e-5, "MatMul")
	})
	t.Run("TransposedMatMul", func(t *testing.T) {
		k := newBoundKernel(t, graph.FusedDomain, graph.TransposedMatMul, graph.IntAttr("transB", 1))
		// One object is gemm's own (SgemmStrided's closure), not the
		// kernel's.
		assert.LessOrEqual(t, k.steadyAllocs(t, x, wt), 1.0)
		out, _ := k.run(x, wt)
		bt := make([]float32, 8*6)
		for i := 0; i < 6; i++ {
			for j := 0; j < 8; j++ {
				bt[j*6+i] = wt.Float32s()[i*8+j]
			}
		}
		bkAssertClose(t, bkMatmulRef(x.Float32s(), bt, 4, 8, 6), out[0].Float32s(), 1e-5, "TransposedMatMul")
	})
	t.Run("Gemm", func(t *testing.T) {
		k := newBoundKernel(t, "", "Gemm")
		// One object is gemm's own (a parameter of SgemmEpilogue that
		// escapes), not the kernel's.
		assert.LessOrEqual(t, k.steadyAllocs(t, x, w, bias), 1.0)
		out, _ := k.run(x, w, bias)
		want := bkMatmulRef(x.Float32s(), w.Float32s(), 4, 8, 6)
		for i := range want {
			want[i] += float64(bias.Float32s()[i%6])
		}
		bkAssertClose(t, want, out[0].Float32s(), 1e-5, "Gemm")
	})
	t.Run("MatMulGradA", func(t *testing.T) {
		k := newBoundKernel(t, graph.InternalDomain, "MatMulGradA")
		dy := bkRamp(4, 6)
		assert.Zero(t, k.steadyAllocs(t, dy, x, w))
		out, _ := k.run(dy, x, w)
		// dA = dY·Wᵀ.
		want := make([]float64, 4*8)
		for i := 0; i < 4; i++ {
			for j := 0; j < 8; j++ {
				for p := 0; p < 6; p++ {
					want[i*8+j] += float64(dy.Float32s()[i*6+p]) * float64(w.Float32s()[j*6+p])
				}
			}
		}
		bkAssertClose(t, want, out[0].Float32s(), 1e-5, "MatMulGradA")
	})
	t.Run("MatMulGradB", func(t *testing.T) {
		k := newBoundKernel(t, graph.InternalDomain, "MatMulGradB")
		assert.Zero(t, k.steadyAllocs(t, bkRamp(4, 6), x, w))
	})
	t.Run("Transpose", func(t *testing.T) {
		k := newBoundKernel(t, "", "Transpose", graph.IntsAttr("perm", 0, 2, 1, 3))
		in := bkRamp(2, 3, 4, 40)
		assert.Zero(t, k.steadyAllocs(t, in))
		out, _ := k.run(in)
		assert.Equal(t, []int{2, 4, 3, 40}, out[0].Shape)
		got, src := out[0].Float32s(), in.Float32s()
		for a := 0; a < 2; a++ {
			for b := 0; b < 4; b++ {
				for c := 0; c < 3; c++ {
					for d := 0; d < 40; d++ {
						require.Equal(t, src[((a*3+c)*4+b)*40+d], got[((a*4+b)*3+c)*40+d])
					}
				}
			}
		}
	})
	t.Run("TransposeTiled", func(t *testing.T) {
		k := newBoundKernel(t, "", "Transpose", graph.IntsAttr("perm", 1, 0))
		in := bkRamp(40, 70)
		assert.Zero(t, k.steadyAllocs(t, in))
		out, _ := k.run(in)
		for i := 0; i < 40; i++ {
			for j := 0; j < 70; j++ {
				require.Equal(t, in.Float32s()[i*70+j], out[0].Float32s()[j*40+i])
			}
		}
	})
	t.Run("Slice", func(t *testing.T) {
		// Opset-10 Slice with int64 and int32 parameters, a negative step
		// and an axis left whole: the resolved ranges, the output shape
		// and the gather's maps live in the node's state.
		in := bkRamp(3, 4, 10)
		for _, params := range [][]*graph.Tensor{
			{bkInt64s([]int{2}, 1, -1), bkInt64s([]int{2}, 3, -9), bkInt64s([]int{2}, 0, 2), bkInt64s([]int{2}, 1, -2)},
			{{DType: graph.Int32, Shape: []int{2}, Data: []int32{1, -1}}, {DType: graph.Int32, Shape: []int{2}, Data: []int32{3, -9}},
				{DType: graph.Int32, Shape: []int{2}, Data: []int32{0, 2}}, {DType: graph.Int32, Shape: []int{2}, Data: []int32{1, -2}}},
		} {
			k := newBoundKernel(t, "", "Slice")
			args := append([]*graph.Tensor{in}, params...)
			assert.Zero(t, k.steadyAllocs(t, args...))
			out, err := k.run(args...)
			require.NoError(t, err)
			// x[1:3, :, -1:-9:-2] (numpy): indices 9, 7, 5, 3 of the last axis.
			require.Equal(t, []int{2, 4, 4}, out[0].Shape)
			got, src := out[0].Float32s(), in.Float32s()
			for a := 0; a < 2; a++ {
				for b := 0; b < 4; b++ {
					for c := 0; c < 4; c++ {
						require.Equal(t, src[((1+a)*4+b)*10+9-2*c], got[(a*4+b)*4+c])
					}
				}
			}
		}
	})
	t.Run("SliceGrad", func(t *testing.T) {
		// The gradient of x[1:3, :, -1:-9:-2] (x of shape 3 × 4 × 10):
		// dy's elements at the positions the Slice read, zeros elsewhere.
		x := bkRamp(3, 4, 10)
		dy := bkRamp(2, 4, 4)
		k := newBoundKernel(t, graph.InternalDomain, "SliceGrad")
		args := []*graph.Tensor{dy, x, bkInt64s([]int{2}, 1, -1), bkInt64s([]int{2}, 3, -9), bkInt64s([]int{2}, 0, 2), bkInt64s([]int{2}, 1, -2)}
		assert.Zero(t, k.steadyAllocs(t, args...))
		out, err := k.run(args...)
		require.NoError(t, err)
		require.Equal(t, []int{3, 4, 10}, out[0].Shape)
		want := make([]float32, 3*4*10)
		for a := 0; a < 2; a++ {
			for b := 0; b < 4; b++ {
				for c := 0; c < 4; c++ {
					want[((1+a)*4+b)*10+9-2*c] = dy.Float32s()[(a*4+b)*4+c]
				}
			}
		}
		assert.Equal(t, want, out[0].Float32s())
	})
	views := []struct {
		op    string
		attrs []*graph.Attr
		in    []*graph.Tensor
		shape []int
	}{
		{"Reshape", nil, []*graph.Tensor{x, bkInt64s([]int{2}, -1, 2)}, []int{16, 2}},
		{"Identity", nil, []*graph.Tensor{x}, []int{4, 8}},
		{"Flatten", []*graph.Attr{graph.IntAttr("axis", 1)}, []*graph.Tensor{bkRamp(2, 3, 4)}, []int{2, 12}},
		{"Squeeze", nil, []*graph.Tensor{bkRamp(4, 1, 8), bkInt64s([]int{1}, 1)}, []int{4, 8}},
		{"Unsqueeze", nil, []*graph.Tensor{x, bkInt64s([]int{1}, 0)}, []int{1, 4, 8}},
	}
	for _, v := range views {
		t.Run(v.op, func(t *testing.T) {
			k := newBoundKernel(t, "", v.op, v.attrs...)
			assert.Zero(t, k.steadyAllocs(t, v.in...))
			out, err := k.run(v.in...)
			require.NoError(t, err)
			assert.Equal(t, v.shape, out[0].Shape)
			assert.Equal(t, v.in[0].Float32s(), out[0].Float32s(), "shares the input's data")
			assert.NotSame(t, v.in[0], out[0], "a header of its own")
		})
	}
	t.Run("Shape", func(t *testing.T) {
		k := newBoundKernel(t, "", "Shape", graph.IntAttr("start", 1))
		in := bkRamp(2, 3, 4)
		assert.Zero(t, k.steadyAllocs(t, in))
		out, _ := k.run(in)
		assert.Equal(t, []int{2}, out[0].Shape)
		assert.Equal(t, []int64{3, 4}, out[0].Data)
	})
	t.Run("Add", func(t *testing.T) {
		k := newBoundKernel(t, "", "Add")
		b := bkRamp(8)
		assert.Zero(t, k.steadyAllocs(t, x, b))
		out, _ := k.run(x, b)
		for i, v := range x.Float32s() {
			require.Equal(t, v+b.Float32s()[i%8], out[0].Float32s()[i])
		}
	})
	t.Run("SumToShape", func(t *testing.T) {
		k := newBoundKernel(t, graph.InternalDomain, "SumToShape")
		g := bkRamp(300, 8)
		assert.Zero(t, k.steadyAllocs(t, g, bkRamp(8)))
		out, _ := k.run(g, bkRamp(8))
		want := make([]float64, 8)
		for i, v := range g.Float32s() {
			want[i%8] += float64(v)
		}
		bkAssertClose(t, want, out[0].Float32s(), 1e-6, "SumToShape")
	})
	t.Run("Softmax", func(t *testing.T) {
		k := newBoundKernel(t, "", "Softmax", graph.IntAttr("axis", -1))
		assert.Zero(t, k.steadyAllocs(t, x))
		out, _ := k.run(x)
		want := make([]float64, 32)
		for r := 0; r < 4; r++ {
			var z float64
			for c := 0; c < 8; c++ {
				want[r*8+c] = math.Exp(float64(x.Float32s()[r*8+c]))
				z += want[r*8+c]
			}
			for c := 0; c < 8; c++ {
				want[r*8+c] /= z
			}
		}
		bkAssertClose(t, want, out[0].Float32s(), 1e-6, "Softmax")
	})
	t.Run("SoftmaxGrad", func(t *testing.T) {
		k := newBoundKernel(t, graph.InternalDomain, "SoftmaxGrad", graph.IntAttr("axis", -1))
		assert.Zero(t, k.steadyAllocs(t, bkRamp(4, 8), x))
	})
	t.Run("LayerNormalization", func(t *testing.T) {
		k := newBoundKernel(t, "", "LayerNormalization", graph.IntAttr("axis", -1))
		scale, b := bkRamp(8), bkRamp(8)
		assert.Zero(t, k.steadyAllocs(t, x, scale, b))
		out, _ := k.run(x, scale, b)
		require.Len(t, out, 3)
		want := make([]float64, 32)
		for r := 0; r < 4; r++ {
			row := x.Float32s()[r*8 : r*8+8]
			var m, v float64
			for _, e := range row {
				m += float64(e) / 8
			}
			for _, e := range row {
				v += (float64(e) - m) * (float64(e) - m) / 8
			}
			for c, e := range row {
				want[r*8+c] = (float64(e)-m)/math.Sqrt(v+1e-5)*float64(scale.Float32s()[c]) + float64(b.Float32s()[c])
			}
		}
		bkAssertClose(t, want, out[0].Float32s(), 1e-5, "LayerNormalization")
		assert.Equal(t, []int{4, 1}, out[1].Shape)
	})
	t.Run("LayerNormalizationGrad", func(t *testing.T) {
		k := newBoundKernel(t, graph.InternalDomain, "LayerNormalizationGrad", graph.IntAttr("axis", -1))
		assert.Zero(t, k.steadyAllocs(t, bkRamp(4, 8), x, bkRamp(8)))
	})
	t.Run("Concat", func(t *testing.T) {
		k := newBoundKernel(t, "", "Concat", graph.IntAttr("axis", 1))
		a, b := bkRamp(4, 3), bkRamp(4, 5)
		assert.Zero(t, k.steadyAllocs(t, a, b))
		out, _ := k.run(a, b)
		for r := 0; r < 4; r++ {
			require.Equal(t, a.Float32s()[r*3:r*3+3], out[0].Float32s()[r*8:r*8+3])
			require.Equal(t, b.Float32s()[r*5:r*5+5], out[0].Float32s()[r*8+3:r*8+8])
		}
	})
	t.Run("SplitLike", func(t *testing.T) {
		k := newBoundKernel(t, graph.InternalDomain, "SplitLike", graph.IntAttr("axis", 1))
		assert.Zero(t, k.steadyAllocs(t, x, bkRamp(4, 3), bkRamp(4, 5)))
		out, _ := k.run(x, bkRamp(4, 3), bkRamp(4, 5))
		require.Len(t, out, 2)
		assert.Equal(t, x.Float32s()[3:8], out[1].Float32s()[:5])
	})
	t.Run("Expand", func(t *testing.T) {
		k := newBoundKernel(t, "", "Expand")
		in := bkRamp(1, 8)
		assert.Zero(t, k.steadyAllocs(t, in, bkInt64s([]int{3}, 2, 4, 1)))
		out, _ := k.run(in, bkInt64s([]int{3}, 2, 4, 1))
		assert.Equal(t, []int{2, 4, 8}, out[0].Shape)
		for i, v := range out[0].Float32s() {
			require.Equal(t, in.Float32s()[i%8], v)
		}
	})
	t.Run("Gather", func(t *testing.T) {
		k := newBoundKernel(t, "", "Gather", graph.IntAttr("axis", 0))
		idx := bkInt64s([]int{2}, 3, -4)
		assert.Zero(t, k.steadyAllocs(t, x, idx))
		out, _ := k.run(x, idx)
		assert.Equal(t, []int{2, 8}, out[0].Shape)
		assert.Equal(t, x.Float32s()[24:32], out[0].Float32s()[:8])
		assert.Equal(t, x.Float32s()[0:8], out[0].Float32s()[8:])
	})
	t.Run("GatherGrad", func(t *testing.T) {
		k := newBoundKernel(t, graph.InternalDomain, "GatherGrad", graph.IntAttr("axis", 0))
		assert.Zero(t, k.steadyAllocs(t, bkRamp(2, 8), x, bkInt64s([]int{2}, 3, 3)))
	})
	labels := bkInt64s([]int{4}, 1, 0, 7, 3)
	t.Run("SoftmaxCrossEntropyLoss", func(t *testing.T) {
		k := newBoundKernel(t, "", "SoftmaxCrossEntropyLoss", graph.StringAttr("reduction", "mean"))
		assert.Zero(t, k.steadyAllocs(t, x, labels))
		out, _ := k.run(x, labels)
		var want float64
		for r := 0; r < 4; r++ {
			var z float64
			for c := 0; c < 8; c++ {
				z += math.Exp(float64(x.Float32s()[r*8+c]))
			}
			want -= (float64(x.Float32s()[r*8+int(labels.Data.([]int64)[r])]) - math.Log(z)) / 4
		}
		bkAssertClose(t, []float64{want}, out[0].Float32s(), 1e-6, "SoftmaxCrossEntropyLoss")
	})
	t.Run("SoftmaxCrossEntropyLossGrad", func(t *testing.T) {
		k := newBoundKernel(t, graph.InternalDomain, "SoftmaxCrossEntropyLossGrad", graph.StringAttr("reduction", "mean"))
		dloss := &graph.Tensor{DType: graph.Float32, Shape: []int{}, Data: []float32{2}}
		assert.Zero(t, k.steadyAllocs(t, dloss, x, labels))
		out, _ := k.run(dloss, x, labels)
		// (softmax − onehot)·dloss/N.
		want := make([]float64, 32)
		for r := 0; r < 4; r++ {
			var z float64
			for c := 0; c < 8; c++ {
				z += math.Exp(float64(x.Float32s()[r*8+c]))
			}
			for c := 0; c < 8; c++ {
				p := math.Exp(float64(x.Float32s()[r*8+c])) / z
				if int64(c) == labels.Data.([]int64)[r] {
					p--
				}
				want[r*8+c] = p * 2 / 4
			}
		}
		bkAssertClose(t, want, out[0].Float32s(), 1e-6, "SoftmaxCrossEntropyLossGrad")
	})
}
