package cpu

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// fakeComm is a communicator of world 2 whose "other process" holds the
// values other: a reduction adds other (element by element over the
// concatenation of the buffers) and, for mean, halves. It records the
// buffers it was given and the order of its calls.
type fakeComm struct {
	other   []float32
	calls   []string
	seen    [][]float32
	started map[int][][]float32
	failAt  int // bucket whose Wait fails (-1: none)
}

func (c *fakeComm) WorldSize() int { return 2 }
func (c *fakeComm) Rank() int      { return 0 }

func (c *fakeComm) AllReduceSum(_ context.Context, x []float32) error {
	c.calls = append(c.calls, "sum")
	return nil
}

func (c *fakeComm) reduce(bufs [][]float32, op backend.ReduceOp) {
	k := 0
	for _, b := range bufs {
		c.seen = append(c.seen, b)
		for i := range b {
			b[i] += c.other[k]
			if op == backend.ReduceMean {
				b[i] /= 2
			}
			k++
		}
	}
}

func (c *fakeComm) AllReduce(_ context.Context, bufs [][]float32, op backend.ReduceOp, o backend.CommOptions) error {
	c.calls = append(c.calls, fmt.Sprintf("all_reduce:%v:%s", op, o.Compress))
	c.reduce(bufs, op)
	return nil
}

func (c *fakeComm) StartAllReduce(_ context.Context, bucket int, bufs [][]float32, op backend.ReduceOp, o backend.CommOptions) error {
	c.calls = append(c.calls, fmt.Sprintf("start:%d:%v", bucket, op))
	if c.started == nil {
		c.started = map[int][][]float32{}
	}
	c.started[bucket] = bufs
	c.reduce(bufs, op) // "travels" at once; the kernel must not care when
	return nil
}

func (c *fakeComm) Wait(_ context.Context, bucket int) error {
	c.calls = append(c.calls, fmt.Sprintf("wait:%d", bucket))
	if bucket == c.failAt {
		return errors.New("link down")
	}
	if _, ok := c.started[bucket]; !ok {
		return fmt.Errorf("bucket %d not started", bucket)
	}
	return nil
}

// bucketModel: two gradient sums S1 [2] and S2 [1] (state), gradients G1,
// G2 fed; AccumulateGrad → AllReduceStart → AllReduceWait over both, the
// waits' outputs updating the sums. With alsoRead a node reads the
// accumulated value, which breaks the in-place chain.
func bucketModel(alsoRead bool) *graph.Model {
	scalarBool := &graph.Type{Kind: graph.KindTensor, DType: graph.Bool, HasShape: true, Shape: []graph.Dim{}}
	g := &graph.Graph{Name: "bucket", Initializers: map[string]*graph.Tensor{}}
	g.Inputs = []*graph.ValueInfo{{Name: "fresh", Type: scalarBool}, {Name: "sync", Type: scalarBool},
		{Name: "S1", Type: stateF32Type(2)}, {Name: "S2", Type: stateF32Type(1)}, {Name: "G1", Type: stateF32Type(2)}, {Name: "G2", Type: stateF32Type(1)}}
	two := map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 2), "bucket": graph.IntAttr("bucket", 3)}
	start := map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 2), "bucket": graph.IntAttr("bucket", 3), "reduction": graph.StringAttr("reduction", "mean")}
	g.Nodes = []*graph.Node{
		{Name: "acc", OpType: graph.AccumulateGradOp, Domain: graph.InternalDomain, Inputs: []string{"fresh", "S1", "S2", "G1", "G2"}, Outputs: []string{"A1", "A2"}},
		{Name: "start", OpType: graph.AllReduceStartOp, Domain: graph.InternalDomain, Inputs: []string{"sync", "A1", "A2"}, Outputs: []string{"F1", "F2"}, Attrs: start},
		{Name: "between", OpType: "Neg", Inputs: []string{"G1"}, Outputs: []string{"Y"}},
		{Name: "wait", OpType: graph.AllReduceWaitOp, Domain: graph.InternalDomain, Inputs: []string{"sync", "F1", "F2"}, Outputs: []string{"S1_new", "S2_new"}, Attrs: two},
	}
	g.Outputs = []*graph.ValueInfo{{Name: "Y"}, {Name: "S1_new"}, {Name: "S2_new"}}
	if alsoRead {
		g.Nodes = append(g.Nodes, &graph.Node{Name: "peek", OpType: "Neg", Inputs: []string{"A1"}, Outputs: []string{"Z"}})
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: "Z"})
	}
	return &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g}
}

