package graph_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/conformance"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

func known(vs ...int64) []graph.Dim {
	out := make([]graph.Dim, len(vs))
	for i, v := range vs {
		out[i] = graph.Dim{Value: v, Known: true}
	}
	return out
}

func tensorType(d graph.DType, dims ...graph.Dim) *graph.Type {
	return &graph.Type{Kind: graph.KindTensor, DType: d, Shape: dims, HasShape: true}
}

func input(name string, t *graph.Type) *graph.ValueInfo { return &graph.ValueInfo{Name: name, Type: t} }

func param(p string) graph.Dim { return graph.Dim{Param: p} }

func TestInferConvOutputSize(t *testing.T) {
	g := graph.NewGraph("conv")
	g.Inputs = []*graph.ValueInfo{input("x", tensorType(graph.Float32, param("N"), graph.Dim{Value: 3, Known: true}, graph.Dim{Value: 32, Known: true}, graph.Dim{Value: 30, Known: true}))}
	g.Initializers["w"] = graph.Zeros(graph.Float32, 16, 3, 3, 5)
	g.Nodes = []*graph.Node{
		{OpType: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"y"}, Attrs: map[string]*graph.Attr{
			"strides": graph.IntsAttr("strides", 2, 1),
			"pads":    graph.IntsAttr("pads", 1, 2, 1, 2),
		}},
		{OpType: "MaxPool", Inputs: []string{"y"}, Outputs: []string{"p", "idx"}, Attrs: map[string]*graph.Attr{
			"kernel_shape": graph.IntsAttr("kernel_shape", 3, 3),
			"strides":      graph.IntsAttr("strides", 2, 2),
			"ceil_mode":    graph.IntAttr("ceil_mode", 1),
		}},
		{OpType: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"same"}, Attrs: map[string]*graph.Attr{
			"strides":  graph.IntsAttr("strides", 2, 2),
			"auto_pad": graph.StringAttr("auto_pad", "SAME_UPPER"),
		}},
		{OpType: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"dil"}, Attrs: map[string]*graph.Attr{
			"dilations": graph.IntsAttr("dilations", 2, 2),
		}},
	}
	types, err := graph.InferShapes(g, 17, nil)
	require.NoError(t, err)
	// (32+1+1-3)/2+1 = 16, (30+2+2-5)/1+1 = 30
	assert.Equal(t, "float32[N,16,16,30]", types["y"].String())
	// ceil((16-3)/2)+1 = 8, ceil((30-3)/2)+1 = 15
	assert.Equal(t, "float32[N,16,8,15]", types["p"].String())
	assert.Equal(t, "int64[N,16,8,15]", types["idx"].String())
	assert.Equal(t, "float32[N,16,16,15]", types["same"].String())
	// 32-2*2 = 28, 30-2*4 = 22
	assert.Equal(t, "float32[N,16,28,22]", types["dil"].String())

	// Channel mismatch is an error that names the node.
	g.Initializers["w"] = graph.Zeros(graph.Float32, 16, 4, 3, 5)
	_, err = graph.InferShapes(g, 17, nil)
	require.Error(t, err)
	assert.ErrorIs(t, err, graph.ErrShapeMismatch)
	assert.Contains(t, err.Error(), "Conv")
	assert.Contains(t, err.Error(), `"y"`)
}

func TestInferMatMulBroadcast(t *testing.T) {
	g := graph.NewGraph("mm")
	g.Inputs = []*graph.ValueInfo{
		input("a", tensorType(graph.Float32, param("B"), graph.Dim{Value: 1, Known: true}, param("S"), graph.Dim{Value: 64, Known: true})),
		input("b", tensorType(graph.Float32, known(8, 64, 32)...)),
		input("v", tensorType(graph.Float32, known(32)...)),
	}
	g.Nodes = []*graph.Node{
		{OpType: "MatMul", Inputs: []string{"a", "b"}, Outputs: []string{"ab"}},
		{OpType: "MatMul", Inputs: []string{"ab", "v"}, Outputs: []string{"abv"}},
		{OpType: "MatMul", Inputs: []string{"v", "b"}, Outputs: []string{"bad"}},
	}
	types, err := graph.InferShapes(g, 17, nil)
	require.Error(t, err, "v (32) times b (8,64,32): inner dims 32 and 64 differ")
	assert.Contains(t, err.Error(), `"bad"`)
	assert.Equal(t, "float32[B,8,S,32]", types["ab"].String())
	assert.Equal(t, "float32[B,8,S]", types["abv"].String())
}

