package training

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// optimNode builds an optimizer node of op with the given attributes and
// nIn inputs / nOut outputs (names are placeholders).
func optimNode(op string, nIn, nOut int, attrs ...*graph.Attr) *graph.Node {
	n := &graph.Node{Name: "opt", OpType: op, Domain: Domain, Attrs: map[string]*graph.Attr{}}
	for i := 0; i < nIn; i++ {
		n.Inputs = append(n.Inputs, "in")
	}
	for i := 0; i < nOut; i++ {
		n.Outputs = append(n.Outputs, "out")
	}
	for _, a := range attrs {
		n.Attrs[a.Name] = a
	}
	return n
}

func floatAttr(name string, v float32) *graph.Attr { return &graph.Attr{Name: name, F: v} }

func stringAttr(name, v string) *graph.Attr { return &graph.Attr{Name: name, S: v} }

// runOptim runs the registered kernel for n's op.
func runOptim(t *testing.T, n *graph.Node, in ...*graph.Tensor) ([]*graph.Tensor, error) {
	t.Helper()
	spec, ok := kern.Lookup(Domain, n.OpType, 0)
	require.True(t, ok, "no kernel registered for %s:%s", Domain, n.OpType)
	return spec.Fn(&kern.Context{}, n, in)
}

func rate(v float32) *graph.Tensor   { return graph.FromFloat32([]float32{v}) }
func count(v int64) *graph.Tensor    { return graph.FromInt64([]int64{v}) }
func f32(v ...float32) *graph.Tensor { return graph.FromFloat32(v, len(v)) }
func f64(v ...float64) *graph.Tensor { return graph.FromFloat64(v, len(v)) }

func momentumAttrs(mode string) []*graph.Attr {
	return []*graph.Attr{floatAttr("alpha", 0.95), floatAttr("beta", 0.1), floatAttr("norm_coefficient", 0.001), stringAttr("mode", mode)}
}

func TestRegisteredInTrainingDomain(t *testing.T) {
	for _, op := range []string{"Adagrad", "Adam", "Momentum"} {
		_, ok := kern.Lookup(Domain, op, 17)
		assert.True(t, ok, op)
		_, ok = kern.Lookup("", op, 17)
		assert.False(t, ok, "%s must not be registered in ai.onnx", op)
	}
}

// Adam with T > 0 (bias correction), norm_coefficient_post, float64 tensors.
func TestAdamBiasCorrectionAndPostNorm(t *testing.T) {
	n := optimNode("Adam", 6, 3, floatAttr("alpha", 0.9), floatAttr("beta", 0.999), floatAttr("epsilon", 1e-8),
		floatAttr("norm_coefficient", 0.01), floatAttr("norm_coefficient_post", 0.05))
	out, err := runOptim(t, n, rate(0.1), count(3), f64(1.2, 2.8), f64(-0.94, -2.5), f64(1.7, 3.6), f64(0.1, 0.1))
	require.NoError(t, err)
	require.Len(t, out, 3)
	// Hand-computed with the spec's pseudo code in float64 (the attributes
	// are float32, hence the relative tolerance).
	assert.InEpsilonSlice(t, []float64{1.0531102951168938, 2.4835992541657395}, out[0].Float64s(), 1e-5)
	assert.InDeltaSlice(t, []float64{1.4372, 2.9928}, out[1].Float64s(), 1e-6)
	assert.InDeltaSlice(t, []float64{0.100761184, 0.106010784}, out[2].Float64s(), 1e-6)
	assert.Equal(t, graph.Float64, out[0].DType)
}

// test_adam_multiple's first tensor with epsilon given explicitly (the
// committed model omits the attribute, see onnx/onnx#7749).
func TestAdamMultipleWithEpsilon(t *testing.T) {
	n := optimNode("Adam", 6, 3, floatAttr("alpha", 0.95), floatAttr("beta", 0.85), floatAttr("epsilon", 1e-2),
		floatAttr("norm_coefficient", 0.001))
	out, err := runOptim(t, n, rate(0.1), count(0), f32(1), f32(-1), f32(2), f32(0.5))
	require.NoError(t, err)
	assert.InDelta(t, 0.7591362374762826, out[0].Float32s()[0], 1e-6)
}

// The spec's Adam default epsilon is 0: sqrt(H_new) alone divides V_new.
func TestAdamDefaults(t *testing.T) {
	n := optimNode("Adam", 6, 3)
	// A tiny gradient, so that even epsilon = 1e-6 would change X_new by 1.6%.
	out, err := runOptim(t, n, rate(1), count(0), f32(0), f32(0.002), f32(0), f32(0))
	require.NoError(t, err)
	// V_new = 0.1*0.002, H_new = 0.001*0.002^2, X_new = -V_new/sqrt(H_new)
	// (up to the float32 rounding of alpha = 0.9 and beta = 0.999).
	assert.InEpsilon(t, 0.0002, out[1].Float32s()[0], 1e-5)
	assert.InEpsilon(t, 4e-9, out[2].Float32s()[0], 1e-4)
	assert.InEpsilon(t, -3.16227766, out[0].Float32s()[0], 1e-4)
}

// Adagrad with T > 0, where decay_factor shrinks the learning rate.
func TestAdagradDecay(t *testing.T) {
	n := optimNode("Adagrad", 5, 2, floatAttr("decay_factor", 0.1), floatAttr("epsilon", 1e-5), floatAttr("norm_coefficient", 0.001))
	out, err := runOptim(t, n, rate(0.1), count(2), f32(1), f32(-1), f32(2))
	require.NoError(t, err)
	assert.InDelta(t, 1.0480801536930169, out[0].Float32s()[0], 1e-6)
	assert.InDelta(t, 2.998001, out[1].Float32s()[0], 1e-6)
}

