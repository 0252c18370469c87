package backendtest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// fusedLayerNormGradAdd: a pre-norm residual branch, y = x + LN(x)·w, with
// autodiff's gradients as train.Build leaves them: x's gradient is the
// residual's dY plus the LayerNormalizationGrad's dX, which runs as one
// LayerNormGradAdd where the backend declares it (no Add left). dX, dScale
// and dBias equal the unfused graph's bit for bit (y within 1e-5: the
// unfused graph lowers the forward LayerNormalization), and dX agrees with the
// float64 formula dY + (g − mean(g) − x̂·mean(g·x̂))/σ, g = dY·w·scale.
func (kc checker) fusedLayerNormGradAdd(t *testing.T) {
	const rows, width = 6 * 37, 96
	g := graph.NewGraph("lngradadd")
	g.Inputs = []*graph.ValueInfo{
		{Name: "x", Type: F32Type(6, 37, width)}, {Name: "scale", Type: F32Type(width)}, {Name: "bias", Type: F32Type(width)},
		{Name: "w", Type: F32Type(width)}, {Name: "dy", Type: F32Type(6, 37, width)},
	}
	g.Nodes = []*graph.Node{
		{Name: "ln", OpType: "LayerNormalization", Inputs: []string{"x", "scale", "bias"}, Outputs: []string{"ln"},
			Attrs: map[string]*graph.Attr{"axis": {Name: "axis", Type: graph.AttrInt, I: -1}, "epsilon": {Name: "epsilon", Type: graph.AttrFloat, F: 1e-5}}},
		{Name: "m", OpType: "Mul", Inputs: []string{"ln", "w"}, Outputs: []string{"m"}},
		{Name: "y", OpType: "Add", Inputs: []string{"x", "m"}, Outputs: []string{"y"}},
	}
	m, grads := trainingStepModel(t, g, "y", []string{"x", "scale", "bias"})
	rng := rand.New(rand.NewPCG(41, 42))
	inputs := NormalInputs(g, rng, 1)
	for i := range inputs["x"].Float32s() {
		inputs["x"].Float32s()[i] += 3 // a mean away from 0
	}
	fused, ops := kc.runPlanned(t, m, inputs, false)
	plain, plainOps := kc.runPlanned(t, m, inputs, true)
	assert.Zero(t, plainOps[graph.LayerNormGradAdd], "%v", plainOps)
	if kc.fuses(false, graph.LayerNormGradAdd) {
		assert.Equal(t, 1, ops[graph.LayerNormGradAdd], "%v", ops)
		assert.Zero(t, ops["LayerNormalizationGrad"]+ops["Add"]-1, "one Add left, the forward residual: %v", ops)
	} else {
		assert.Zero(t, ops[graph.LayerNormGradAdd], "%v", ops)
	}
	// (y itself: the unfused graph runs LayerNormalization's lowering,
	// which rounds differently.)
	assert.InDeltaSlice(t, plain["y"].Float32s(), fused["y"].Float32s(), 1e-5)
	for _, name := range grads {
		require.NotNil(t, fused[name], name)
		assert.True(t, sameBits(plain[name], fused[name]), "%s: fused and unfused differ", name)
	}
	x, sc, w, dy := inputs["x"].Float32s(), inputs["scale"].Float32s(), inputs["w"].Float32s(), inputs["dy"].Float32s()
	dx := fused[grads[0]].Float32s()
	for r := 0; r < rows; r++ {
		var mean, sq float64
		for i := 0; i < width; i++ {
			mean += float64(x[r*width+i])
		}
		mean /= width
		for i := 0; i < width; i++ {
			d := float64(x[r*width+i]) - mean
			sq += d * d
		}
		inv := 1 / math.Sqrt(sq/width+1e-5)
		var mg, mgx float64
		xh, gg := make([]float64, width), make([]float64, width)
		for i := 0; i < width; i++ {
			xh[i] = (float64(x[r*width+i]) - mean) * inv
			gg[i] = float64(dy[r*width+i]) * float64(w[i]) * float64(sc[i])
			mg += gg[i] / width
			mgx += gg[i] * xh[i] / width
		}
		for i := 0; i < width; i++ {
			want := float64(dy[r*width+i]) + inv*(gg[i]-mg-xh[i]*mgx)
			assert.InDelta(t, want, float64(dx[r*width+i]), 1e-4*math.Max(1, math.Abs(want)), "dx[%d,%d]", r, i)
		}
	}
}

// trainingStepModel completes g (its forward nodes) as a training step
// for the epilogue fusion checks: the gradients of y (seeded by the input
// "dy") with respect to wrt as outputs beside y, the forward values the
// backward reads recomputed as the training program does (ReadsOnly), at
// opset 17; and the gradients' names, in wrt's order.
func trainingStepModel(t *testing.T, g *graph.Graph, y string, wrt []string) (*graph.Model, []string) {
	t.Helper()
	forward := len(g.Nodes)
	grads, err := graph.Gradients(g, y, wrt, "dy", 17)
	require.NoError(t, err)
	g.Outputs = []*graph.ValueInfo{{Name: y}}
	for _, gr := range grads {
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: gr})
	}
	_, err = graph.Recompute(g, forward, 17, graph.RecomputeOptions{ReadsOnly: true})
	require.NoError(t, err)
	return &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g}, grads
}
