package models

import (
	"os"
	"sort"
	"testing"

	onnxgo "github.com/owulveryck/onnx-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	gonumgraph "gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/simple"
	"gorgonia.org/tensor"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
)

// TestInitializersMatchOnnxGo decodes every committed export twice, with our
// importer and with github.com/owulveryck/onnx-go (a gogo-protobuf decoder
// written independently of ours), and checks that both see the same
// initializers with the same shapes and bit-identical values.
//
// onnx-go hands the decoded graph to a Backend. Its own backend/simple keeps
// initializer tensors in an unexported field (its nodes do not implement
// onnxgo.DataCarrier), so this test brings a minimal backend whose nodes do.
func TestInitializersMatchOnnxGo(t *testing.T) {
	for _, m := range All {
		for _, kind := range m.Exports {
			t.Run(m.Name+"_"+kind, func(t *testing.T) {
				path := m.Path(kind)
				ours, err := importer.Load(path)
				require.NoError(t, err)
				raw, err := os.ReadFile(path)
				require.NoError(t, err)
				og := newOnnxGoGraph()
				theirs := onnxgo.NewModel(og)
				require.NoError(t, theirs.UnmarshalBinary(raw), "onnx-go decode")

				g := ours.Graph
				require.NotEmpty(t, g.Initializers)
				declared := map[string]bool{}
				for _, vi := range g.Inputs {
					declared[vi.Name] = true
				}
				for _, vi := range g.Outputs {
					declared[vi.Name] = true
				}
				for name := range g.ValueInfo {
					declared[name] = true
				}
				// Same set of names: every node onnx-go gave a tensor that is
				// not a declared input/output/value_info is an initializer.
				var theirNames, ourNames []string
				for _, n := range og.nodes {
					if n.t != nil && !declared[n.name] {
						theirNames = append(theirNames, n.name)
					}
				}
				for name := range g.Initializers {
					if !declared[name] {
						ourNames = append(ourNames, name)
					}
				}
				sort.Strings(theirNames)
				sort.Strings(ourNames)
				assert.Equal(t, theirNames, ourNames, "initializer names")

				elements := 0
				for _, name := range g.SortedInitializerNames() {
					mine := g.Initializers[name]
					node, ok := theirs.GetNodeByName(name)
					if !assert.True(t, ok, "onnx-go has no node %q", name) {
						continue
					}
					their := node.(*onnxGoNode).t
					if !assert.NotNil(t, their, "onnx-go has no tensor for %q", name) {
						continue
					}
					elements += compareWithGorgonia(t, name, mine, their)
				}
				t.Logf("%d initializers, %d elements agree", len(g.Initializers), elements)
			})
		}
	}
}

// compareWithGorgonia checks shape, dtype and every value of one initializer
// and returns the element count.
func compareWithGorgonia(t *testing.T, name string, mine *graph.Tensor, their tensor.Tensor) int {
	t.Helper()
	// Gorgonia shapes a rank-0 tensor as () and a one-element vector as (1).
	theirShape := []int(their.Shape())
	if len(mine.Shape) == 0 && len(theirShape) == 1 && theirShape[0] == 1 {
		theirShape = nil
	}
	if len(theirShape) == 0 {
		theirShape = nil
	}
	myShape := mine.Shape
	if len(myShape) == 0 {
		myShape = nil
	}
	if !assert.Equal(t, myShape, theirShape, "%s: shape", name) {
		return 0
	}
	switch mine.DType {
	case graph.Float32:
		want := float32Data(their)
		if !assert.Equal(t, tensor.Float32, their.Dtype(), "%s: dtype", name) {
			return 0
		}
		got := mine.Float32s()
		require.Len(t, want, len(got), "%s: element count", name)
		for i := range got {
			// Compare bits: the same file must decode to the same floats.
			if got[i] != want[i] && !(got[i] != got[i] && want[i] != want[i]) {
				assert.Failf(t, "values differ", "%s[%d]: ours %v, onnx-go %v", name, i, got[i], want[i])
				return len(got)
			}
		}
		return len(got)
	case graph.Int64:
		if !assert.Equal(t, tensor.Int64, their.Dtype(), "%s: dtype", name) {
			return 0
		}
		want := int64Data(their)
		got := mine.Int64s()
		require.Len(t, want, len(got), "%s: element count", name)
		assert.Equal(t, want, got, "%s: values", name)
		return len(got)
	}
	assert.Failf(t, "unexpected dtype", "%s: dtype %v (export.py writes float32 and int64 initializers)", name, mine.DType)
	return 0
}

func float32Data(t tensor.Tensor) []float32 {
	switch d := t.Data().(type) {
	case []float32:
		return d
	case float32:
		return []float32{d}
	}
	return nil
}

func int64Data(t tensor.Tensor) []int64 {
	switch d := t.Data().(type) {
	case []int64:
		return d
	case int64:
		return []int64{d}
	}
	return nil
}

// onnxGoGraph is the smallest onnx-go Backend that keeps tensors: a gonum
// weighted directed graph whose nodes carry a name and a tensor. Operations
// are accepted and ignored: only the initializers matter here.
type onnxGoGraph struct {
	*simple.WeightedDirectedGraph
	nodes []*onnxGoNode
}

func newOnnxGoGraph() *onnxGoGraph {
	return &onnxGoGraph{WeightedDirectedGraph: simple.NewWeightedDirectedGraph(0, 0)}
}

type onnxGoNode struct {
	id   int64
	name string
	t    tensor.Tensor
}

func (n *onnxGoNode) ID() int64                                                  { return n.id }
func (n *onnxGoNode) SetName(s string)                                           { n.name = s }
func (n *onnxGoNode) GetName() string                                            { return n.name }
func (n *onnxGoNode) SetTensor(t tensor.Tensor) error                            { n.t = t; return nil }
func (n *onnxGoNode) GetTensor() tensor.Tensor                                   { return n.t }
func (g *onnxGoGraph) ApplyOperation(onnxgo.Operation, ...gonumgraph.Node) error { return nil }

func (g *onnxGoGraph) NewNode() gonumgraph.Node {
	n := &onnxGoNode{id: g.WeightedDirectedGraph.NewNode().ID()}
	g.nodes = append(g.nodes, n)
	return n
}

var (
	_ onnxgo.Backend     = (*onnxGoGraph)(nil)
	_ onnxgo.DataCarrier = (*onnxGoNode)(nil)
	_ onnxgo.Namer       = (*onnxGoNode)(nil)
)