func TestInferReshapeZeroAndMinusOne(t *testing.T) {
	g := graph.NewGraph("reshape")
	g.Inputs = []*graph.ValueInfo{input("x", tensorType(graph.Float32, param("B"), graph.Dim{Value: 12, Known: true}, graph.Dim{Value: 64, Known: true}))}
	g.Initializers["s1"] = graph.FromInt64([]int64{0, -1, 16}, 3)
	g.Initializers["s2"] = graph.FromInt64([]int64{-1, 64}, 2)
	g.Initializers["s3"] = graph.FromInt64([]int64{0, 0, 4, 16}, 4)
	g.Initializers["bad"] = graph.FromInt64([]int64{0, 7, -1}, 3)
	g.Nodes = []*graph.Node{
		{OpType: "Reshape", Inputs: []string{"x", "s1"}, Outputs: []string{"y1"}},
		{OpType: "Reshape", Inputs: []string{"x", "s2"}, Outputs: []string{"y2"}},
		{OpType: "Reshape", Inputs: []string{"x", "s3"}, Outputs: []string{"y3"}},
		{OpType: "Reshape", Inputs: []string{"y3", "s2"}, Outputs: []string{"y4"}},
	}
	types, err := graph.InferShapes(g, 17, nil)
	require.NoError(t, err)
	assert.Equal(t, "float32[B,48,16]", types["y1"].String())
	assert.Equal(t, "float32[?,64]", types["y2"].String(), "B*12 is not a single dim")
	assert.Equal(t, "float32[B,12,4,16]", types["y3"].String())

	// With a concrete batch the -1 resolves.
	types, err = graph.InferShapes(g, 17, map[string]*graph.Type{"x": tensorType(graph.Float32, known(2, 12, 64)...)})
	require.NoError(t, err)
	assert.Equal(t, "float32[24,64]", types["y2"].String())
	assert.Equal(t, "float32[24,64]", types["y4"].String())

	// 12*64 is not a multiple of 7.
	g.Nodes = append(g.Nodes, &graph.Node{Name: "r", OpType: "Reshape", Inputs: []string{"x", "bad"}, Outputs: []string{"y5"}})
	_, err = graph.InferShapes(g, 17, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `node "r" (Reshape)`)
}

func TestInferShapeValuesThroughTransformerChain(t *testing.T) {
	// x: [B, S, 768] → reshape to [B, S, 12, 64] through Shape/Gather/Concat.
	g := graph.NewGraph("attn")
	g.Inputs = []*graph.ValueInfo{input("x", tensorType(graph.Float32, param("B"), param("S"), graph.Dim{Value: 768, Known: true}))}
	g.Initializers["i0"] = graph.FromInt64([]int64{0})
	g.Initializers["i1"] = graph.FromInt64([]int64{1})
	g.Initializers["ax"] = graph.FromInt64([]int64{0}, 1)
	g.Initializers["heads"] = graph.FromInt64([]int64{12, 64}, 2)
	g.Nodes = []*graph.Node{
		{OpType: "Shape", Inputs: []string{"x"}, Outputs: []string{"shape"}},
		{OpType: "Gather", Inputs: []string{"shape", "i0"}, Outputs: []string{"b"}},
		{OpType: "Gather", Inputs: []string{"shape", "i1"}, Outputs: []string{"s"}},
		{OpType: "Unsqueeze", Inputs: []string{"b", "ax"}, Outputs: []string{"b1"}},
		{OpType: "Unsqueeze", Inputs: []string{"s", "ax"}, Outputs: []string{"s1"}},
		{OpType: "Concat", Inputs: []string{"b1", "s1", "heads"}, Outputs: []string{"target"}, Attrs: map[string]*graph.Attr{"axis": graph.IntAttr("axis", 0)}},
		{OpType: "Reshape", Inputs: []string{"x", "target"}, Outputs: []string{"y"}},
		{OpType: "Transpose", Inputs: []string{"y"}, Outputs: []string{"yt"}, Attrs: map[string]*graph.Attr{"perm": graph.IntsAttr("perm", 0, 2, 1, 3)}},
	}
	types, err := graph.InferShapes(g, 17, nil)
	require.NoError(t, err)
	assert.Equal(t, "int64[3]", types["shape"].String())
	assert.Equal(t, "int64[]", types["b"].String())
	assert.Equal(t, "int64[4]", types["target"].String())
	assert.Equal(t, "float32[B,S,12,64]", types["y"].String())
	assert.Equal(t, "float32[B,12,S,64]", types["yt"].String())
}

