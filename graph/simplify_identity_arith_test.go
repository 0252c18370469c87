package graph

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIdentityArithmeticIsExact checks, on float32 values that include
// both zeros, infinities, subnormals and NaN, the arithmetic facts
// DropIdentityArithmetic relies on: x·1, x/1, x + (−0) and x − (+0) give
// x's bits back, and x + (+0) and x − (−0) do not for x = −0 (so those
// stay).
func TestIdentityArithmeticIsExact(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	one, posZero := float32(1), float32(0)
	xs := []float32{negZero, 0, 1, -1, 3.25, math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32,
		-math.SmallestNonzeroFloat32, float32(math.Inf(1)), float32(math.Inf(-1)), 1e-38, -2.5e-39}
	for _, x := range xs {
		b := math.Float32bits(x)
		assert.Equal(t, b, math.Float32bits(x*one), "%v·1", x)
		assert.Equal(t, b, math.Float32bits(x/one), "%v/1", x)
		assert.Equal(t, b, math.Float32bits(x+negZero), "%v + −0", x)
		assert.Equal(t, b, math.Float32bits(x-posZero), "%v − +0", x)
	}
	nan := float32(math.NaN())
	assert.True(t, math.IsNaN(float64(nan*one)) && math.IsNaN(float64(nan+negZero)))
	assert.NotEqual(t, math.Float32bits(negZero), math.Float32bits(negZero+posZero), "−0 + +0 is +0")
	assert.NotEqual(t, math.Float32bits(negZero), math.Float32bits(negZero-negZero), "−0 − −0 is +0")
}

// identityArithGraph is x [3, 4], its row r [1, 4], a parameter p and a
// float16 h [3, 4] (y, the first node's output, is float16 when it reads h), with
// constants of ones, zeros of both signs and a near-one, as initializers
// and Constant nodes; nodes are the given ones, each value's shape given as
// Specialize records it.
func identityArithGraph(nodes []*Node, shapes map[string][]int64, outputs ...string) *Graph {
	g := NewGraph("identity-arith")
	f16 := f32(3, 4)
	f16.DType = Float16
	g.Inputs = []*ValueInfo{{Name: "x", Type: f32(3, 4)}, {Name: "r", Type: f32(1, 4)}, {Name: "p", Type: f32(4)}, {Name: "h", Type: f16}}
	negZero := float32(math.Copysign(0, -1))
	g.Initializers = map[string]*Tensor{
		"one":      FromFloat32([]float32{1}),
		"ones4":    FromFloat32([]float32{1, 1, 1, 1}, 4),
		"ones34":   {DType: Float32, Shape: []int{3, 4}, Data: []float32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
		"nearone":  FromFloat32([]float32{1, 1, 1, 1.0000001}, 4),
		"pluszero": FromFloat32([]float32{0}),
		"negzero":  FromFloat32([]float32{negZero}),
		"mixzero":  FromFloat32([]float32{negZero, 0, negZero, negZero}, 4),
		"p":        FromFloat32([]float32{1, 1, 1, 1}, 4), // a parameter: an input, not a constant
		"f64one":   FromFloat64([]float64{1}),
	}
	for _, in := range g.Inputs {
		g.ValueInfo[in.Name] = in
	}
	for name, s := range shapes {
		ty := f32(s...)
		if name == "y" && len(nodes) > 0 && len(nodes[0].Inputs) > 0 && nodes[0].Inputs[0] == "h" {
			ty.DType = Float16
		}
		g.ValueInfo[name] = &ValueInfo{Name: name, Type: ty}
	}
	g.Nodes = nodes
	for _, o := range outputs {
		g.Outputs = append(g.Outputs, &ValueInfo{Name: o})
	}
	return g
}

func arithNode(op, out string, a, b string) *Node {
	return &Node{Name: out, OpType: op, Inputs: []string{a, b}, Outputs: []string{out}}
}

// TestDropIdentityArithmetic: exact identities are removed and their
// readers read the operand; everything that would change a value, a
// shape, or that reads a parameter stays.
func TestDropIdentityArithmetic(t *testing.T) {
	s34 := []int64{3, 4}
	halfOne := &Tensor{DType: Float16, Data: []uint16{0x3c00}} // 1.0 in float16
	halfNegZero := &Tensor{DType: Float16, Data: []uint16{0x8000}}
	badOnes := FromFloat32([]float32{1, 1, 1, 1}) // a scalar holding 4 elements
	cases := []struct {
		name   string
		node   *Node
		shape  []int64
		drops  bool
		reads  string // what the reader reads after the pass, when dropped
		consts map[string]*Tensor
	}{
		{"Mul by a scalar 1", arithNode("Mul", "y", "x", "one"), s34, true, "x", nil},
		{"Mul by 1 on the left", arithNode("Mul", "y", "one", "x"), s34, true, "x", nil},
		{"Mul by a row of ones", arithNode("Mul", "y", "x", "ones4"), s34, true, "x", nil},
		{"Mul by ones of the same shape", arithNode("Mul", "y", "ones34", "x"), s34, true, "x", nil},
		{"Div by 1", arithNode("Div", "y", "x", "one"), s34, true, "x", nil},
		{"Add of −0", arithNode("Add", "y", "negzero", "x"), s34, true, "x", nil},
		{"Sub of +0", arithNode("Sub", "y", "x", "pluszero"), s34, true, "x", nil},
		{"float16 Mul by 1", arithNode("Mul", "y", "h", "h1"), s34, true, "h", map[string]*Tensor{"h1": halfOne}},
		{"float16 Add of −0", arithNode("Add", "y", "h", "h0"), s34, true, "h", map[string]*Tensor{"h0": halfNegZero}},
		// Kept: values or shapes would change.
		{"Mul of a row by ones that broadcast it", arithNode("Mul", "y", "r", "ones34"), s34, false, "", nil},
		{"Mul by a row with one element off 1", arithNode("Mul", "y", "x", "nearone"), s34, false, "", nil},
		{"Mul by a parameter of ones", arithNode("Mul", "y", "x", "p"), s34, false, "", nil},
		{"Div of 1 by x", arithNode("Div", "y", "one", "x"), s34, false, "", nil},
		{"Add of +0 (−0 + +0 is +0)", arithNode("Add", "y", "x", "pluszero"), s34, false, "", nil},
		{"Add of zeros of both signs", arithNode("Add", "y", "x", "mixzero"), s34, false, "", nil},
		{"Sub of −0", arithNode("Sub", "y", "x", "negzero"), s34, false, "", nil},
		{"Sub from +0", arithNode("Sub", "y", "pluszero", "x"), s34, false, "", nil},
		{"Mul by a float64 1 (another dtype)", arithNode("Mul", "y", "x", "f64one"), s34, false, "", nil},
		{"Mul by a malformed constant", arithNode("Mul", "y", "x", "bad"), s34, false, "", map[string]*Tensor{"bad": badOnes}},
		{"Mul with the output shape unknown", arithNode("Mul", "y", "x", "one"), nil, false, "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reader := &Node{Name: "relu", OpType: "Relu", Inputs: []string{"y"}, Outputs: []string{"z"}}
			shapes := map[string][]int64{"z": s34}
			if c.shape != nil {
				shapes["y"] = c.shape
			}
			g := identityArithGraph([]*Node{c.node, reader}, shapes, "z")
			for k, v := range c.consts {
				g.Initializers[k] = v
			}
			before := *c.node
			if !c.drops {
				assert.Zero(t, DropIdentityArithmetic(g))
				require.Len(t, g.Nodes, 2)
				assert.Same(t, c.node, g.Nodes[0])
				assert.Equal(t, []string{"y"}, g.Nodes[1].Inputs)
				return
			}
			assert.Equal(t, 1, DropIdentityArithmetic(g))
			require.Len(t, g.Nodes, 1)
			assert.Equal(t, "Relu", g.Nodes[0].OpType)
			assert.Equal(t, []string{c.reads}, g.Nodes[0].Inputs)
			assert.Equal(t, []string{"y"}, reader.Inputs, "the shared reader is not edited: a copy reads x")
			assert.Equal(t, before, *c.node)
		})
	}
}

