package models

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
)

// Forward outputs must match PyTorch's per element within
// relTol*max|golden| + absTol.
const (
	relTol = 1e-4
	absTol = 1e-6
)

// maxModelBytes keeps the committed exports small.
const maxModelBytes = 1 << 20

func TestCommittedFilesExist(t *testing.T) {
	for _, m := range All {
		for _, kind := range m.Exports {
			st, err := os.Stat(m.Path(kind))
			require.NoError(t, err, "run /usr/bin/python3 models/export.py")
			assert.Less(t, st.Size(), int64(maxModelBytes), "%s is too large to commit", m.Path(kind))
		}
		_, err := os.Stat(m.GoldenPath())
		require.NoError(t, err, "run /usr/bin/python3 models/export.py")
	}
}

func TestGoldenContents(t *testing.T) {
	for _, m := range All {
		t.Run(m.Name, func(t *testing.T) {
			g, err := LoadGolden(m.GoldenPath())
			require.NoError(t, err)
			want := map[string]bool{}
			for _, in := range m.Inputs {
				want[in] = true
			}
			for _, out := range m.Outputs {
				want[out] = true
				for _, kind := range m.Exports {
					want[GoldenOutputName(out, kind)] = true
				}
			}
			have := map[string]bool{}
			for k, v := range g {
				have[k] = true
				require.NoError(t, v.Validate(), k)
			}
			assert.Equal(t, want, have)
			for _, out := range m.Outputs {
				o := g[out]
				require.NotNil(t, o)
				assert.Equal(t, graph.Float32, o.DType, out)
				for i, v := range o.Float32s() {
					require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0), "%s[%d] = %v", out, i, v)
				}
			}
		})
	}
}

// TestForwardMatchesPyTorch runs every export on the CPU backend and compares
// its outputs with the PyTorch outputs in golden.npz: eval exports with the
// eval-mode forward, train exports with the training-mode forward (BatchNorm
// on batch statistics).
func TestForwardMatchesPyTorch(t *testing.T) {
	b, err := backend.Open("cpu")
	require.NoError(t, err)
	for _, m := range All {
		golden, err := LoadGolden(m.GoldenPath())
		require.NoError(t, err, m.Name)
		for _, kind := range m.Exports {
			t.Run(m.Name+"_"+kind, func(t *testing.T) {
				model, err := importer.Load(m.Path(kind))
				require.NoError(t, err)
				require.Equal(t, m.Inputs, model.Graph.InputNames())
				require.Equal(t, m.Outputs, model.Graph.OutputNames())
				if missing := unsupportedOps(b, model); len(missing) > 0 {
					require.Failf(t, "unsupported ops", "the %s backend cannot run %v yet", b.Name(), missing)
				}
				exe, err := b.Compile(model, backend.CompileOptions{})
				require.NoError(t, err, "compile")
				inputs := map[string]*graph.Tensor{}
				for _, name := range m.Inputs {
					require.Contains(t, golden, name)
					inputs[name] = golden[name].Clone()
				}
				got, err := exe.Run(context.Background(), inputs)
				require.NoError(t, err, "run")
				for _, name := range m.Outputs {
					want := golden[GoldenOutputName(name, kind)]
					require.NotNil(t, want, "golden %s", GoldenOutputName(name, kind))
					g := got[name]
					require.NotNil(t, g, "output %q not returned", name)
					require.Equal(t, want.Shape, g.Shape, "output %q shape", name)
					require.Equal(t, want.DType, g.DType, "output %q dtype", name)
					worst, at, bound := compare(g, want)
					t.Logf("%s %s: worst |got-want| = %.3g at %d (bound %.3g, max|want| %.3g)",
						name, kind, worst, at, bound, maxAbs(want))
					assert.LessOrEqual(t, worst, bound, "%s: output %q differs from PyTorch: got %v, want %v at element %d",
						m.Path(kind), name, g.Float(at), want.Float(at), at)
				}
				// Inputs must be left as they were fed.
				for _, name := range m.Inputs {
					assert.Equal(t, golden[name].Data, inputs[name].Data, "input %q was modified", name)
				}
			})
		}
	}
}

