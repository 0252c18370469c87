package optimizer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// TestKernelErrors: malformed optimizer-step nodes and operands are errors
// that name what is wrong, never panics; a node the executor does not
// allow to work in place leaves its inputs alone.
func TestKernelErrors(t *testing.T) {
	f := func(v ...float32) *graph.Tensor { return graph.FromFloat32(v, len(v)) }
	sgd := &graph.Node{Name: "sgd", OpType: graph.SGDUpdateOp, Domain: graph.InternalDomain,
		Inputs: []string{"c", "h", "x", "g"}, Outputs: []string{"x1"}, Attrs: map[string]*graph.Attr{}}
	ctx := &kern.Context{}
	consts := f(0, 1)
	hyper := graph.FromFloat32([]float32{-0.5, 0, 0}, 1, 3)

	x, g := f(1, 2), f(4, 4)
	out, err := sgdUpdate(ctx, sgd, []*graph.Tensor{consts, hyper, x, g})
	require.NoError(t, err)
	assert.Equal(t, []float32{-1, 0}, out[0].Float32s())
	assert.Equal(t, []float32{1, 2}, x.Float32s(), "not in place: the input is unchanged")
	ctx.InPlace = true
	out, err = sgdUpdate(ctx, sgd, []*graph.Tensor{consts, hyper, x, g})
	require.NoError(t, err)
	assert.Same(t, x, out[0])
	assert.Equal(t, []float32{-1, 0}, x.Float32s(), "in place")
	ctx.InPlace = false

	_, err = sgdUpdate(ctx, sgd, []*graph.Tensor{consts, hyper, f(1, 2), f(1, 2, 3)})
	assert.ErrorContains(t, err, `operand "g" has 3 elements, its tensor "x" has 2`)
	_, err = sgdUpdate(ctx, sgd, []*graph.Tensor{consts, hyper, f(1), graph.FromInt64([]int64{1}, 1)})
	assert.ErrorContains(t, err, `operand "g" must be float32`)
	_, err = sgdUpdate(ctx, sgd, []*graph.Tensor{consts, f(1, 2), f(1), f(1)})
	assert.ErrorContains(t, err, "hyper) must be float32 [1, 3]")
	_, err = sgdUpdate(ctx, sgd, []*graph.Tensor{f(1), hyper, f(1), f(1)})
	assert.ErrorContains(t, err, "consts) must be float32 [2]")
	bad := *sgd
	bad.Outputs = []string{"x1", "extra"}
	_, err = sgdUpdate(ctx, &bad, []*graph.Tensor{consts, hyper, f(1), f(1)})
	assert.ErrorContains(t, err, "malformed SGDUpdate node")

	clip := &graph.Node{Name: "clip", OpType: graph.ClipGradValueOp, Domain: graph.InternalDomain, Inputs: []string{"v", "g"}, Outputs: []string{"g1"}}
	_, err = clipGradValue(ctx, clip, []*graph.Tensor{graph.FromFloat32([]float32{-1}), f(1)})
	assert.ErrorContains(t, err, "invalid clip value -1")
	_, err = clipGradValue(ctx, clip, []*graph.Tensor{f(1, 2), f(1)})
	assert.ErrorContains(t, err, "(clip) must be a float scalar")
	acc := &graph.Node{Name: "acc", OpType: graph.AccumulateGradOp, Domain: graph.InternalDomain, Inputs: []string{"fresh", "s", "g"}, Outputs: []string{"s1"}}
	_, err = accumulateGrad(ctx, acc, []*graph.Tensor{f(1), f(1), f(1)})
	assert.ErrorContains(t, err, "(fresh) must be a bool scalar")
}

// TestClipAndUnscaleKernels: ClipGradNorm scales by max/(norm+1e-6) only
// when that is below 1 and returns the norm; UnscaleGrads flags inf/NaN
// and scales every element; ClipGradValue clamps.
func TestClipAndUnscaleKernels(t *testing.T) {
	ctx := &kern.Context{}
	f := func(v ...float32) *graph.Tensor { return graph.FromFloat32(v, len(v)) }
	norm := &graph.Node{Name: "n", OpType: graph.ClipGradNormOp, Domain: graph.InternalDomain, Inputs: []string{"m", "a", "b"}, Outputs: []string{"norm", "a1", "b1"}}
	out, err := clipGradNorm(ctx, norm, []*graph.Tensor{graph.FromFloat32([]float32{1}), f(3), f(0, 4)})
	require.NoError(t, err)
	assert.Equal(t, float32(5), out[0].Float32s()[0])
	coef := (1 / (float32(5) + float32(1e-6))) * 1
	assert.Equal(t, []float32{3 * coef}, out[1].Float32s())
	assert.Equal(t, []float32{0, 4 * coef}, out[2].Float32s())
	out, err = clipGradNorm(ctx, norm, []*graph.Tensor{graph.FromFloat32([]float32{10}), f(3), f(0, 4)})
	require.NoError(t, err)
	assert.Equal(t, []float32{3}, out[1].Float32s(), "below the limit: unchanged")

	un := &graph.Node{Name: "u", OpType: graph.UnscaleGradsOp, Domain: graph.InternalDomain, Inputs: []string{"i", "a"}, Outputs: []string{"inf", "a1"}}
	out, err = unscaleGrads(ctx, un, []*graph.Tensor{graph.FromFloat32([]float32{0.5}), f(2, 4)})
	require.NoError(t, err)
	assert.Equal(t, []bool{false}, out[0].Data)
	assert.Equal(t, []float32{1, 2}, out[1].Float32s())
	out, err = unscaleGrads(ctx, un, []*graph.Tensor{graph.FromFloat32([]float32{0.5}), f(2, float32(inf()))})
	require.NoError(t, err)
	assert.Equal(t, []bool{true}, out[0].Data)

	cv := &graph.Node{Name: "c", OpType: graph.ClipGradValueOp, Domain: graph.InternalDomain, Inputs: []string{"v", "a"}, Outputs: []string{"a1"}}
	out, err = clipGradValue(ctx, cv, []*graph.Tensor{graph.FromFloat32([]float32{1}), f(-3, 0.5, 2)})
	require.NoError(t, err)
	assert.Equal(t, []float32{-1, 0.5, 1}, out[0].Float32s())
}

func inf() float64 { return 1 / zero }

var zero = 0.0
