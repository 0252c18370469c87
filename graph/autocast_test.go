package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// autocastFixture is a Linear layer as PyTorch exports it (MatMul + Add of
// the bias), a ReLU, a division by a scalar constant, a residual Add with a
// float32 input, Softmax and a ReduceSum: one op of each AutoCast class.
func autocastFixture() *Graph {
	g := NewGraph("autocast")
	f32 := func(name string, dims ...int64) *ValueInfo {
		s := make([]Dim, len(dims))
		for i, d := range dims {
			s[i] = Dim{Known: true, Value: d}
		}
		return &ValueInfo{Name: name, Type: &Type{Kind: KindTensor, DType: Float32, HasShape: true, Shape: s}}
	}
	g.Inputs = []*ValueInfo{f32("x", 2, 3), f32("w", 3, 4), f32("b", 4), f32("r", 2, 4)}
	g.Initializers["two"] = Scalar(Float32, 2)
	g.Nodes = []*Node{
		{Name: "mm", OpType: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"xw"}},
		{Name: "bias", OpType: "Add", Inputs: []string{"xw", "b"}, Outputs: []string{"lin"}},
		{Name: "relu", OpType: "Relu", Inputs: []string{"lin"}, Outputs: []string{"h"}},
		{Name: "div", OpType: "Div", Inputs: []string{"h", "two"}, Outputs: []string{"hd"}},
		{Name: "res", OpType: "Add", Inputs: []string{"hd", "r"}, Outputs: []string{"y"}},
		{Name: "sm", OpType: "Softmax", Inputs: []string{"hd"}, Outputs: []string{"p"}},
		{Name: "sum", OpType: "ReduceSum", Inputs: []string{"p"}, Outputs: []string{"s"}, Attrs: map[string]*Attr{"keepdims": IntAttr("keepdims", 0)}},
	}
	g.Outputs = []*ValueInfo{{Name: "y"}, {Name: "s"}, {Name: "hd"}}
	return g
}

func TestAutoCastPolicy(t *testing.T) {
	for _, low := range []DType{BFloat16, Float16} {
		t.Run(low.String(), func(t *testing.T) {
			g := autocastFixture()
			require.NoError(t, AutoCast(g, 17, low))
			types, err := InferShapes(g, 17, nil)
			require.NoError(t, err)
			dt := func(name string) DType {
				require.NotNil(t, types[name], name)
				return types[name].DType
			}
			byName := map[string]*Node{}
			for _, n := range g.Nodes {
				byName[n.Name] = n
			}
			// Low precision: both MatMul operands cast; the bias follows the
			// MatMul into the low type (torch's linear), ReLU and the
			// division by a scalar constant stay there.
			mm := byName["mm"]
			for _, in := range mm.Inputs {
				assert.Equal(t, low, dt(in), "MatMul input %s", in)
			}
			assert.Equal(t, low, dt("xw"))
			bias := byName["bias"]
			assert.Equal(t, low, dt(bias.Inputs[1]), "the bias is cast to the MatMul's type")
			assert.Equal(t, low, dt("lin"))
			assert.Equal(t, low, dt("h"))
			div := byName["div"]
			assert.Equal(t, low, dt(div.Inputs[0]))
			assert.Equal(t, low, dt(div.Inputs[1]), "a scalar constant does not widen")
			// Promotion: the residual Add with a float32 input runs in float32.
			res := byName["res"]
			assert.Equal(t, Float32, dt(res.Inputs[0]))
			assert.Equal(t, Float32, dt(res.Inputs[1]))
			// float32 ops: Softmax and ReduceSum take float32.
			assert.Equal(t, Float32, dt(byName["sm"].Inputs[0]))
			assert.Equal(t, Float32, dt(byName["sum"].Inputs[0]))
			// Graph inputs and outputs keep their types: hd, a low value,
			// is an output, so a cast back to float32 produces it.
			for _, in := range g.Inputs {
				assert.Equal(t, Float32, in.Type.DType, in.Name)
			}
			for _, o := range []string{"y", "s", "hd"} {
				assert.Equal(t, Float32, dt(o), "graph output %s", o)
			}
			// Every cast of one value to one type is made once (x feeds one
			// MatMul; hd is cast to float32 once for Add and Softmax).
			casts := map[string]int{}
			for _, n := range g.Nodes {
				if n.OpType == "Cast" {
					casts[n.Inputs[0]+"->"+DType(n.Attr("to").I).String()]++
				}
			}
			for k, c := range casts {
				assert.Equal(t, 1, c, "cast %s made %d times", k, c)
			}
			// Binary ops see one dtype on both sides everywhere.
			for _, n := range g.Nodes {
				if n.OpType == "Add" || n.OpType == "Div" || n.OpType == "MatMul" {
					assert.Equal(t, dt(n.Inputs[0]), dt(n.Inputs[1]), "node %s mixes dtypes", n.Name)
				}
			}
			require.NoError(t, TopoSort(g))
		})
	}
}