// Momentum with T > 0 uses beta (T = 0 replaces it by 1), both modes.
func TestMomentumAfterFirstStep(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		xWant []float64
	}{
		{"standard", []float64{1.047888, 2.482972}},
		{"nesterov", []float64{1.1493736, 2.7485434}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			n := optimNode("Momentum", 5, 2, momentumAttrs(tc.mode)...)
			out, err := runOptim(t, n, rate(0.1), count(1), f64(1.2, 2.8), f64(-0.94, -2.5), f64(1.7, 3.6))
			require.NoError(t, err)
			assert.InDeltaSlice(t, tc.xWant, out[0].Float64s(), 1e-6)
			assert.InDeltaSlice(t, []float64{1.52112, 3.17028}, out[1].Float64s(), 1e-6)
		})
	}
}

// Operands broadcast numpy-style: a scalar gradient applies to every element.
func TestBroadcastGradient(t *testing.T) {
	n := optimNode("Momentum", 5, 2, floatAttr("alpha", 0.5), floatAttr("beta", 1), floatAttr("norm_coefficient", 0), stringAttr("mode", "standard"))
	g := graph.FromFloat32([]float32{2})
	out, err := runOptim(t, n, rate(0.5), count(1), f32(1, 2, 3), g, f32(2, 4, 6))
	require.NoError(t, err)
	assert.Equal(t, []int{3}, out[0].Shape)
	assert.InDeltaSlice(t, []float32{3, 4, 5}, out[1].Float32s(), 1e-6)
	assert.InDeltaSlice(t, []float32{-0.5, 0, 0.5}, out[0].Float32s(), 1e-6)
}

// Several tensors of different dtypes are optimized independently, and the
// inputs are not modified.
func TestMultipleTensorsMixedDTypes(t *testing.T) {
	n := optimNode("Adagrad", 8, 4, floatAttr("epsilon", 0))
	x1, x2 := f32(1), f64(1, 2)
	out, err := runOptim(t, n, rate(1), count(0), x1, x2, f32(3), f64(4, -4), f32(0), f64(0, 0))
	require.NoError(t, err)
	require.Len(t, out, 4)
	assert.InDeltaSlice(t, []float32{0}, out[0].Float32s(), 1e-6)
	assert.InDeltaSlice(t, []float64{0, 3}, out[1].Float64s(), 1e-12)
	assert.InDeltaSlice(t, []float32{9}, out[2].Float32s(), 1e-6)
	assert.InDeltaSlice(t, []float64{16, 16}, out[3].Float64s(), 1e-12)
	assert.Equal(t, []float32{1}, x1.Float32s())
	assert.Equal(t, []float64{1, 2}, x2.Float64s())
}

func TestOptimizerErrors(t *testing.T) {
	good := momentumAttrs("standard")
	for _, tc := range []struct {
		name string
		node *graph.Node
		in   []*graph.Tensor
		msg  string
	}{
		{"bad mode", optimNode("Momentum", 5, 2, momentumAttrs("heavy-ball")...),
			[]*graph.Tensor{rate(1), count(0), f32(1), f32(1), f32(1)}, "mode"},
		{"missing required attribute", optimNode("Momentum", 5, 2, good[:3]...),
			[]*graph.Tensor{rate(1), count(0), f32(1), f32(1), f32(1)}, `"mode"`},
		{"input count not a multiple of the group", optimNode("Adam", 5, 3),
			[]*graph.Tensor{rate(1), count(0), f32(1), f32(1), f32(1)}, "groups"},
		{"no optimized tensor", optimNode("Adagrad", 2, 1),
			[]*graph.Tensor{rate(1), count(0)}, "groups"},
		{"too many outputs", optimNode("Adagrad", 5, 3),
			[]*graph.Tensor{rate(1), count(0), f32(1), f32(1), f32(1)}, "outputs"},
		{"non-scalar R", optimNode("Adagrad", 5, 2),
			[]*graph.Tensor{f32(1, 2), count(0), f32(1), f32(1), f32(1)}, "scalar"},
		{"float T", optimNode("Adagrad", 5, 2),
			[]*graph.Tensor{rate(1), rate(0), f32(1), f32(1), f32(1)}, "integer"},
		{"dtype mismatch", optimNode("Adagrad", 5, 2),
			[]*graph.Tensor{rate(1), count(0), f32(1), f64(1), f32(1)}, "dtype"},
		{"integer tensor", optimNode("Adagrad", 5, 2),
			[]*graph.Tensor{rate(1), count(0), count(1), count(1), count(1)}, "float or double"},
		{"shapes do not broadcast", optimNode("Adagrad", 5, 2),
			[]*graph.Tensor{rate(1), count(0), f32(1, 2), f32(1, 2, 3), f32(1, 2)}, "broadcast"},
		{"data shorter than shape", optimNode("Adagrad", 5, 2),
			[]*graph.Tensor{rate(1), count(0), graph.FromFloat32([]float32{1}, 2), f32(1, 2), f32(1, 2)}, "data"},
		{"missing gradient", optimNode("Adagrad", 5, 2),
			[]*graph.Tensor{rate(1), count(0), f32(1), nil, f32(1)}, "gradient"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runOptim(t, tc.node, tc.in...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.msg)
			assert.Contains(t, err.Error(), `node "opt"`)
		})
	}
}
