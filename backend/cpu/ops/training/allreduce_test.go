package training

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// addCollective stands for world-1 other processes that all hold other:
// the sum of x over the world is x + (world-1)·other.
type addCollective struct {
	world int
	other []float32
	calls int
	fail  error
}

func (c *addCollective) AllReduceSum(_ context.Context, x []float32) error {
	c.calls++
	if c.fail != nil {
		return c.fail
	}
	if len(x) != len(c.other) {
		return errors.New("length mismatch")
	}
	for i := range x {
		x[i] += float32(c.world-1) * c.other[i]
	}
	return nil
}

func (c *addCollective) WorldSize() int { return c.world }

func runAllReduce(t *testing.T, ctx context.Context, x *graph.Tensor) ([]*graph.Tensor, error) {
	t.Helper()
	spec, ok := kern.Lookup(graph.InternalDomain, graph.AllReduceSumOp, 17)
	require.True(t, ok, "no kernel for onnxtrain.AllReduceSum")
	n := &graph.Node{Name: "ar", OpType: graph.AllReduceSumOp, Domain: graph.InternalDomain, Inputs: []string{"x"}, Outputs: []string{"y"}}
	return spec.Fn(&kern.Context{Opset: 17, Ctx: ctx}, n, []*graph.Tensor{x})
}

func TestAllReduceSumSumsOverTheCollective(t *testing.T) {
	c := &addCollective{world: 3, other: []float32{1, 10, 100, 1000}}
	ctx := backend.WithCollective(context.Background(), c)
	x := graph.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)
	out, err := runAllReduce(t, ctx, x)
	require.NoError(t, err)
	assert.Equal(t, []int{2, 2}, out[0].Shape)
	assert.Equal(t, []float32{3, 22, 203, 2004}, out[0].Float32s())
	assert.Equal(t, []float32{1, 2, 3, 4}, x.Float32s(), "the input is left alone")
	assert.Equal(t, 1, c.calls)

	// float64 travels as float32 and comes back widened.
	out, err = runAllReduce(t, ctx, graph.FromFloat64([]float64{0.5, 1, 1.5, 2}, 4))
	require.NoError(t, err)
	assert.Equal(t, []float64{2.5, 21, 201.5, 2002}, out[0].Float64s())
}

func TestAllReduceSumOneProcessIsIdentity(t *testing.T) {
	x := graph.FromFloat32([]float32{1, -2, 3}, 3)
	for name, ctx := range map[string]context.Context{
		"no context":    nil,
		"no collective": context.Background(),
		"world of one":  backend.WithCollective(context.Background(), &addCollective{world: 1, fail: errors.New("must not be called")}),
	} {
		out, err := runAllReduce(t, ctx, x)
		require.NoError(t, err, name)
		assert.Equal(t, x.Float32s(), out[0].Float32s(), name)
	}
}

func TestAllReduceSumErrors(t *testing.T) {
	ctx := backend.WithCollective(context.Background(), &addCollective{world: 2, fail: errors.New("rank 1 was lost")})
	_, err := runAllReduce(t, ctx, graph.FromFloat32([]float32{1, 2}, 2))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rank 1 was lost")
	assert.Contains(t, err.Error(), `"ar"`, "the error names the node")

	_, err = runAllReduce(t, context.Background(), graph.FromInt64([]int64{1, 2}, 2))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "int64")
}
