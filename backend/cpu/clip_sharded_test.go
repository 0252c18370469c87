package cpu

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// pairComm is one side of an in-memory world of two processes: AllGather
// swaps blocks through channels. Its other methods are not used.
type pairComm struct {
	rank    int
	in, out chan []float32
	backend.Communicator
}

func (c *pairComm) WorldSize() int { return 2 }
func (c *pairComm) Rank() int      { return c.rank }
func (c *pairComm) AllGather(_ context.Context, mine, all []float32) error {
	m := len(mine)
	copy(all[c.rank*m:], mine)
	c.out <- append([]float32(nil), mine...)
	copy(all[(1-c.rank)*m:], <-c.in)
	return nil
}

// clipModel is a one-node program of op over gradients of the given
// sizes (fed inputs G0, G1, ...), with max_norm and the total norm.
func clipModel(op string, sizes []int, attrs ...*graph.Attr) *graph.Model {
	g := &graph.Graph{Name: "clip", Initializers: map[string]*graph.Tensor{},
		Inputs: []*graph.ValueInfo{{Name: "max_norm", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true, Shape: []graph.Dim{}}}}}
	n := &graph.Node{Name: "clip", OpType: op, Domain: graph.InternalDomain, Inputs: []string{"max_norm"}, Outputs: []string{"total"},
		Attrs: map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", int64(len(sizes)))}}
	for _, a := range attrs {
		n.Attrs[a.Name] = a
	}
	g.Outputs = []*graph.ValueInfo{{Name: "total"}}
	for i, s := range sizes {
		name := string(rune('A' + i))
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: stateF32Type(int64(s))})
		n.Inputs = append(n.Inputs, name)
		n.Outputs = append(n.Outputs, name+"'")
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: name + "'"})
	}
	g.Nodes = []*graph.Node{n}
	return &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g}
}

// TestClipGradNormShardedMatchesWhole: two processes holding slices of two
// tensors (rank 0: all of P and Q[0:1], rank 1: Q[1:3]) get, from
// ClipGradNormSharded, the total norm and the scaled slices that
// ClipGradNorm gives over the whole tensors (values whose squares add
// exactly in any order, so that the orders may differ).
func TestClipGradNormShardedMatchesWhole(t *testing.T) {
	p, q := []float32{1, 2, 3, 4, 5}, []float32{1, 2, 2}
	ctx := context.Background()
	maxNorm := graph.Scalar(graph.Float32, 1)

	whole, err := (&Backend{}).Compile(clipModel(graph.ClipGradNormOp, []int{5, 3}), backend.CompileOptions{})
	require.NoError(t, err)
	want, err := whole.Run(ctx, map[string]*graph.Tensor{"max_norm": maxNorm, "A": graph.FromFloat32(append([]float32(nil), p...), 5), "B": graph.FromFloat32(append([]float32(nil), q...), 3)})
	require.NoError(t, err)
	require.Greater(t, want["total"].Float32s()[0], float32(1), "the norm is above max_norm: the slices are scaled")

	a, b := make(chan []float32, 1), make(chan []float32, 1)
	comms := []*pairComm{{rank: 0, in: a, out: b}, {rank: 1, in: b, out: a}}
	type rankCase struct {
		sizes []int
		of    []int64
		feeds map[string]*graph.Tensor
	}
	ranks := []rankCase{
		{[]int{5, 1}, []int64{0, 1}, map[string]*graph.Tensor{"A": graph.FromFloat32(append([]float32(nil), p...), 5), "B": graph.FromFloat32([]float32{q[0]}, 1)}},
		{[]int{2}, []int64{1}, map[string]*graph.Tensor{"A": graph.FromFloat32([]float32{q[1], q[2]}, 2)}},
	}
	outs := make([]map[string]*graph.Tensor, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, rc := range ranks {
		exe, err := (&Backend{}).Compile(clipModel(graph.ClipGradNormShardedOp, rc.sizes, graph.IntAttr("whole", 2), graph.IntsAttr("slice_of", rc.of...)), backend.CompileOptions{})
		require.NoError(t, err)
		rc.feeds["max_norm"] = maxNorm
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[r], errs[r] = exe.Run(backend.WithCommunicator(ctx, comms[r]), rc.feeds)
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	for r := range 2 {
		assert.Equal(t, want["total"].Float32s(), outs[r]["total"].Float32s(), "rank %d: the norm of the whole tensors", r)
	}
	assert.Equal(t, want["A'"].Float32s(), outs[0]["A'"].Float32s(), "rank 0: P scaled")
	assert.Equal(t, want["B'"].Float32s()[:1], outs[0]["B'"].Float32s(), "rank 0: Q[0:1] scaled")
	assert.Equal(t, want["B'"].Float32s()[1:], outs[1]["A'"].Float32s(), "rank 1: Q[1:3] scaled")

	// Without a communicator the sums are this process's own.
	one, err := (&Backend{}).Compile(clipModel(graph.ClipGradNormShardedOp, []int{5, 3}, graph.IntAttr("whole", 2), graph.IntsAttr("slice_of", 0, 1)), backend.CompileOptions{})
	require.NoError(t, err)
	got, err := one.Run(ctx, map[string]*graph.Tensor{"max_norm": maxNorm, "A": graph.FromFloat32(append([]float32(nil), p...), 5), "B": graph.FromFloat32(append([]float32(nil), q...), 3)})
	require.NoError(t, err)
	assert.Equal(t, want["total"].Float32s(), got["total"].Float32s())

	// Bad layouts are errors naming the attribute.
	bad, err := (&Backend{}).Compile(clipModel(graph.ClipGradNormShardedOp, []int{5, 3}, graph.IntAttr("whole", 2), graph.IntsAttr("slice_of", 1, 0)), backend.CompileOptions{})
	if err == nil {
		_, err = bad.Run(ctx, map[string]*graph.Tensor{"max_norm": maxNorm, "A": graph.Zeros(graph.Float32, 5), "B": graph.Zeros(graph.Float32, 3)})
	}
	assert.ErrorContains(t, err, "slice_of[1] = 0")
}