// TestEvalBatchOfOne runs the eval exports on the first sample alone, a batch
// size other than the one they were traced with: the dynamic "batch" axis
// (and the Shape->Reshape subgraphs built from it) must follow, and the
// output must be the first row of the golden output.
func TestEvalBatchOfOne(t *testing.T) {
	b, err := backend.Open("cpu")
	require.NoError(t, err)
	for _, m := range All {
		if !slices.Contains(m.Exports, Eval) {
			continue
		}
		t.Run(m.Name, func(t *testing.T) {
			golden, err := LoadGolden(m.GoldenPath())
			require.NoError(t, err)
			model, err := importer.Load(m.Path(Eval))
			require.NoError(t, err)
			if missing := unsupportedOps(b, model); len(missing) > 0 {
				require.Failf(t, "unsupported ops", "the %s backend cannot run %v yet", b.Name(), missing)
			}
			exe, err := b.Compile(model, backend.CompileOptions{})
			require.NoError(t, err, "compile")
			inputs := map[string]*graph.Tensor{}
			for _, name := range m.Inputs {
				inputs[name] = firstRow(t, golden[name])
			}
			got, err := exe.Run(context.Background(), inputs)
			require.NoError(t, err, "run")
			for _, name := range m.Outputs {
				want := firstRow(t, golden[name])
				g := got[name]
				require.NotNil(t, g, "output %q not returned", name)
				require.Equal(t, want.Shape, g.Shape, "output %q shape", name)
				worst, at, bound := compare(g, want)
				t.Logf("%s: worst |got-want| = %.3g at %d (bound %.3g)", name, worst, at, bound)
				assert.LessOrEqual(t, worst, bound, "output %q: got %v, want %v at element %d", name, g.Float(at), want.Float(at), at)
			}
		})
	}
}

// firstRow is t[0:1] along the first axis, copied.
func firstRow(t *testing.T, x *graph.Tensor) *graph.Tensor {
	t.Helper()
	require.NotNil(t, x)
	require.NotEmpty(t, x.Shape)
	n := x.Size() / x.Shape[0]
	shape := append([]int{1}, x.Shape[1:]...)
	switch d := x.Data.(type) {
	case []float32:
		return &graph.Tensor{DType: x.DType, Shape: shape, Data: slices.Clone(d[:n])}
	case []int64:
		return &graph.Tensor{DType: x.DType, Shape: shape, Data: slices.Clone(d[:n])}
	}
	require.Failf(t, "unexpected dtype", "%v", x.DType)
	return nil
}

// unsupportedOps lists, sorted, the op types of the model's nodes the
// backend says it cannot run.
func unsupportedOps(b backend.Backend, m *graph.Model) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range m.Graph.Nodes {
		if seen[n.Domain+":"+n.OpType] {
			continue
		}
		seen[n.Domain+":"+n.OpType] = true
		opset := m.Opsets[n.Domain]
		if !b.Supports(n.Domain, n.OpType, opset) {
			out = append(out, n.OpType)
		}
	}
	sort.Strings(out)
	return out
}

// compare returns the largest |got-want| over the elements, its index and
// the allowed bound relTol*max|want| + absTol. A NaN anywhere is the worst.
func compare(got, want *graph.Tensor) (worst float64, at int, bound float64) {
	bound = relTol*maxAbs(want) + absTol
	n := want.Size()
	for i := 0; i < n; i++ {
		d := math.Abs(got.Float(i) - want.Float(i))
		if math.IsNaN(d) {
			return math.Inf(1), i, bound
		}
		if d > worst {
			worst, at = d, i
		}
	}
	return worst, at, bound
}

func maxAbs(t *graph.Tensor) float64 {
	m := 0.0
	for i := 0; i < t.Size(); i++ {
		m = math.Max(m, math.Abs(t.Float(i)))
	}
	return m
}

func TestLoadGoldenMissingFile(t *testing.T) {
	_, err := LoadGolden("does-not-exist.npz")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does-not-exist.npz")
}

func ExampleLoadGolden() {
	m, _ := Lookup("mlp")
	g, err := LoadGolden(m.GoldenPath())
	if err != nil {
		panic(err)
	}
	fmt.Println(g["input"].Shape, g["output"].Shape, g["output__train"].DType)
	// Output: [4 784] [4 10] float32
}
