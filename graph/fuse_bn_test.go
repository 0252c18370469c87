package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bnReluChain is a training step's BatchNormalization → Relu with what
// the gradient rules and FuseReluGrad leave around it: a CastLike typed
// zero reading y (hoisted next to it), ReluGrad(dr, y) and
// BatchNormalizationGrad of the ReluGrad's output. p prefixes the names.
func bnReluChain(p string) []*Node {
	return []*Node{
		{Name: p + "bn", OpType: "BatchNormalization", Inputs: []string{"x", "s", "b", "m", "v"},
			Outputs: []string{p + "y", p + "rm", p + "rv"}, Attrs: map[string]*Attr{"training_mode": {Name: "training_mode", Type: AttrInt, I: 1}}},
		{Name: p + "zero", OpType: "CastLike", Inputs: []string{"z", p + "y"}, Outputs: []string{p + "zero"}},
		{Name: p + "relu", OpType: "Relu", Inputs: []string{p + "y"}, Outputs: []string{p + "r"}},
		{Name: p + "use", OpType: "Mul", Inputs: []string{p + "r", p + "zero"}, Outputs: []string{p + "use"}},
		{Name: p + "rg", OpType: ReluGrad, Domain: FusedDomain, Inputs: []string{"dr", p + "y"}, Outputs: []string{p + "dy"}},
		{Name: p + "bng", OpType: "BatchNormalizationGrad", Domain: InternalDomain, Inputs: []string{p + "dy", "x", "s", "m", "v"},
			Outputs: []string{p + "dx", p + "ds", p + "db"}, Attrs: map[string]*Attr{"epsilon": {Name: "epsilon", Type: AttrFloat, F: 1e-3}}},
	}
}

// TestFuseBatchNormRelu: chain a fuses both ways (the CastLike and the
// ReluGrad then read the Relu's output, the fused forward node sits where
// the BatchNormalization was and keeps its attributes and running
// outputs); chain b's y is also a graph output, so only its gradient pair
// fuses; chain c's masked gradient has a second reader, so only its
// forward fuses.
func TestFuseBatchNormRelu(t *testing.T) {
	g := NewGraph("bnrelu")
	g.Inputs = []*ValueInfo{{Name: "x"}, {Name: "dr"}}
	nodes := append(append(bnReluChain("a/"), bnReluChain("b/")...), bnReluChain("c/")...)
	nodes = append(nodes, &Node{Name: "c/extra", OpType: "Neg", Inputs: []string{"c/dy"}, Outputs: []string{"c/extra"}})
	g.Nodes = nodes
	g.Outputs = []*ValueInfo{{Name: "b/y"}, {Name: "c/extra"}}
	for _, p := range []string{"a/", "b/", "c/"} {
		for _, o := range []string{"use", "rm", "rv", "dx", "ds", "db"} {
			g.Outputs = append(g.Outputs, &ValueInfo{Name: p + o})
		}
	}
	require.Equal(t, 4, FuseBatchNormRelu(g), "two forward and two backward rewrites")
	byName := map[string]*Node{}
	for _, n := range g.Nodes {
		byName[n.Name] = n
	}
	a := byName["a/bn"]
	require.NotNil(t, a)
	assert.Equal(t, BatchNormRelu, a.OpType)
	assert.Equal(t, FusedDomain, a.Domain)
	assert.Equal(t, []string{"x", "s", "b", "m", "v"}, a.Inputs)
	assert.Equal(t, []string{"a/r", "a/rm", "a/rv"}, a.Outputs)
	assert.Equal(t, int64(1), a.AttrInt("training_mode", 0))
	assert.Nil(t, byName["a/relu"])
	assert.Equal(t, []string{"z", "a/r"}, byName["a/zero"].Inputs, "the typed zero reads the Relu's output")
	assert.Nil(t, byName["a/rg"], "the ReluGrad went into the fused gradient")
	ag := byName["a/bng"]
	assert.Equal(t, BatchNormReluGrad, ag.OpType)
	assert.Equal(t, FusedDomain, ag.Domain)
	assert.Equal(t, []string{"dr", "a/r", "x", "s", "m", "v"}, ag.Inputs, "the mask reads the Relu's output")
	assert.Equal(t, []string{"a/dx", "a/ds", "a/db"}, ag.Outputs)
	assert.InDelta(t, 1e-3, ag.AttrFloat("epsilon", 0), 1e-9)

	assert.Equal(t, "BatchNormalization", byName["b/bn"].OpType, "b/y is a graph output")
	assert.Equal(t, "Relu", byName["b/relu"].OpType)
	assert.Equal(t, BatchNormReluGrad, byName["b/bng"].OpType)
	assert.Equal(t, []string{"dr", "b/y", "x", "s", "m", "v"}, byName["b/bng"].Inputs)

	assert.Equal(t, BatchNormRelu, byName["c/bn"].OpType)
	assert.Equal(t, "BatchNormalizationGrad", byName["c/bng"].OpType, "c/dy has a second reader")
	assert.Equal(t, []string{"dr", "c/r"}, byName["c/rg"].Inputs, "the kept ReluGrad reads the Relu's output")

	// Every name a node reads is made before it.
	made := map[string]bool{"x": true, "dr": true, "s": true, "b": true, "m": true, "v": true, "z": true}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			assert.True(t, made[in], "%s reads %s before it is made", n.Name, in)
		}
		for _, o := range n.Outputs {
			made[o] = true
		}
	}
	assert.Zero(t, FuseBatchNormRelu(g), "nothing left to fuse")
}
