package backendtest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// fusedMaxPoolArgmax: ResNet's stem pool (3×3, stride 2, pad 1) over an
// odd-sized plane, values on a coarse grid (ties) with a NaN, with
// autodiff's gradient: where the backend declares MaxPoolArgmax and
// MaxPoolArgmaxGrad the pool writes its argmax codes and the gradient
// reads them (no MaxPoolGrad left); Y and dX equal the unfused graph's bit
// for bit, and dX the definition (each dY to its window's first maximum
// in row-major order, the first tap taken even when NaN) summed in
// float64.
func (kc checker) fusedMaxPoolArgmax(t *testing.T) {
	const n, c, h, w, oh, ow = 2, 3, 37, 35, 19, 18
	g := graph.NewGraph("maxpool")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: F32Type(n, c, h, w)}, {Name: "dy", Type: F32Type(n, c, oh, ow)}}
	g.Nodes = []*graph.Node{
		{Name: "pool", OpType: "MaxPool", Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: map[string]*graph.Attr{
			"kernel_shape": {Name: "kernel_shape", Type: graph.AttrInts, Ints: []int64{3, 3}},
			"strides":      {Name: "strides", Type: graph.AttrInts, Ints: []int64{2, 2}},
			"pads":         {Name: "pads", Type: graph.AttrInts, Ints: []int64{1, 1, 1, 1}},
		}},
	}
	m, grads := trainingStepModel(t, g, "y", []string{"x"})
	rng := rand.New(rand.NewPCG(43, 44))
	inputs := NormalInputs(g, rng, 1)
	x := inputs["x"].Float32s()
	for i := range x {
		x[i] = float32(rng.IntN(5))
	}
	x[5*w+7] = float32(math.NaN())
	fused, ops := kc.runPlanned(t, m, inputs, false)
	plain, plainOps := kc.runPlanned(t, m, inputs, true)
	assert.Zero(t, plainOps[graph.MaxPoolArgmax]+plainOps[graph.MaxPoolArgmaxGrad], "%v", plainOps)
	if kc.fuses(false, graph.MaxPoolArgmax, graph.MaxPoolArgmaxGrad) {
		assert.Equal(t, 1, ops[graph.MaxPoolArgmax], "%v", ops)
		assert.Equal(t, 1, ops[graph.MaxPoolArgmaxGrad], "%v", ops)
		assert.Zero(t, ops["MaxPool"]+ops["MaxPoolGrad"], "%v", ops)
	} else {
		assert.Zero(t, ops[graph.MaxPoolArgmax]+ops[graph.MaxPoolArgmaxGrad], "%v", ops)
	}
	assert.True(t, sameBits(plain["y"], fused["y"]), "y: fused and unfused differ")
	require.NotNil(t, fused[grads[0]])
	assert.True(t, sameBits(plain[grads[0]], fused[grads[0]]), "dx: fused and unfused differ")
	dy, dx := inputs["dy"].Float32s(), fused[grads[0]].Float32s()
	want := make([]float64, len(x))
	for p := 0; p < n*c; p++ {
		for r := 0; r < oh; r++ {
			for q := 0; q < ow; q++ {
				best, at := float32(0), -1
				for i := 2*r - 1; i <= 2*r+1; i++ {
					for j := 2*q - 1; j <= 2*q+1; j++ {
						if i < 0 || i >= h || j < 0 || j >= w {
							continue
						}
						if v := x[p*h*w+i*w+j]; at < 0 || v > best {
							best, at = v, p*h*w+i*w+j
						}
					}
				}
				want[at] += float64(dy[(p*oh+r)*ow+q])
			}
		}
	}
	for i, v := range want {
		assert.InDelta(t, v, float64(dx[i]), 1e-5*math.Max(1, math.Abs(v)), "dx[%d]", i)
	}
}
