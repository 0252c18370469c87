package backendtest

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// fusedBatchNormRelu: a training-mode BatchNormalization whose output
// only a Relu reads (and, as Relu's gradient mask, a Greater) runs as one
// BatchNormRelu node, and BatchNormalizationGrad of the Relu's gradient as
// one BatchNormReluGrad node; outputs, running statistics and gradients
// are the unfused graph's bit for bit. The spatial size (35) puts every
// row through both the vector loops and their scalar tails. A chain whose
// normalised output is also a graph output keeps its forward unfused, but
// its gradient pair still fuses.
func (kc checker) fusedBatchNormRelu(t *testing.T) {
	const n, c, h, w = 3, 4, 5, 7
	g := graph.NewGraph("bnrelu")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: F32Type(n, c, h, w)}, {Name: "dr", Type: F32Type(n, c, h, w)}}
	rng := rand.New(rand.NewPCG(51, 52))
	param := func(base, spread float64) *graph.Tensor {
		v := make([]float32, c)
		for i := range v {
			v[i] = float32(base + spread*rng.NormFloat64())
		}
		return graph.FromFloat32(v, c)
	}
	g.Initializers = map[string]*graph.Tensor{
		"scale": param(1, 0.5), "bias": param(0.2, 0.3), "mean": param(0, 0.1), "var": param(1, 0.1),
		"z": graph.FromFloat32([]float32{0}),
	}
	bnAttrs := func() map[string]*graph.Attr {
		return map[string]*graph.Attr{
			"training_mode": {Name: "training_mode", Type: graph.AttrInt, I: 1},
			"momentum":      {Name: "momentum", Type: graph.AttrFloat, F: 0.9},
			"epsilon":       {Name: "epsilon", Type: graph.AttrFloat, F: 1e-5},
		}
	}
	gradAttrs := func() map[string]*graph.Attr {
		return map[string]*graph.Attr{
			"training_mode": {Name: "training_mode", Type: graph.AttrInt, I: 1},
			"epsilon":       {Name: "epsilon", Type: graph.AttrFloat, F: 1e-5},
		}
	}
	chain := func(p string) []*graph.Node {
		return []*graph.Node{
			{Name: p + "bn", OpType: "BatchNormalization", Inputs: []string{"x", "scale", "bias", "mean", "var"},
				Outputs: []string{p + "y", p + "rm", p + "rv"}, Attrs: bnAttrs()},
			{Name: p + "relu", OpType: "Relu", Inputs: []string{p + "y"}, Outputs: []string{p + "r"}},
			// Relu's gradient as its rule emits it, masked on the Relu's input.
			{Name: p + "gt", OpType: "Greater", Inputs: []string{p + "y", "z"}, Outputs: []string{p + "mask"}},
			{Name: p + "where", OpType: "Where", Inputs: []string{p + "mask", "dr", "z"}, Outputs: []string{p + "dy"}},
			{Name: p + "bngrad", OpType: "BatchNormalizationGrad", Domain: graph.InternalDomain,
				Inputs:  []string{p + "dy", "x", "scale", "mean", "var"},
				Outputs: []string{p + "dx", p + "dscale", p + "dbias"}, Attrs: gradAttrs()},
		}
	}
	g.Nodes = append(append(chain("a/"), chain("b/")...), chain("c/")...)
	// Chain a fuses fully; b's normalised output is a graph output, so its
	// forward stays, while its gradient pair fuses; c's masked gradient is
	// an output too, so nothing of it fuses: the reference.
	names := []string{"r", "rm", "rv", "dx", "dscale", "dbias"}
	for _, name := range append(names, "b/y", "c/y", "c/dy") {
		if !strings.Contains(name, "/") {
			for _, p := range []string{"a/", "b/", "c/"} {
				g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: p + name})
			}
			continue
		}
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: name})
	}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
	inputs := NormalInputs(g, rng, 1)
	exe, err := kc.open(t).Compile(m, backend.CompileOptions{})
	require.NoError(t, err)
	ops := map[string]int{}
	for _, st := range kc.compiledNodes(t, exe) {
		ops[st.OpType]++
	}
	if kc.fuses(false, graph.BatchNormRelu, graph.BatchNormReluGrad, graph.ReluGrad) {
		assert.Equal(t, 1, ops[graph.BatchNormRelu], "chain a's forward")
		assert.Equal(t, 2, ops[graph.BatchNormReluGrad], "the gradients of chains a and b")
		assert.Equal(t, 2, ops["BatchNormalization"], "chains b and c")
		assert.Equal(t, 1, ops["BatchNormalizationGrad"], "chain c")
	} else {
		assert.Zero(t, ops[graph.BatchNormRelu]+ops[graph.BatchNormReluGrad], "fused ops the backend does not declare")
	}
	var out map[string]*graph.Tensor
	for i := 0; i < 2; i++ { // the recording run, then the arena's
		out, err = exe.Run(context.Background(), inputs)
		require.NoError(t, err)
	}
	for _, name := range names {
		for _, p := range []string{"a/", "b/"} {
			require.Contains(t, out, p+name)
			assert.True(t, sameBits(out["c/"+name], out[p+name]), "%s%s: fused and unfused differ", p, name)
		}
	}
	// The Relu did something: some outputs are zero, some are not.
	zeros := 0
	for _, v := range out["a/r"].Float32s() {
		if v == 0 {
			zeros++
		}
	}
	assert.Greater(t, zeros, n*c*h*w/10)
	assert.Less(t, zeros, n*c*h*w*9/10)
}
