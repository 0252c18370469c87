package cuda

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
)

func tt(d graph.DType, dims ...int) *graph.Type {
	t := &graph.Type{Kind: graph.KindTensor, DType: d, HasShape: true, Shape: []graph.Dim{}}
	for _, v := range dims {
		t.Shape = append(t.Shape, graph.Dim{Value: int64(v), Known: true})
	}
	return t
}

// planModel plans m for inputs whose symbolic dims are batch.
func planModel(t *testing.T, m *graph.Model, batch int, state map[string]*Buffer, primitivesOnly bool) *Plan {
	t.Helper()
	g, err := prepareGraph(m)
	require.NoError(t, err)
	shapes := batchShapes(g, batch)
	for name, b := range state {
		shapes[name] = b.Shape
	}
	sg, types, err := specialise(g, m.Opset(), shapes, primitivesOnly)
	require.NoError(t, err)
	p, err := buildPlan(sg, m.Opset(), types, state, !primitivesOnly)
	require.NoError(t, err)
	return p
}

// batchShapes gives g's fed inputs their declared shapes with every
// symbolic dim set to batch.
func batchShapes(g *graph.Graph, batch int) map[string][]int {
	shapes := map[string][]int{}
	for _, in := range g.Inputs {
		if _, init := g.Initializers[in.Name]; init {
			continue
		}
		s := []int{}
		for _, d := range in.Type.Shape {
			if d.Known {
				s = append(s, int(d.Value))
			} else {
				s = append(s, batch)
			}
		}
		shapes[in.Name] = s
	}
	return shapes
}

// lackingLowering names an op of g with neither a CUDA kernel nor a
// lowering ("" when there is none).
func lackingLowering(g *graph.Graph) string {
	for _, n := range g.Nodes {
		if !hasKernel(n, false) && !graph.HasLowering(n.OpType) && !graph.HasDomainLowering(n.Domain, n.OpType) {
			return n.OpType
		}
	}
	return ""
}

// checkArena asserts that no two arena buffers whose lifetimes overlap
// share bytes, and that every buffer fits the arena.
func checkArena(t *testing.T, p *Plan) {
	t.Helper()
	for i, a := range p.arena {
		require.LessOrEqual(t, a.Offset+a.Bytes, p.ArenaBytes, a.Name)
		assert.Zero(t, a.Offset%arenaAlign, a.Name)
		for _, b := range p.arena[i+1:] {
			if a.first <= b.last && b.first <= a.last && a.Bytes > 0 && b.Bytes > 0 {
				disjoint := a.Offset+a.Bytes <= b.Offset || b.Offset+b.Bytes <= a.Offset
				assert.True(t, disjoint, "%s [%d,%d] at %d+%d and %s [%d,%d] at %d+%d overlap", a.Name, a.first, a.last, a.Offset, a.Bytes, b.Name, b.first, b.last, b.Offset, b.Bytes)
			}
		}
	}
}

// TestPlanCoversFixtures plans every fixture model's training-mode export
// (forward with BatchNorm and Dropout in training form) and inference
// export: every node becomes kernels, GEMMs or copies with arguments that
// match the kernels' signatures, and the arena is a valid, shared
// placement.
func TestPlanCoversFixtures(t *testing.T) {
	files, err := filepath.Glob("../../models/*/*.onnx")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			m, err := importer.Load(f)
			require.NoError(t, err)
			if op := lackingLowering(m.Graph); op != "" {
				// An op with neither a CUDA kernel nor a lowering yet
				// (recurrent ops, Resize): planning must say so.
				g, err := prepareGraph(m)
				require.NoError(t, err)
				_, _, err = specialise(g, m.Opset(), batchShapes(g, 2), false)
				require.ErrorIs(t, err, graph.ErrUnsupportedOp)
				assert.Contains(t, err.Error(), op)
				t.Logf("not planned: %v", err)
				return
			}
			for _, prim := range []bool{false, true} {
				p := planModel(t, m, 2, nil, prim)
				require.NotEmpty(t, p.Steps)
				checkArena(t, p)
				var total int64
				for _, b := range p.arena {
					total += alignUp(max(b.Bytes, 1), arenaAlign)
				}
				assert.LessOrEqual(t, p.ArenaBytes, total)
				assert.Len(t, p.Outputs, len(m.Graph.Outputs))
			}
		})
	}
}

