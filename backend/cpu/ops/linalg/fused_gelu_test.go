package linalg

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/elementwise" // GeluErf's kernel, geluY's general path
	"github.com/onnxtrain/onnxtrain/graph"
)

// geluY's general path (constants that are not scalars) runs the GeluErf
// kernel for the fused node, whose two outputs are not GeluErf's three,
// and gives the bits of its vmath pass.
func TestGeluYGeneralPath(t *testing.T) {
	n := &graph.Node{Name: "mm", OpType: graph.MatMulGeluErfGrad, Domain: graph.FusedDomain, Outputs: []string{"dx", "y"}}
	x := randF32(rand.New(rand.NewPCG(5, 6)), 3, 4)
	for i := range x.Float32s() {
		x.Float32s()[i] *= 3
	}
	c1, c2, c3 := float32(math.Sqrt2), float32(1), float32(0.5)
	ctx := &kern.Context{Opset: 17}
	want, err := geluY(ctx, n, x, graph.FromFloat32([]float32{c1}), graph.FromFloat32([]float32{c2}), graph.FromFloat32([]float32{c3}))
	require.NoError(t, err)
	row := func(v float32) *graph.Tensor { return graph.FromFloat32([]float32{v, v, v, v}, 4) }
	got, err := geluY(ctx, n, x, row(c1), row(c2), row(c3))
	require.NoError(t, err)
	require.Equal(t, []int{3, 4}, got.Shape)
	for i, w := range want.Float32s() {
		assert.Equal(t, math.Float32bits(w), math.Float32bits(got.Float32s()[i]), "y[%d]", i)
	}
}

// The epilogue paths of MatMulAddGeluErf and MatMulGeluErfGrad give the
// bits of the kernels they fuse run one after another (MatMulAdd then
// GeluErf's Y; TransposedMatMul then GeluErfGradX, and GeluErf's Y of X),
// on products small enough for the GEMM's direct path and large enough for
// its blocked one (several row blocks, columns not a multiple of 16), with
// scores wide enough to reach erf's saturation and e^-(d·d)'s subnormals.
func TestGeluEpiloguesMatchTheUnfusedKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	ctx := &kern.Context{Opset: 17}
	c1, c2, c3 := graph.FromFloat32([]float32{float32(math.Sqrt2)}), graph.FromFloat32([]float32{1}), graph.FromFloat32([]float32{0.5})
	k := graph.FromFloat32([]float32{float32(2 / math.Sqrt(math.Pi))})
	scaled := func(s float32, shape ...int) *graph.Tensor {
		x := randF32(rng, shape...)
		for i := range x.Float32s() {
			x.Float32s()[i] *= s
		}
		return x
	}
	bits := func(t *testing.T, what string, want, got *graph.Tensor) {
		t.Helper()
		require.Equal(t, want.Shape, got.Shape, what)
		for i, w := range want.Float32s() {
			g := got.Float32s()[i]
			if math.Float32bits(w) != math.Float32bits(g) && !(w != w && g != g) {
				t.Fatalf("%s[%d]: fused %g, unfused %g", what, i, g, w)
			}
		}
	}
	transB := &graph.Attr{Name: "transB", Type: graph.AttrInt, I: 1}
	for _, sh := range [][4]int{{1, 5, 7, 3}, {2, 5, 7, 3}, {1, 2 * 197, 307, 96}, {2, 197, 307, 96}, {3, 100, 1030, 40}} {
		batch, m, n, kk := sh[0], sh[1], sh[2], sh[3]
		lead := []int{m} // A as a matrix, or as a batch of them (the ViT's [4, 197, 768])
		if batch > 1 {
			lead = []int{batch, m}
		}
		shape := func(last int) []int { return append(append([]int(nil), lead...), last) }
		// Forward: x [.., m, kk] · Wᵀ ([n, kk]) + bias [n].
		x, w, bias := scaled(4, shape(kk)...), scaled(1, n, kk), scaled(3, n)
		node := &graph.Node{Name: "up", OpType: graph.MatMulAddGeluErf, Domain: graph.FusedDomain, Outputs: []string{"p", "y"}}
		node.SetAttr(transB)
		got, err := matMulAddGeluErfKernel(ctx, node, []*graph.Tensor{x, w, bias, c1, c2, c3})
		require.NoError(t, err)
		plain := &graph.Node{Name: "up", OpType: graph.MatMulAdd, Domain: graph.FusedDomain, Outputs: []string{"p"}}
		plain.SetAttr(transB)
		p, err := matMulAddKernel(ctx, plain, []*graph.Tensor{x, w, bias})
		require.NoError(t, err)
		y, err := geluY(ctx, node, p[0], row(c1, n), row(c2, n), row(c3, n)) // the GeluErf kernel
		require.NoError(t, err)
		bits(t, "P", p[0], got[0])
		bits(t, "Y", y, got[1])

		// Gradient: dY [.., m, n] · W [n, kk], GELU'd at X [.., m, kk].
		dy, w2, xg := scaled(1, shape(n)...), scaled(1, n, kk), scaled(7, shape(kk)...)
		for _, wantY := range []bool{true, false} {
			outs := []string{"dx", "y"}
			if !wantY {
				outs[1] = ""
			}
			gn := &graph.Node{Name: "down", OpType: graph.MatMulGeluErfGrad, Domain: graph.FusedDomain, Outputs: outs}
			got, err := matMulGeluErfGradKernel(ctx, gn, []*graph.Tensor{dy, w2, xg, c1, c2, c3, k})
			require.NoError(t, err)
			pn := &graph.Node{Name: "down", OpType: graph.TransposedMatMul, Domain: graph.FusedDomain, Outputs: []string{"d"}}
			prod, err := transposedMatMulKernel(ctx, pn, []*graph.Tensor{dy, w2})
			require.NoError(t, err)
			xn := &graph.Node{Name: "down", OpType: graph.GeluErfGradX, Domain: graph.FusedDomain, Outputs: []string{"dx"}}
			dx, err := runOp(ctx, xn, graph.FusedDomain, graph.GeluErfGradX, prod[0], xg, c1, c2, c3, k)
			require.NoError(t, err)
			bits(t, "dX", dx[0], got[0])
			if wantY {
				yx, err := geluY(ctx, gn, xg, row(c1, kk), row(c2, kk), row(c3, kk))
				require.NoError(t, err)
				bits(t, "Y of X", yx, got[1])
			} else {
				assert.Nil(t, got[1])
			}
		}
	}
}

// row is scalar s as a row of n equal values: a constant geluY cannot
// take as a scalar, so that it runs the GeluErf kernel.
func row(s *graph.Tensor, n int) *graph.Tensor {
	v := make([]float32, n)
	for i := range v {
		v[i] = s.Float32s()[0]
	}
	return graph.FromFloat32(v, n)
}
