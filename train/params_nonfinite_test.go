package train_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/train"
)

// An initializer holding -inf (a causal attention mask that PyTorch keeps
// as a buffer and the export writes as an initializer) is a constant, not
// a parameter: it gets no gradient and a training step leaves it as it is.
// (Trained, its zeros moved with the scores' gradient: bench/unseen.py's
// causal_transformer was 6.7e-6 from PyTorch float64 after one step,
// where PyTorch float32 is 1.2e-7.)
func TestNonFiniteInitializerIsNotAParameter(t *testing.T) {
	inf := float32(math.Inf(-1))
	g := graph.NewGraph("masked")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true,
		Shape: []graph.Dim{{Param: "batch"}, {Value: 3, Known: true}}}}}
	g.Initializers["w"] = graph.FromFloat32([]float32{0.5, -0.25, 1, 0.75, 0.1, -0.4, 0.3, 0.2, -0.6}, 3, 3)
	g.Initializers["mask"] = graph.FromFloat32([]float32{0, inf, 0}, 3)
	g.Nodes = []*graph.Node{
		{Name: "mm", OpType: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"h"}},
		{Name: "add", OpType: "Add", Inputs: []string{"h", "mask"}, Outputs: []string{"y"}},
	}
	g.Outputs = []*graph.ValueInfo{{Name: "y"}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
	p, err := train.Build(m, train.ProgramConfig{Loss: train.LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}})
	require.NoError(t, err)
	var names []string
	for _, prm := range p.Params {
		names = append(names, prm.Name)
	}
	assert.Equal(t, []string{"w"}, names, "the mask is not trained")
	x := graph.FromFloat32([]float32{1, 2, 3, -1, 0.5, 2}, 2, 3)
	res, err := p.ForwardBackward(context.Background(), map[string]*graph.Tensor{"x": x}, graph.FromInt64([]int64{0, 2}, 2), 1)
	require.NoError(t, err)
	require.Len(t, res.Grads, 1)
	assert.False(t, math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0), "the loss %v is finite", res.Loss)
	assert.Equal(t, []float32{0, inf, 0}, g.Initializers["mask"].Float32s())
}