func TestArenaSharesDeadBuffers(t *testing.T) {
	g := graph.NewGraph("chain")
	g.Inputs = []*graph.ValueInfo{{Name: "X", Type: tt(graph.Float32, 1024)}}
	g.Outputs = []*graph.ValueInfo{{Name: "Y", Type: tt(graph.Float32, 1024)}}
	g.Nodes = []*graph.Node{
		{Name: "a", OpType: "Exp", Inputs: []string{"X"}, Outputs: []string{"A"}},
		{Name: "b", OpType: "Exp", Inputs: []string{"A"}, Outputs: []string{"B"}},
		{Name: "c", OpType: "Exp", Inputs: []string{"B"}, Outputs: []string{"C"}},
		{Name: "y", OpType: "Exp", Inputs: []string{"C"}, Outputs: []string{"Y"}},
	}
	p := planModel(t, &graph.Model{Opsets: map[string]int64{"": 17}, Graph: g}, 1, nil, false)
	require.Len(t, p.Steps, 4)
	for _, s := range p.Steps {
		require.NotNil(t, s.Launch)
		assert.Equal(t, "unary_fp", s.Launch.Kernel)
		assert.Equal(t, int64(0), s.Launch.Args[3].I, "Exp is unary op 0")
		assert.Equal(t, [3]uint32{4, 1, 1}, s.Launch.Grid)
	}
	checkArena(t, p)
	// X and Y live through the run, A and C never overlap: four buffers'
	// worth of memory for five values.
	assert.Equal(t, int64(4*4096), p.ArenaBytes)
	a, c := p.values["A"], p.values["C"]
	assert.Equal(t, a.Offset, c.Offset, "C reuses A's memory")
}

func TestMatMulBecomesOneGemm(t *testing.T) {
	cases := []struct {
		a, b                 []int
		m, n, k, batch       int64
		strideA, strideB     int64
		stepsBefore, expands int
	}{
		{a: []int{2, 3, 4}, b: []int{4, 5}, m: 6, n: 5, k: 4, batch: 1},                                                // batch folded into M
		{a: []int{2, 3, 4}, b: []int{2, 4, 5}, m: 3, n: 5, k: 4, batch: 2, strideA: 12, strideB: 20},                   // batched
		{a: []int{3, 4}, b: []int{2, 4, 5}, m: 3, n: 5, k: 4, batch: 2, strideA: 0, strideB: 20},                       // A broadcast
		{a: []int{2, 1, 3, 4}, b: []int{1, 2, 4, 5}, m: 3, n: 5, k: 4, batch: 4, strideA: 12, strideB: 20, expands: 2}, // both expanded
		{a: []int{4}, b: []int{4, 5}, m: 1, n: 5, k: 4, batch: 1},                                                      // 1-D promoted
	}
	for _, c := range cases {
		pl := &planner{p: &Plan{values: map[string]*Buffer{}}, node: &graph.Node{Name: "mm", OpType: "MatMul"}}
		a := &Buffer{Name: "a", DType: graph.Float32, Shape: c.a}
		b := &Buffer{Name: "b", DType: graph.Float32, Shape: c.b}
		o := &Buffer{Name: "o", DType: graph.Float32}
		g, err := pl.planMatMul(a, b, o)
		require.NoError(t, err, "%v x %v", c.a, c.b)
		assert.Equal(t, []int64{c.m, c.n, c.k, c.batch, c.strideA, c.strideB}, []int64{g.M, g.N, g.K, g.Batch, g.StrideA, g.StrideB}, "%v x %v", c.a, c.b)
		assert.Len(t, pl.p.Steps, c.expands, "%v x %v", c.a, c.b)
		// Column-major call: B first, m and n swapped, leading dims the
		// row lengths.
		ta, tb, m, n, k, first, lda, _, second, ldb, _, ldc := g.columnMajor()
		assert.Equal(t, []int64{cublasOpN, cublasOpN, c.n, c.m, c.k, c.n, c.k, c.n}, []int64{int64(ta), int64(tb), m, n, k, lda, ldb, ldc})
		assert.NotSame(t, a, first.Buf)
		if c.expands == 0 {
			assert.Same(t, b, first.Buf)
			assert.Same(t, a, second.Buf)
		}
	}
	pl := &planner{p: &Plan{values: map[string]*Buffer{}}, node: &graph.Node{Name: "mm", OpType: "MatMul"}}
	_, err := pl.planMatMul(&Buffer{DType: graph.Float32, Shape: []int{2, 3}}, &Buffer{DType: graph.Float32, Shape: []int{4, 5}}, &Buffer{})
	assert.ErrorContains(t, err, "inner dimensions")
}