// TestBucketReducesStateInPlace: the AccumulateGrad → AllReduceStart →
// AllReduceWait chain hands the state buffers themselves to the
// communicator and copies nothing; sync false (a micro-batch inside a
// window) only accumulates; out of place (another node reads the
// accumulated value) the result is the same through copies.
func TestBucketReducesStateInPlace(t *testing.T) {
	for _, alsoRead := range []bool{false, true} {
		t.Run(fmt.Sprintf("alsoRead=%v", alsoRead), func(t *testing.T) {
			be := &Backend{}
			s1, s2 := graph.FromFloat32([]float32{0, 0}, 2), graph.FromFloat32([]float32{0}, 1)
			exe, err := be.Compile(bucketModel(alsoRead), backend.CompileOptions{State: []backend.StateSpec{
				{Name: "S1", Init: s1, UpdatedBy: "S1_new"}, {Name: "S2", Init: s2, UpdatedBy: "S2_new"}}})
			require.NoError(t, err)
			comm := &fakeComm{other: []float32{10, 20, 30}, failAt: -1}
			ctx := backend.WithCommunicator(context.Background(), comm)
			flag := func(b bool) *graph.Tensor { return &graph.Tensor{DType: graph.Bool, Data: []bool{b}} }
			run := func(fresh, sync bool, g1, g2 []float32) {
				_, err := exe.Run(ctx, map[string]*graph.Tensor{"fresh": flag(fresh), "sync": flag(sync),
					"G1": graph.FromFloat32(g1, 2), "G2": graph.FromFloat32(g2, 1)})
				require.NoError(t, err)
			}
			run(true, false, []float32{1, 2}, []float32{3})
			assert.Empty(t, comm.calls, "no exchange inside the window")
			run(false, true, []float32{1, 2}, []float32{3})
			assert.Equal(t, []string{"start:3:mean", "wait:3"}, comm.calls)
			// (2+10)/2, (4+20)/2, (6+30)/2: the sums averaged with the other process's.
			assert.Equal(t, []float32{6, 12}, s1.Float32s())
			assert.Equal(t, []float32{18}, s2.Float32s())
			st := exe.(backend.Stateful).StateTraffic()
			if alsoRead {
				assert.Positive(t, st.UpdateCopyBytes, "out of place, the result is copied into the state")
				assert.NotSame(t, &s1.Float32s()[0], &comm.seen[0][0])
			} else {
				assert.Equal(t, backend.StateTraffic{}, st, "in place: nothing copied")
				assert.Same(t, &s1.Float32s()[0], &comm.seen[0][0], "the communicator reduced the state buffer itself")
				assert.Same(t, &s2.Float32s()[0], &comm.seen[1][0])
			}
		})
	}
}

