package linalg

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func node(op string, attrs ...*graph.Attr) *graph.Node {
	n := &graph.Node{Name: "n", OpType: op, Outputs: []string{"y", "y_h", "y_c"}}
	for _, a := range attrs {
		n.SetAttr(a)
	}
	return n
}

func run(t *testing.T, fn kern.Kernel, n *graph.Node, in ...*graph.Tensor) []*graph.Tensor {
	t.Helper()
	out, err := fn(&kern.Context{Opset: 17}, n, in)
	require.NoError(t, err)
	return out
}

func randF32(r *rand.Rand, shape ...int) *graph.Tensor {
	d := make([]float32, product(shape))
	for i := range d {
		d[i] = r.Float32()*2 - 1
	}
	return graph.FromFloat32(d, shape...)
}

func assertClose(t *testing.T, want, got []float32, tol float64, msg ...any) {
	t.Helper()
	require.Equal(t, len(want), len(got), msg...)
	for i := range want {
		if math.Abs(float64(want[i]-got[i])) > tol {
			t.Fatalf("%v: element %d: want %v, got %v", msg, i, want[i], got[i])
		}
	}
}

func TestMatMulVectorsAndBroadcast(t *testing.T) {
	// vector · matrix drops the M dim; matrix · vector drops N.
	a := graph.FromFloat32([]float32{1, 2}, 2)
	b := graph.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	out := run(t, matMulKernel, node("MatMul"), a, b)[0]
	assert.Equal(t, []int{3}, out.Shape)
	assert.Equal(t, []float32{9, 12, 15}, out.Float32s())

	v := graph.FromFloat32([]float32{1, 0, -1}, 3)
	out = run(t, matMulKernel, node("MatMul"), b, v)[0]
	assert.Equal(t, []int{2}, out.Shape)
	assert.Equal(t, []float32{-2, -2}, out.Float32s())

	out = run(t, matMulKernel, node("MatMul"), v, v)[0]
	assert.Equal(t, []int{}, out.Shape)
	assert.Equal(t, []float32{2}, out.Float32s())

	// [2,1,3,4] x [5,4,2] -> [2,5,3,2], checked against per-matrix products.
	r := rand.New(rand.NewPCG(1, 1))
	x, y := randF32(r, 2, 1, 3, 4), randF32(r, 5, 4, 2)
	out = run(t, matMulKernel, node("MatMul"), x, y)[0]
	require.Equal(t, []int{2, 5, 3, 2}, out.Shape)
	for i := 0; i < 2; i++ {
		for j := 0; j < 5; j++ {
			want := make([]float32, 6)
			linalgMatMulGeneric(3, 2, 4, x.Float32s()[i*12:], y.Float32s()[j*8:], want)
			assertClose(t, want, out.Float32s()[(i*5+j)*6:(i*5+j+1)*6], 1e-5)
		}
	}

	_, err := matMulKernel(nil, node("MatMul"), []*graph.Tensor{randF32(r, 2, 3), randF32(r, 2, 3)})
	assert.ErrorContains(t, err, "inner dimensions")
}

func TestMatMulIntegerDTypes(t *testing.T) {
	a := graph.FromInt64([]int64{1, 2, 3, 4}, 2, 2)
	out := run(t, matMulKernel, node("MatMul"), a, a)[0]
	assert.Equal(t, []int64{7, 10, 15, 22}, out.Int64s())

	d := graph.FromFloat64([]float64{1, 2, 3, 4}, 2, 2)
	out = run(t, matMulKernel, node("MatMul"), d, d)[0]
	assert.Equal(t, []float64{7, 10, 15, 22}, out.Float64s())
}

func TestGemmBroadcastAndInts(t *testing.T) {
	a := graph.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)
	c := graph.FromFloat32([]float32{10, 20}, 2) // row vector
	n := node("Gemm", graph.FloatAttr("alpha", 2), graph.FloatAttr("beta", 0.5), graph.IntAttr("transA", 1))
	out := run(t, gemmKernel, n, a, a, c)[0]
	// Aᵀ·A = [[10,14],[14,20]]
	assert.Equal(t, []float32{25, 38, 33, 50}, out.Float32s())

	ai := &graph.Tensor{DType: graph.Int32, Shape: []int{2, 2}, Data: []int32{1, 2, 3, 4}}
	ci := &graph.Tensor{DType: graph.Int32, Shape: []int{2, 1}, Data: []int32{100, 200}}
	out = run(t, gemmKernel, node("Gemm", graph.IntAttr("transB", 1)), ai, ai, ci)[0]
	// A·Aᵀ = [[5,11],[11,25]]
	assert.Equal(t, []int32{105, 111, 211, 225}, out.Data)

	_, err := gemmKernel(&kern.Context{Opset: 13}, node("Gemm"), []*graph.Tensor{a, a, graph.FromFloat32([]float32{1, 2, 3}, 3)})
	assert.ErrorContains(t, err, "does not broadcast")
	_, err = gemmKernel(&kern.Context{Opset: 6}, node("Gemm"), []*graph.Tensor{a, a, c})
	assert.ErrorContains(t, err, "broadcast=1")
	_, err = gemmKernel(&kern.Context{Opset: 6}, node("Gemm", graph.IntAttr("broadcast", 1)), []*graph.Tensor{a, a, c})
	assert.NoError(t, err)
}