// TestAdamUpdatesStateInPlace: an optimizer step over state buffers that
// nothing else reads is one fused kernel per tensor writing the state
// itself, with no copies.
func TestAdamUpdatesStateInPlace(t *testing.T) {
	g := graph.NewGraph("adam")
	g.Inputs = []*graph.ValueInfo{
		{Name: "consts", Type: tt(graph.Float32, 5)}, {Name: "hyper", Type: tt(graph.Float32, 2, 5)},
		{Name: "w1", Type: tt(graph.Float32, 10, 3)}, {Name: "w2", Type: tt(graph.Float32, 7)},
		{Name: "g1", Type: tt(graph.Float32, 10, 3)}, {Name: "g2", Type: tt(graph.Float32, 7)},
		{Name: "m1", Type: tt(graph.Float32, 10, 3)}, {Name: "m2", Type: tt(graph.Float32, 7)},
		{Name: "v1", Type: tt(graph.Float32, 10, 3)}, {Name: "v2", Type: tt(graph.Float32, 7)},
	}
	outs := []string{"w1'", "w2'", "m1'", "m2'", "v1'", "v2'"}
	for i, o := range outs {
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: o, Type: g.Inputs[2+[]int{0, 1, 4, 5, 6, 7}[i]].Type})
	}
	g.Nodes = []*graph.Node{{Name: "adam", Domain: graph.InternalDomain, OpType: graph.AdamUpdateOp,
		Inputs:  []string{"consts", "hyper", "w1", "w2", "g1", "g2", "m1", "m2", "v1", "v2"},
		Outputs: outs, Attrs: map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 2), "decoupled": graph.IntAttr("decoupled", 1)}}}
	state := map[string]*Buffer{}
	for _, n := range []string{"w1", "w2", "m1", "m2", "v1", "v2"} {
		shape := []int{10, 3}
		if n[1] == '2' {
			shape = []int{7}
		}
		state[n] = &Buffer{Name: n, Kind: BufState, DType: graph.Float32, Shape: shape, Bytes: int64(4 * shape[0] * max(1, shape[len(shape)-1]))}
	}
	p := planModel(t, &graph.Model{Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g}, 1, state, false)
	assert.Equal(t, 6, p.InPlace)
	require.Len(t, p.Steps, 2)
	for i, s := range p.Steps {
		require.NotNil(t, s.Launch, "step %d is a kernel, not a copy", i)
		assert.Equal(t, "adam_update_f32", s.Launch.Kernel)
		assert.Same(t, state[[]string{"w1", "w2"}[i]], s.Launch.Args[0].Buf, "updates the parameter's own buffer")
		assert.Same(t, state[[]string{"m1", "m2"}[i]], s.Launch.Args[2].Buf)
		assert.Equal(t, int64(i*20), s.Launch.Args[7].Off, "hyper row %d", i)
		assert.Equal(t, int64(1), s.Launch.Args[9].I, "decoupled")
	}
	for _, o := range p.Outputs {
		assert.Equal(t, BufState, o.root().Kind, "%s is a view of its state", o.Name)
	}
}

func TestReduceSplitsNonAdjacentAxes(t *testing.T) {
	g := graph.NewGraph("reduce")
	g.Inputs = []*graph.ValueInfo{{Name: "X", Type: tt(graph.Float32, 2, 3, 4, 5)}}
	g.Outputs = []*graph.ValueInfo{{Name: "Y", Type: tt(graph.Float32, 3, 5)}}
	g.Initializers["axes"] = graph.FromInt64([]int64{0, -2}, 2)
	g.Nodes = []*graph.Node{{Name: "r", OpType: "ReduceSum", Inputs: []string{"X", "axes"}, Outputs: []string{"Y"},
		Attrs: map[string]*graph.Attr{"keepdims": graph.IntAttr("keepdims", 0)}}}
	p := planModel(t, &graph.Model{Opsets: map[string]int64{"": 17}, Graph: g}, 1, nil, false)
	require.Len(t, p.Steps, 2)
	// Axis 2 first ([6, 4, 5] view), then axis 0 ([1, 2, 15]).
	args := func(s Step) []int64 { a := s.Launch.Args; return []int64{a[2].I, a[3].I, a[4].I, a[5].I} }
	assert.Equal(t, "reduce_fp", p.Steps[0].Launch.Kernel)
	assert.Equal(t, []int64{6, 4, 5, 0}, args(p.Steps[0]))
	assert.Equal(t, []int64{1, 2, 15, 0}, args(p.Steps[1]))
	assert.Same(t, p.values["Y"], p.Steps[1].Launch.Args[1].Buf)
}

func TestUnsupportedOpIsAnError(t *testing.T) {
	g := graph.NewGraph("det")
	g.Inputs = []*graph.ValueInfo{{Name: "X", Type: tt(graph.Float32, 3, 3)}}
	g.Outputs = []*graph.ValueInfo{{Name: "Y", Type: tt(graph.Float32)}}
	g.Nodes = []*graph.Node{{Name: "det", OpType: "Det", Inputs: []string{"X"}, Outputs: []string{"Y"}}}
	sg, types, err := specialise(g, 17, map[string][]int{"X": {3, 3}}, false)
	if err == nil {
		_, err = buildPlan(sg, 17, types, nil, true)
	}
	require.Error(t, err)
	assert.ErrorIs(t, err, graph.ErrUnsupportedOp)
	assert.Contains(t, err.Error(), "det")
}

func mustLoad(t *testing.T, path string) *graph.Graph {
	t.Helper()
	m, err := importer.Load(path)
	require.NoError(t, err)
	return m.Graph
}