// TestCollectiveOpsErrors: a failed wait names the node; a malformed node
// is refused with what is wrong.
func TestCollectiveOpsErrors(t *testing.T) {
	be := &Backend{}
	s1, s2 := graph.FromFloat32([]float32{0, 0}, 2), graph.FromFloat32([]float32{0}, 1)
	exe, err := be.Compile(bucketModel(false), backend.CompileOptions{State: []backend.StateSpec{
		{Name: "S1", Init: s1, UpdatedBy: "S1_new"}, {Name: "S2", Init: s2, UpdatedBy: "S2_new"}}})
	require.NoError(t, err)
	comm := &fakeComm{other: []float32{0, 0, 0}, failAt: 3}
	flag := &graph.Tensor{DType: graph.Bool, Data: []bool{true}}
	_, err = exe.Run(backend.WithCommunicator(context.Background(), comm), map[string]*graph.Tensor{"fresh": flag, "sync": flag,
		"G1": graph.FromFloat32([]float32{1, 2}, 2), "G2": graph.FromFloat32([]float32{3}, 1)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "wait")
	assert.Contains(t, err.Error(), "link down")

	m := bucketModel(false)
	m.Graph.Nodes[1].Attrs["reduction"] = graph.StringAttr("reduction", "max")
	_, err = be.Compile(m, backend.CompileOptions{State: []backend.StateSpec{
		{Name: "S1", Init: s1, UpdatedBy: "S1_new"}, {Name: "S2", Init: s2, UpdatedBy: "S2_new"}}})
	if err == nil {
		exe, _ := be.Compile(m, backend.CompileOptions{})
		_, err = exe.Run(context.Background(), map[string]*graph.Tensor{"fresh": flag, "sync": flag, "S1": s1, "S2": s2,
			"G1": graph.FromFloat32([]float32{1, 2}, 2), "G2": graph.FromFloat32([]float32{3}, 1)})
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), `reduction "max"`)
}

// TestCheckCollectivesPairing: a Start's in-flight outputs may be read by
// the Wait of its bucket only.
func TestCheckCollectivesPairing(t *testing.T) {
	require.NoError(t, graph.CheckCollectives(bucketModel(false).Graph))
	m := bucketModel(false)
	m.Graph.Nodes[2].Inputs = []string{"F1"} // a node reads an in-flight value
	err := graph.CheckCollectives(m.Graph)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `in-flight output "F1"`)
	m = bucketModel(false)
	m.Graph.Nodes[3].Attrs["bucket"] = graph.IntAttr("bucket", 4)
	err = graph.CheckCollectives(m.Graph)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not by the AllReduceWait of bucket 3")
}

// ReduceScatter of the fake: the other process's x is c.other (as long as
// x); this process is rank 1 of 2.
func (c *fakeComm) ReduceScatter(_ context.Context, x []float32, op backend.ReduceOp, _ backend.CommOptions) ([]float32, error) {
	c.calls = append(c.calls, fmt.Sprintf("reduce_scatter:%d", len(x)))
	for i := range x {
		x[i] += c.other[i]
		if op == backend.ReduceMean {
			x[i] /= 2
		}
	}
	return x[len(x)/2:], nil
}

// AllGather of the fake: rank 0's block is c.other's first len(mine).
func (c *fakeComm) AllGather(_ context.Context, mine, all []float32) error {
	c.calls = append(c.calls, fmt.Sprintf("all_gather:%d", len(mine)))
	copy(all, c.other[:len(mine)])
	copy(all[len(mine):], mine)
	return nil
}