// einsumReference evaluates an equation by brute force over every label
// assignment, given the parsed spec.
func einsumReference(spec *einsumSpec, in []*graph.Tensor) []float64 {
	var labels []int
	for l := range spec.sizes {
		labels = append(labels, l)
	}
	outSize := 1
	for _, l := range spec.output {
		outSize *= spec.sizes[l]
	}
	out := make([]float64, outSize)
	val := map[int]int{}
	var rec func(i int)
	rec = func(i int) {
		if i == len(labels) {
			p := 1.0
			for k, t := range in {
				idx := 0
				for d, l := range spec.inputs[k] {
					v := val[l]
					if t.Shape[d] == 1 {
						v = 0
					}
					idx = idx*t.Shape[d] + v
				}
				p *= t.Float(idx)
			}
			o := 0
			for _, l := range spec.output {
				o = o*spec.sizes[l] + val[l]
			}
			out[o] += p
			return
		}
		for v := 0; v < spec.sizes[labels[i]]; v++ {
			val[labels[i]] = v
			rec(i + 1)
		}
	}
	rec(0)
	return out
}

func TestEinsumAgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	cases := []struct {
		eq     string
		shapes [][]int
		out    []int
	}{
		{"ij,jk->ik", [][]int{{2, 3}, {3, 4}}, []int{2, 4}},
		{"ij,jk", [][]int{{2, 3}, {3, 4}}, []int{2, 4}},
		{"ba", [][]int{{2, 3}}, []int{3, 2}},
		{"ii->i", [][]int{{3, 3}}, []int{3}},
		{"ii", [][]int{{3, 3}}, []int{}},
		{"iij->ji", [][]int{{3, 3, 2}}, []int{2, 3}},
		{"ij->", [][]int{{2, 3}}, []int{}},
		{"ijk->kji", [][]int{{2, 3, 4}}, []int{4, 3, 2}},
		{"i,j->ij", [][]int{{2}, {3}}, []int{2, 3}},
		{"ij,ij->ij", [][]int{{2, 3}, {2, 3}}, []int{2, 3}},
		{"i,i", [][]int{{5}, {5}}, []int{}},
		{"bij,bjk->bik", [][]int{{2, 3, 4}, {2, 4, 5}}, []int{2, 3, 5}},
		{"ab,bc,cd->ad", [][]int{{2, 3}, {3, 4}, {4, 2}}, []int{2, 2}},
		{"ab,bc,cd", [][]int{{2, 3}, {3, 4}, {4, 2}}, []int{2, 2}},
		{"...ij,...jk->...ik", [][]int{{2, 1, 2, 3}, {4, 3, 2}}, []int{2, 4, 2, 2}},
		{"...ij,jk", [][]int{{5, 2, 3}, {3, 4}}, []int{5, 2, 4}},
		{"i...->...", [][]int{{3, 2, 2}}, []int{2, 2}},
		{"Ab,bC", [][]int{{2, 3}, {3, 2}}, []int{2, 2}},
		{"ij,kj->ki", [][]int{{2, 3}, {4, 3}}, []int{4, 2}},
		{"bii->bi", [][]int{{2, 3, 3}}, []int{2, 3}},
		{"i j , j k -> i k", [][]int{{2, 3}, {3, 2}}, []int{2, 2}},
		{"ijk,ikl,j->l", [][]int{{2, 3, 4}, {2, 4, 2}, {3}}, []int{2}},
		{"ij,jk,jl->ikl", [][]int{{2, 3}, {3, 2}, {3, 4}}, []int{2, 2, 4}},
		{"ij,jk,jl->j", [][]int{{2, 3}, {3, 2}, {3, 4}}, []int{3}},
		{"...i,...i->...", [][]int{{3, 1, 4}, {2, 4}}, []int{3, 2}},
	}
	for _, c := range cases {
		var in []*graph.Tensor
		for _, s := range c.shapes {
			in = append(in, randF32(r, s...))
		}
		n := node("Einsum", &graph.Attr{Name: "equation", Type: graph.AttrString, S: c.eq})
		out := run(t, einsumKernel, n, in...)[0]
		require.Equal(t, c.out, out.Shape, c.eq)
		spec, err := parseEinsum(n, c.eq, c.shapes)
		require.NoError(t, err)
		want := einsumReference(spec, in)
		for i, w := range want {
			assert.InDelta(t, w, float64(out.Float32s()[i]), 1e-4, "%s element %d", c.eq, i)
		}
		// float64 and int64 go through the generic path.
		var in64 []*graph.Tensor
		for _, t32 := range in {
			c64, err := kern.Cast(t32, graph.Float64)
			require.NoError(t, err)
			in64 = append(in64, c64)
		}
		out64 := run(t, einsumKernel, n, in64...)[0]
		for i, w := range want {
			assert.InDelta(t, w, out64.Float64s()[i], 1e-9, "%s float64 element %d", c.eq, i)
		}
	}
	ints := graph.FromInt64([]int64{1, 2, 3, 4}, 2, 2)
	out := run(t, einsumKernel, node("Einsum", &graph.Attr{Name: "equation", S: "ij,jk->ik"}), ints, ints)[0]
	assert.Equal(t, []int64{7, 10, 15, 22}, out.Int64s())

	for _, bad := range []string{"ij,jk->iz", "ij->ii", "ijk->i", "i.j->i"} {
		_, err := einsumKernel(nil, node("Einsum", &graph.Attr{Name: "equation", S: bad}), []*graph.Tensor{randF32(r, 2, 2)})
		assert.Error(t, err, bad)
	}
}

