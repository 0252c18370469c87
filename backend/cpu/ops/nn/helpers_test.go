package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// testNode builds a node of op with the given attributes and nOut outputs.
func testNode(op string, nOut int, attrs ...*graph.Attr) *graph.Node {
	n := &graph.Node{Name: "t", OpType: op}
	for i := 0; i < nOut; i++ {
		n.Outputs = append(n.Outputs, "y"+string(rune('0'+i)))
	}
	for _, a := range attrs {
		n.SetAttr(a)
	}
	return n
}

func aInts(name string, v ...int64) *graph.Attr {
	return &graph.Attr{Name: name, Type: graph.AttrInts, Ints: v}
}

func aInt(name string, v int64) *graph.Attr {
	return &graph.Attr{Name: name, Type: graph.AttrInt, I: v}
}

func aFloat(name string, v float32) *graph.Attr {
	return &graph.Attr{Name: name, Type: graph.AttrFloat, F: v}
}

func aFloats(name string, v ...float32) *graph.Attr {
	return &graph.Attr{Name: name, Type: graph.AttrFloats, Floats: v}
}

func aString(name, v string) *graph.Attr {
	return &graph.Attr{Name: name, Type: graph.AttrString, S: v}
}

// runOp runs the registered kernel of n.OpType at opset.
func runOp(t *testing.T, opset int64, n *graph.Node, in ...*graph.Tensor) ([]*graph.Tensor, error) {
	t.Helper()
	spec, ok := kern.Lookup("", n.OpType, opset)
	require.True(t, ok, "no kernel for %s", n.OpType)
	return spec.Fn(&kern.Context{Opset: opset}, n, in)
}

// mustRun runs n and requires success.
func mustRun(t *testing.T, opset int64, n *graph.Node, in ...*graph.Tensor) []*graph.Tensor {
	t.Helper()
	out, err := runOp(t, opset, n, in...)
	require.NoError(t, err)
	return out
}

// f32 makes a float32 tensor.
func f32(shape []int, v ...float32) *graph.Tensor {
	return graph.FromFloat32(v, shape...)
}

// i64 makes an int64 tensor.
func i64(shape []int, v ...int64) *graph.Tensor {
	return graph.FromInt64(v, shape...)
}

// randF64 returns n uniform values in [-1, 1).
func randF64(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.Float64()*2 - 1
	}
	return v
}

func toF32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// assertClose compares a tensor's values with want elementwise.
func assertClose(t *testing.T, want []float64, got *graph.Tensor, tol float64) {
	t.Helper()
	require.Equal(t, len(want), got.Size(), "element count (shape %v)", got.Shape)
	for i, w := range want {
		g := got.Float(i)
		if !(math.Abs(g-w) <= tol*(1+math.Abs(w))) {
			assert.Failf(t, "mismatch", "element %d: got %g, want %g (shape %v)", i, g, w, got.Shape)
			return
		}
	}
}

// f64s converts float32 literals to float64 for assertClose.
func f64s(v ...float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