// TestZeroOpsFlatSpace: ReduceScatter averages this rank's partition of
// tensors laid end to end (rank 1 of 2: Ψ = 5, P = 3, the last element of
// the partition past Ψ), in rounds of chunk 2, fresh replacing and
// otherwise adding; AllGather writes the other rank's partition into the
// tensors.
func TestZeroOpsFlatSpace(t *testing.T) {
	scalarBool := &graph.Type{Kind: graph.KindTensor, DType: graph.Bool, HasShape: true, Shape: []graph.Dim{}}
	attrs := func(n int) map[string]*graph.Attr {
		return map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", int64(n)), "world": graph.IntAttr("world", 2),
			"rank": graph.IntAttr("rank", 1), "chunk": graph.IntAttr("chunk", 2)}
	}
	g := &graph.Graph{Name: "zero", Initializers: map[string]*graph.Tensor{}}
	g.Inputs = []*graph.ValueInfo{{Name: "sync", Type: scalarBool}, {Name: "fresh", Type: scalarBool}, {Name: "P", Type: stateF32Type(3)},
		{Name: "A", Type: stateF32Type(2)}, {Name: "B", Type: stateF32Type(3)}}
	g.Nodes = []*graph.Node{{Name: "rs", OpType: graph.ReduceScatterOp, Domain: graph.InternalDomain,
		Inputs: []string{"sync", "fresh", "P", "A", "B"}, Outputs: []string{"P_new"}, Attrs: attrs(2)}}
	g.Outputs = []*graph.ValueInfo{{Name: "P_new"}}
	part := graph.Zeros(graph.Float32, 3)
	exe, err := (&Backend{}).Compile(&graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g},
		backend.CompileOptions{State: []backend.StateSpec{{Name: "P", Init: part, UpdatedBy: "P_new"}}})
	require.NoError(t, err)
	// Flat space A‖B = [1 2 | 3 4 5]; rank 1 owns elements 3..5 = [4 5 (pad)].
	// Round 0 (chunk 2): message [1 2 | 4 5]; round 1: [3 0 | 0 0].
	comm := &fakeComm{other: []float32{10, 20, 30, 40}}
	ctx := backend.WithCommunicator(context.Background(), comm)
	flag := func(b bool) *graph.Tensor { return &graph.Tensor{DType: graph.Bool, Data: []bool{b}} }
	feeds := func(fresh bool) map[string]*graph.Tensor {
		return map[string]*graph.Tensor{"sync": flag(true), "fresh": flag(fresh),
			"A": graph.FromFloat32([]float32{1, 2}, 2), "B": graph.FromFloat32([]float32{3, 4, 5}, 3)}
	}
	_, err = exe.Run(ctx, feeds(true))
	require.NoError(t, err)
	assert.Equal(t, []string{"reduce_scatter:4", "reduce_scatter:2"}, comm.calls, "two rounds: chunk 2, then the rest")
	// Round 0: block 1 = ([4 5] + [30 40]) / 2; round 1: ([0] + [20]) / 2.
	assert.Equal(t, []float32{17, 22.5, 10}, part.Float32s())
	_, err = exe.Run(ctx, feeds(false))
	require.NoError(t, err)
	assert.Equal(t, []float32{34, 45, 20}, part.Float32s(), "not fresh: added")
	assert.Equal(t, backend.StateTraffic{}, exe.(backend.Stateful).StateTraffic(), "in place")

	// AllGather over the same layout: this rank's partition stays, rank
	// 0's (the fake's "other") is written in.
	g2 := &graph.Graph{Name: "ag", Initializers: map[string]*graph.Tensor{}}
	g2.Inputs = []*graph.ValueInfo{{Name: "sync", Type: scalarBool}, {Name: "A", Type: stateF32Type(2)}, {Name: "B", Type: stateF32Type(3)}}
	g2.Nodes = []*graph.Node{{Name: "ag", OpType: graph.AllGatherOp, Domain: graph.InternalDomain,
		Inputs: []string{"sync", "A", "B"}, Outputs: []string{"A_new", "B_new"}, Attrs: attrs(2)}}
	g2.Outputs = []*graph.ValueInfo{{Name: "A_new"}, {Name: "B_new"}}
	a, b := graph.FromFloat32([]float32{1, 2}, 2), graph.FromFloat32([]float32{3, 4, 5}, 3)
	exe2, err := (&Backend{}).Compile(&graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g2},
		backend.CompileOptions{State: []backend.StateSpec{{Name: "A", Init: a, UpdatedBy: "A_new"}, {Name: "B", Init: b, UpdatedBy: "B_new"}}})
	require.NoError(t, err)
	comm = &fakeComm{other: []float32{-1, -2, -3, -4}}
	_, err = exe2.Run(backend.WithCommunicator(context.Background(), comm), map[string]*graph.Tensor{"sync": flag(true)})
	require.NoError(t, err)
	assert.Equal(t, []string{"all_gather:2", "all_gather:1"}, comm.calls)
	// Round 0 writes rank 0's [-1 -2] at elements 0..1, round 1 its [-1] at 2.
	assert.Equal(t, []float32{-1, -2}, a.Float32s())
	assert.Equal(t, []float32{-1, 4, 5}, b.Float32s())
}