func TestInferUnknownOpLeavesOutputUnknown(t *testing.T) {
	g := graph.NewGraph("custom")
	g.Inputs = []*graph.ValueInfo{input("x", tensorType(graph.Float32, known(2, 3)...))}
	g.Nodes = []*graph.Node{
		{OpType: "Mystery", Domain: "com.example", Inputs: []string{"x"}, Outputs: []string{"y"}},
		{OpType: "Relu", Inputs: []string{"y"}, Outputs: []string{"z"}},
	}
	types, err := graph.InferShapes(g, 17, nil)
	require.NoError(t, err)
	assert.Nil(t, types["y"])
	assert.Nil(t, types["z"])
	// A declared value_info fills the gap.
	g.ValueInfo["y"] = input("y", tensorType(graph.Float32, known(6)...))
	types, err = graph.InferShapes(g, 17, nil)
	require.NoError(t, err)
	assert.Equal(t, "float32[6]", types["z"].String())
}

// TestInferShapesMatchesConformanceOutputs runs inference on every ONNX
// conformance model with the shapes of its test inputs and checks each
// output whose type it infers completely against the expected tensor.
func TestInferShapesMatchesConformanceOutputs(t *testing.T) {
	root := testutil.ONNXTestdata(t)
	cases, err := conformance.Cases(root)
	require.NoError(t, err)
	require.NotEmpty(t, cases)
	var failures, incomplete []string
	checked, inferred := 0, 0
	for _, dir := range cases {
		name := filepath.Base(dir)
		m, err := importer.Load(filepath.Join(dir, "model.onnx"))
		if err != nil {
			continue
		}
		if err := graph.InlineFunctions(m.Graph, m.Functions); err != nil {
			continue
		}
		set := filepath.Join(dir, "test_data_set_0")
		known := map[string]*graph.Type{}
		feeds := m.Graph.InputNames()
		for k := 0; ; k++ {
			tin, tname, err := importer.ReadTensorFile(filepath.Join(set, fmt.Sprintf("input_%d.pb", k)))
			if err != nil {
				break
			}
			if tname == "" && k < len(feeds) {
				tname = feeds[k]
			}
			known[tname] = exactType(tin)
		}
		types, err := graph.InferShapes(m.Graph, m.Opset(), known)
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		checked++
		for k, o := range m.Graph.Outputs {
			want, _, err := importer.ReadTensorFile(filepath.Join(set, fmt.Sprintf("output_%d.pb", k)))
			if err != nil {
				break
			}
			got := types[o.Name]
			if got == nil || !complete(got) || got.Kind != graph.KindTensor {
				incomplete = append(incomplete, fmt.Sprintf("%s: %s %v", name, o.Name, got))
				continue
			}
			inferred++
			if want.DType == graph.Uint16 && got.DType == graph.BFloat16 {
				// ONNX 1.12 stores bfloat16 test outputs as uint16.
				want.DType = graph.BFloat16
			}
			if w := exactType(want).String(); w != got.String() {
				failures = append(failures, fmt.Sprintf("%s: output %q inferred %v, want %v", name, o.Name, got, w))
			}
		}
	}
	sort.Strings(failures)
	t.Logf("%d models, %d outputs inferred completely", checked, inferred)
	assert.Empty(t, failures, "\n%s", strings.Join(failures, "\n"))
	if os.Getenv("ONNXTRAIN_INFER_VERBOSE") != "" {
		t.Log("incomplete:\n" + strings.Join(incomplete, "\n"))
	}
}

func exactType(t *graph.Tensor) *graph.Type {
	dims := make([]graph.Dim, len(t.Shape))
	for i, d := range t.Shape {
		dims[i] = graph.Dim{Value: int64(d), Known: true}
	}
	return tensorType(t.DType, dims...)
}

func complete(t *graph.Type) bool {
	if !t.HasShape || t.DType == graph.Undefined {
		return false
	}
	for _, d := range t.Shape {
		if !d.Known {
			return false
		}
	}
	return true
}

func TestInferShapesHandlesUnsortedGraphsWithoutChangingThem(t *testing.T) {
	g := graph.NewGraph("unsorted")
	g.Inputs = []*graph.ValueInfo{input("x", tensorType(graph.Float32, known(4, 6)...))}
	g.Nodes = []*graph.Node{
		{Name: "second", OpType: "Relu", Inputs: []string{"t"}, Outputs: []string{"y"}},
		{Name: "first", OpType: "Transpose", Inputs: []string{"x"}, Outputs: []string{"t"}},
	}
	types, err := graph.InferShapes(g, 17, nil)
	require.NoError(t, err)
	assert.Equal(t, "float32[6,4]", types["y"].String())
	assert.Equal(t, "second", g.Nodes[0].Name, "the caller's node order is kept")
}