func TestDet(t *testing.T) {
	x := graph.FromFloat32([]float32{
		1, 2, 3, 4, // -2
		0, 1, 1, 0, // needs a pivot: -1
		2, 4, 1, 2, // singular: 0
	}, 3, 2, 2)
	out := run(t, detKernel, node("Det"), x)[0]
	assert.Equal(t, []int{3}, out.Shape)
	assertClose(t, []float32{-2, -1, 0}, out.Float32s(), 1e-6)

	d := graph.FromFloat64([]float64{2, 0, 0, 0, 3, 0, 0, 0, 4}, 3, 3)
	out = run(t, detKernel, node("Det"), d)[0]
	assert.Equal(t, []float64{24}, out.Float64s())

	_, err := detKernel(nil, node("Det"), []*graph.Tensor{randF32(rand.New(rand.NewPCG(1, 1)), 2, 3)})
	assert.ErrorContains(t, err, "[*, M, M]")
}

func TestMatMulIntegerZeroPoints(t *testing.T) {
	a := &graph.Tensor{DType: graph.Uint8, Shape: []int{2, 2}, Data: []uint8{11, 12, 23, 24}}
	b := &graph.Tensor{DType: graph.Int8, Shape: []int{2, 2}, Data: []int8{1, 2, 3, 4}}
	azp := &graph.Tensor{DType: graph.Uint8, Shape: []int{2}, Data: []uint8{10, 20}} // per row
	bzp := &graph.Tensor{DType: graph.Int8, Shape: []int{2}, Data: []int8{1, 0}}     // per column
	out := run(t, matMulIntegerKernel, node("MatMulInteger"), a, b, azp, bzp)[0]
	// (A - azp) = [[1,2],[3,4]], (B - bzp) = [[0,2],[2,4]]
	assert.Equal(t, graph.Int32, out.DType)
	assert.Equal(t, []int32{4, 10, 8, 22}, out.Data)
}

func TestConvIntegerGroupsAndChannelZeroPoints(t *testing.T) {
	// 1 image, 2 channels of 1×3, group 2, kernel 1×2, stride 1, pad 1 at the end.
	x := &graph.Tensor{DType: graph.Uint8, Shape: []int{1, 2, 1, 3}, Data: []uint8{1, 2, 3, 4, 5, 6}}
	w := &graph.Tensor{DType: graph.Uint8, Shape: []int{2, 1, 1, 2}, Data: []uint8{2, 3, 5, 5}}
	xzp := &graph.Tensor{DType: graph.Uint8, Shape: []int{}, Data: []uint8{1}}
	wzp := &graph.Tensor{DType: graph.Uint8, Shape: []int{2}, Data: []uint8{1, 4}}
	n := node("ConvInteger", graph.IntAttr("group", 2), graph.IntsAttr("pads", 0, 0, 0, 1))
	out := run(t, convIntegerKernel, n, x, w, xzp, wzp)[0]
	require.Equal(t, []int{1, 2, 1, 3}, out.Shape)
	// channel 0: x-1 = [0,1,2,(0)], w-1 = [1,2] -> [2, 5, 2]
	// channel 1: x-1 = [3,4,5,(0)], w-4 = [1,1] -> [7, 9, 5]
	assert.Equal(t, []int32{2, 5, 2, 7, 9, 5}, out.Data)

	n = node("ConvInteger", graph.IntAttr("group", 2), graph.IntsAttr("strides", 1, 2), graph.StringAttr("auto_pad", "SAME_UPPER"))
	out = run(t, convIntegerKernel, n, x, w, xzp, wzp)[0]
	require.Equal(t, []int{1, 2, 1, 2}, out.Shape)
	assert.Equal(t, []int32{2, 2, 7, 5}, out.Data)
}
