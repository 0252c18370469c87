package cpu_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/backendtest"
	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
)

// TestSliceGradSumBecomesConcat: the gradient of a value cut into slices
// along its last axis (attention's packed q, k, v), summed SliceGrads in
// any order, runs as one Concat (the specialised plan has no SliceGrad and
// no Add left) and equals the definition: each slice's gradient in its
// columns. Slices that overlap are left as they are and still sum.
func TestSliceGradSumBecomesConcat(t *testing.T) {
	i64 := func(v ...int64) *graph.Tensor { return graph.FromInt64(v, len(v)) }
	build := func(cuts [3][2]int64) (*graph.Model, map[string]*graph.Tensor) {
		g := graph.NewGraph("slicegrad")
		g.Inputs = []*graph.ValueInfo{{Name: "x", Type: backendtest.F32Type(3, 7)}}
		g.Initializers = map[string]*graph.Tensor{"axes": i64(-1)}
		rng := rand.New(rand.NewPCG(3, 4))
		feeds := map[string]*graph.Tensor{"x": graph.Zeros(graph.Float32, 3, 7)}
		leaf := make([]string, 3)
		for i, c := range cuts {
			d := "d" + string(rune('0'+i))
			end := c[1]
			width := min(end, 7) - c[0]
			g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: d, Type: backendtest.F32Type(3, width)})
			v := graph.Zeros(graph.Float32, 3, int(width))
			for j := range v.Float32s() {
				v.Float32s()[j] = float32(rng.NormFloat64())
			}
			feeds[d] = v
			g.Initializers["s"+d], g.Initializers["e"+d] = i64(c[0]), i64(end)
			leaf[i] = "g" + d
			g.Nodes = append(g.Nodes, &graph.Node{Name: "sg" + d, OpType: "SliceGrad", Domain: graph.InternalDomain,
				Inputs: []string{d, "x", "s" + d, "e" + d, "axes"}, Outputs: []string{leaf[i]}})
		}
		g.Nodes = append(g.Nodes,
			&graph.Node{Name: "add1", OpType: "Add", Inputs: []string{leaf[1], leaf[0]}, Outputs: []string{"s01"}},
			&graph.Node{Name: "add2", OpType: "Add", Inputs: []string{"s01", leaf[2]}, Outputs: []string{"dx"}})
		g.Outputs = []*graph.ValueInfo{{Name: "dx"}}
		return &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g}, feeds
	}
	run := func(m *graph.Model, feeds map[string]*graph.Tensor) (map[string]int, []float32) {
		exe, err := (&cpu.Backend{}).Compile(m, backend.CompileOptions{})
		require.NoError(t, err)
		out, err := exe.Run(context.Background(), feeds)
		require.NoError(t, err)
		ops := map[string]int{}
		for _, n := range exe.(backend.PlanInspector).LastRunNodes() {
			ops[n.OpType]++
		}
		return ops, out["dx"].Float32s()
	}
	// want sums every slice's gradient into its columns (SliceGrad's
	// definition, zeros elsewhere).
	want := func(cuts [3][2]int64, feeds map[string]*graph.Tensor) []float32 {
		w := make([]float32, 3*7)
		for i, c := range cuts {
			d := feeds["d"+string(rune('0'+i))]
			width := d.Shape[1]
			for r := 0; r < 3; r++ {
				for j := 0; j < width; j++ {
					w[r*7+int(c[0])+j] += d.Float32s()[r*width+j]
				}
			}
		}
		return w
	}

	tiled := [3][2]int64{{2, 5}, {0, 2}, {5, 1 << 62}} // out of order; the last end past the axis
	m, feeds := build(tiled)
	ops, got := run(m, feeds)
	assert.Equal(t, map[string]int{"Concat": 1}, ops)
	assert.Equal(t, want(tiled, feeds), got)

	overlapping := [3][2]int64{{0, 3}, {2, 5}, {5, 7}}
	m, feeds = build(overlapping)
	ops, got = run(m, feeds)
	assert.Equal(t, 3, ops["SliceGrad"], "overlapping slices are not a Concat")
	assert.Equal(t, want(overlapping, feeds), got)

	gap := [3][2]int64{{0, 2}, {3, 5}, {5, 7}}
	m, feeds = build(gap)
	ops, got = run(m, feeds)
	assert.Equal(t, 3, ops["SliceGrad"], "slices with a gap are not a Concat")
	assert.Equal(t, want(gap, feeds), got)
}
