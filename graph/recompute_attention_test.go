package graph

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recomputeGraph is attentionSoftmaxGraph after FuseAttentionSoftmax (one
// AttentionSoftmax, one AttentionSoftmaxGrad; P [6, 5, 5] is 1.25 times O
// [5, 6, 4]) with its shapes in ValueInfo; edit changes it first.
func recomputeGraph(t *testing.T, edit func(nodes map[string]*Node, g *Graph)) *Graph {
	t.Helper()
	g := attentionSoftmaxGraph(nil)
	require.Equal(t, 2, FuseAttentionSoftmax(g, 17))
	return editAndInfer(t, g, edit)
}

// TestRecomputeAttentionProbs: where P is at least the ratio given times
// O, the forward omits P and the gradient takes no P input but the
// forward's qk.* attributes (and its causal flag) with AttnRecomputeP; the
// replaced nodes are not changed, inference gives the gradients their
// shapes without P, and a second run finds nothing to do. Below the
// ratio, with P read by another node or as a graph output, with the
// gradient reading another q or k, or with P's shape unknown, nothing
// changes; at ratio 0 (train's Recompute) P under twice O is rewritten
// too.
func TestRecomputeAttentionProbs(t *testing.T) {
	g := recomputeGraph(t, func(n map[string]*Node, g *Graph) {
		for _, x := range g.Nodes {
			if x.OpType == AttentionSoftmax {
				x.SetAttr(IntAttr(AttnCausal, 1)) // copied, whatever the mask
			}
		}
	})
	before, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	fwd, grad := g.Nodes[0], g.Nodes[1]
	require.Equal(t, AttentionSoftmax, fwd.OpType)
	require.Equal(t, AttentionSoftmaxGrad, grad.OpType)
	require.Equal(t, []string{"o", "p"}, fwd.Outputs)
	require.Equal(t, "p", grad.Inputs[1])

	require.Equal(t, 1, RecomputeAttentionProbs(g, 1))
	require.Len(t, g.Nodes, 2)
	f, gr := g.Nodes[0], g.Nodes[1]
	assert.Equal(t, []string{"o", ""}, f.Outputs)
	assert.Equal(t, fwd.Inputs, f.Inputs)
	assert.Equal(t, []string{grad.Inputs[0], "", grad.Inputs[2], grad.Inputs[3], grad.Inputs[4]}, gr.Inputs)
	assert.Equal(t, grad.Outputs, gr.Outputs)
	assert.Equal(t, int64(1), gr.AttrInt(AttnRecomputeP, 0))
	assert.Equal(t, int64(1), gr.AttrInt(AttnCausal, 0))
	qk := 0
	for k, a := range fwd.Attrs {
		if strings.HasPrefix(k, AttnQK) {
			qk++
			assert.Equal(t, a, gr.Attrs[k], k)
		}
	}
	assert.Equal(t, 3, qk, "alpha and the two views")
	for k, a := range grad.Attrs {
		assert.Equal(t, a, gr.Attrs[k], "the gradient's own %s kept", k)
	}
	assert.Equal(t, []string{"o", "p"}, fwd.Outputs, "the forward node is not changed")
	assert.Equal(t, "p", grad.Inputs[1], "the gradient node is not changed")
	assert.Nil(t, grad.Attr(AttnRecomputeP))
	assert.Nil(t, g.ValueInfo["p"], "P is no value of the graph")
	after, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	for _, v := range []string{"o", "dq", "dk", "dv"} {
		require.NotNil(t, after[v], v)
		assert.Equal(t, before[v].String(), after[v].String(), v)
	}
	assert.Nil(t, after["p"])
	assert.Zero(t, RecomputeAttentionProbs(g, 0), "already rewritten")

	for name, c := range map[string]struct {
		ratio int
		edit  func(map[string]*Node, *Graph)
	}{
		"P under twice O":  {2, nil},
		"P a graph output": {1, func(n map[string]*Node, g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "p"}) }},
		"P read by another": {1, func(n map[string]*Node, g *Graph) {
			g.Nodes = append(g.Nodes, &Node{Name: "x", OpType: "Neg", Inputs: []string{"p"}, Outputs: []string{"np"}})
		}},
		"another k":          {1, func(n map[string]*Node, g *Graph) { g.Nodes[1].Inputs[4] = "q" }},
		"P of unknown shape": {1, nil},
	} {
		g := recomputeGraph(t, c.edit)
		if name == "P of unknown shape" {
			delete(g.ValueInfo, "p")
		}
		assert.Zero(t, RecomputeAttentionProbs(g, c.ratio), name)
		assert.Equal(t, "p", g.Nodes[1].Inputs[1], name)
		assert.Equal(t, "p", g.Nodes[0].Outputs[1], name)
	}
	assert.Equal(t, 1, RecomputeAttentionProbs(recomputeGraph(t, nil), 0), "ratio 0: every one")
}
