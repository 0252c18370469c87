package passes_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/graph/passes"
)

// byName returns the standard compile pass called name.
func byName(t *testing.T, list []passes.Pass, name string) passes.Pass {
	t.Helper()
	for _, p := range list {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no pass %q", name)
	return passes.Pass{}
}

// without returns list less the named passes.
func without(list []passes.Pass, names ...string) []passes.Pass {
	var out []passes.Pass
	for _, p := range list {
		keep := true
		for _, n := range names {
			keep = keep && p.Name != n
		}
		if keep {
			out = append(out, p)
		}
	}
	return out
}

// swap returns list with the named passes exchanged.
func swap(t *testing.T, list []passes.Pass, a, b string) []passes.Pass {
	t.Helper()
	out := append([]passes.Pass(nil), list...)
	i, j := -1, -1
	for k, p := range out {
		switch p.Name {
		case a:
			i = k
		case b:
			j = k
		}
	}
	require.True(t, i >= 0 && j >= 0, "%s and %s", a, b)
	out[i], out[j] = out[j], out[i]
	return out
}

// TestStandardPipelinesAreInOrder: the standard pipelines pass their own
// checks, in the documented order.
func TestStandardPipelinesAreInOrder(t *testing.T) {
	compile, err := passes.New("compile", passes.CompilePasses()...)
	require.NoError(t, err)
	assert.Equal(t, []string{"inline-functions", "topo-sort", "expand-gradient-ops", "lower", "fold-constants",
		"fuse-attention-views", "fuse-weight-transpose", "fuse-transposed-matmul", "fuse-relu-grad", "fuse-erf-grad",
		"fuse-gelu-erf", "fuse-gemm-relu", "fuse-batchnorm-relu", "prune-fused"}, compile.Names())
	spec, err := passes.Continue(compile, "specialise", passes.SpecialisedPasses()...)
	require.NoError(t, err)
	assert.Equal(t, []string{"specialize", "drop-identity-arithmetic", "fuse-matmul-bias", "fuse-gelu-erf-grad", "recompute-gelu-grad", "fuse-slice-grad-concat", "prune-dropout-masks", "recompute-gelu-output", "fuse-matmul-gelu", "fuse-matmul-gelu-grad", "fuse-matmul-add-residual", "fuse-permuted-matmul-bias", "fuse-layernorm-grad-add", "fuse-batchnorm-add-relu", "fuse-add-relu-grad", "drop-same-shape-sum-to-shape", "fuse-permuted-matmul-transpose", "fuse-attention-softmax", "fuse-attention-grad-concat", "fuse-attention-packed-qkv", "recompute-attention-probs", "fuse-batchnorm-add-relu-grad", "fold-expand-into-relu-grad", "fuse-patch-embedding", "fuse-maxpool-argmax", "fuse-update-gathered", "fuse-update-product", "lower-specialised", "mark-causal-attention"}, spec.Names())
	_, err = passes.New("subgraph", passes.SubgraphPasses()...)
	require.NoError(t, err)
	for _, p := range append(passes.CompilePasses(), passes.SpecialisedPasses()...) {
		assert.NotEmpty(t, p.Doc, p.Name)
	}
}

// TestWrongOrderIsRefused: a pipeline whose order breaks a declared
// constraint is refused when it is built, with an error naming both passes.
func TestWrongOrderIsRefused(t *testing.T) {
	std := passes.CompilePasses()
	for _, tc := range []struct {
		name   string
		list   []passes.Pass
		prior  bool
		expect []string
	}{
		{"gemm-relu before relu-grad", swap(t, std, "fuse-gemm-relu", "fuse-relu-grad"), false,
			[]string{`"fuse-gemm-relu"`, `"fuse-relu-grad"`, "must run after"}},
		{"topo-sort before inlining", swap(t, std, "inline-functions", "topo-sort"), false,
			[]string{`"inline-functions"`, `"topo-sort"`, "must run before"}},
		{"gradient ops expanded unsorted", without(std, "topo-sort"), false,
			[]string{`"expand-gradient-ops"`, `requires "topo-sort"`, "does not run"}},
		{"lowering before the gradient ops exist", swap(t, std, "lower", "expand-gradient-ops"), false,
			[]string{`"lower"`, `"expand-gradient-ops"`}},
		{"fusion before folding", swap(t, std, "fold-constants", "fuse-erf-grad"), false,
			[]string{`"fuse-erf-grad"`, `"fold-constants"`}},
		{"a pass twice", append(append([]passes.Pass(nil), std...), byName(t, std, "lower")), false,
			[]string{`"lower" appears twice`}},
		{"specialised passes without the compile pipeline", passes.SpecialisedPasses(), false,
			[]string{`"specialize" requires "lower"`}},
		{"GELU gradient before specialising", swap(t, passes.SpecialisedPasses(), "specialize", "fuse-gelu-erf-grad"), true,
			[]string{`"fuse-gelu-erf-grad"`, `"specialize"`, "comes later"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.prior {
				compile, cerr := passes.New("compile", passes.CompilePasses()...)
				require.NoError(t, cerr)
				_, err = passes.Continue(compile, "specialise", tc.list...)
			} else {
				_, err = passes.New("test", tc.list...)
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, passes.ErrOrder), "%v", err)
			for _, s := range tc.expect {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
	// A pass without a name or a function is refused too.
	_, err := passes.New("test", passes.Pass{Name: "x"})
	assert.ErrorContains(t, err, `pass "x" has no Run function`)
}

// reluGradGraph is Relu's gradient as its rule emits it, Where(Greater(x,
// 0), dy, 0), twice over.
func reluGradGraph() *graph.Graph {
	ty := &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true, Shape: []graph.Dim{{Value: 4, Known: true}}}
	g := graph.NewGraph("relugrad")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: ty}, {Name: "dy", Type: ty}}
	g.Initializers = map[string]*graph.Tensor{"z": graph.FromFloat32([]float32{0})}
	g.Nodes = []*graph.Node{
		{Name: "gt", OpType: "Greater", Inputs: []string{"x", "z"}, Outputs: []string{"m"}},
		{Name: "where", OpType: "Where", Inputs: []string{"m", "dy", "z"}, Outputs: []string{"dx"}},
	}
	g.Outputs = []*graph.ValueInfo{{Name: "dx"}}
	return g
}

// TestFusionsRunOnlyWhereDeclared: a fusion runs only when the backend
// declares the fused ops it makes; otherwise the chain stays decomposed.
func TestFusionsRunOnlyWhereDeclared(t *testing.T) {
	pl, err := passes.New("compile", passes.CompilePasses()...)
	require.NoError(t, err)
	ops := func(fused map[string]bool) (map[string]int, passes.Stats) {
		g := reluGradGraph()
		st, err := pl.Run(g, &passes.Env{Opset: 17, Fused: fused})
		require.NoError(t, err)
		out := map[string]int{}
		for _, n := range g.Nodes {
			out[n.OpType]++
		}
		return out, st
	}
	none, st := ops(nil)
	assert.Equal(t, map[string]int{"Greater": 1, "Where": 1}, none)
	_, ran := st["fuse-relu-grad"]
	assert.False(t, ran, "not declared: skipped")
	other, _ := ops(map[string]bool{graph.ErfGrad: true})
	assert.Equal(t, none, other, "declaring another op changes nothing")
	fused, st := ops(map[string]bool{graph.ReluGrad: true})
	assert.Equal(t, map[string]int{graph.ReluGrad: 1}, fused)
	assert.Equal(t, 1, st["fuse-relu-grad"])
}

// TestPassErrorsNameThePass: an error from a pass names the pipeline and
// the pass, and wraps the cause.
func TestPassErrorsNameThePass(t *testing.T) {
	cause := errors.New("boom")
	pl, err := passes.New("mine",
		passes.Pass{Name: "first", Run: func(*graph.Graph, *passes.Env) (int, error) { return 2, nil }},
		passes.Pass{Name: "second", Requires: []string{"first"}, Run: func(_ *graph.Graph, env *passes.Env) (int, error) {
			if env.Count("first") != 2 {
				return 0, errors.New("first did not run")
			}
			return 0, cause
		}})
	require.NoError(t, err)
	_, err = pl.Run(graph.NewGraph("g"), nil)
	require.ErrorIs(t, err, cause)
	assert.Equal(t, "mine: second: boom", err.Error())
	assert.Equal(t, "mine: first → second", pl.String())
}