// TestDropIdentityArithmeticChainsAndOutputs: a chain of identities is
// read through to its start; an identity whose output is a graph output
// becomes Identity (its name must stay); a Constant node's value counts
// as a constant.
func TestDropIdentityArithmeticChainsAndOutputs(t *testing.T) {
	s34 := []int64{3, 4}
	oneNode := &Node{Name: "c", OpType: "Constant", Outputs: []string{"c1"}, Attrs: map[string]*Attr{"value": {Name: "value", Type: AttrTensor, T: FromFloat32([]float32{1})}}}
	g := identityArithGraph([]*Node{
		oneNode,
		arithNode("Mul", "a", "x", "c1"),
		arithNode("Div", "b", "a", "one"),
		arithNode("Sub", "y", "b", "pluszero"),
		{Name: "sum", OpType: "Add", Inputs: []string{"y", "a"}, Outputs: []string{"z"}},
		arithNode("Mul", "out", "x", "one"),
	}, map[string][]int64{"c1": {1}, "a": s34, "b": s34, "y": s34, "z": s34, "out": s34}, "z", "out")
	assert.Equal(t, 4, DropIdentityArithmetic(g))
	require.Len(t, g.Nodes, 3)
	assert.Equal(t, "Constant", g.Nodes[0].OpType)
	assert.Equal(t, "Add", g.Nodes[1].OpType)
	assert.Equal(t, []string{"x", "x"}, g.Nodes[1].Inputs)
	assert.Equal(t, "Identity", g.Nodes[2].OpType)
	assert.Equal(t, []string{"x"}, g.Nodes[2].Inputs)
	assert.Equal(t, []string{"out"}, g.Nodes[2].Outputs)
	assert.Zero(t, DropIdentityArithmetic(g), "nothing left")
}