func TestAutoCastRefuses(t *testing.T) {
	err := AutoCast(autocastFixture(), 17, Float32)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bfloat16 or float16")

	g := autocastFixture()
	g.Nodes = append(g.Nodes, &Node{Name: "loop", OpType: "If", Inputs: []string{"c"}, Outputs: []string{"z"},
		Attrs: map[string]*Attr{"then_branch": {Name: "then_branch", Type: AttrGraph, G: NewGraph("then")}}})
	err = AutoCast(g, 17, BFloat16)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `node "loop" (If) holds a subgraph`)
}

// Float64 values are left alone (torch's autocast does not touch them), and
// a graph with no low-precision op gains no casts.
func TestAutoCastLeavesFloat64(t *testing.T) {
	g := NewGraph("f64")
	d := &Type{Kind: KindTensor, DType: Float64, HasShape: true, Shape: []Dim{{Known: true, Value: 2}, {Known: true, Value: 2}}}
	g.Inputs = []*ValueInfo{{Name: "a", Type: d}, {Name: "b", Type: d}}
	g.Nodes = []*Node{{Name: "mm", OpType: "MatMul", Inputs: []string{"a", "b"}, Outputs: []string{"c"}}}
	g.Outputs = []*ValueInfo{{Name: "c"}}
	require.NoError(t, AutoCast(g, 17, BFloat16))
	require.Len(t, g.Nodes, 1)
	assert.Equal(t, []string{"a", "b"}, g.Nodes[0].Inputs)
}

// An op of another domain keeps the input types it was built for (a cast
// back to float32 is inserted), and CastLike takes input 1's new type.
func TestAutoCastOtherDomainsAndCastLike(t *testing.T) {
	g := autocastFixture()
	g.Nodes = append(g.Nodes,
		&Node{Name: "custom", OpType: "Scale", Domain: "com.example", Inputs: []string{"h"}, Outputs: []string{"hs"}},
		&Node{Name: "like", OpType: "CastLike", Inputs: []string{"r", "h"}, Outputs: []string{"rl"}},
		&Node{Name: "addl", OpType: "Add", Inputs: []string{"rl", "h"}, Outputs: []string{"z"}},
	)
	g.Outputs = append(g.Outputs, &ValueInfo{Name: "hs"}, &ValueInfo{Name: "z"})
	require.NoError(t, AutoCast(g, 17, BFloat16))
	types, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	for _, n := range g.Nodes {
		switch n.Name {
		case "custom":
			assert.Equal(t, Float32, types[n.Inputs[0]].DType, "the custom op reads float32, as before")
		case "addl":
			assert.Equal(t, BFloat16, types[n.Inputs[0]].DType, "CastLike to a bfloat16 value gives bfloat16")
			assert.Equal(t, BFloat16, types[n.Inputs[1]].DType)
		}
	}
}
