package graph

import (
	"slices"
	"strings"
)

// AttnRecomputeP (int 1), on AttentionSoftmaxGrad and
// AttentionSoftmaxGradConcat: the node has no P (input 1 is empty) and
// computes each head's P again from Q and K, as the forward computed it
// (the qk.* product's attributes and AttnCausal copied from the forward
// node, the same Softmax), bit for bit, while the head's gradient
// products run; the forward AttentionSoftmax then omits its P output.
// RecomputeAttentionProbs sets it.
const AttnRecomputeP = "recompute_p"

// AttnRecomputePMode is the name under which a backend declares (among
// its fused ops, backend.FusedOpsDeclarer) that its attention gradient
// kernels take AttnRecomputeP: the pass that sets it runs only then.
const AttnRecomputePMode = AttentionSoftmaxGrad + "+" + AttnRecomputeP

// RecomputeMinRatio is the ratio of P's elements to O's — the keys T over
// the head's depth d — from which RecomputeAttentionProbs drops P. P is
// T/d times the attention's output and about T/(3d) times its packed q, k
// and v: at ViT-B/16's 197 tokens of 64 (3.1) or a decoder's 128 (2) it
// is a small part of a layer's activations and its recomputation (the
// scores' product and Softmax again, about a sixth of attention's
// arithmetic) would cost time for little; at a GPT-2's 1024 (16) it is
// over half of them. A variable: tests lower it to reach small fixtures.
// train's Recompute (backend.Tuning.RecomputeAttention) recomputes P at
// every size.
var RecomputeMinRatio = 4

// RecomputeAttentionProbs makes the gradient of each AttentionSoftmax
// whose P is at least minRatio times its O (RecomputeMinRatio, or 0 for
// every one: train's Recompute) compute P again
// instead of reading the forward's (AttnRecomputeP), so that the T×T
// probabilities of every layer are not kept from the forward pass to the
// backward: the forward writes none, and the gradient recomputes each
// head's into a buffer of the core's that stays in its cache. It applies
// where P (the forward's output 1, of known shape) is read by one
// AttentionSoftmaxGrad or AttentionSoftmaxGradConcat as its input 1 and by
// nothing else, and that node reads the forward's q and k (the same names,
// and the same AttnPackedQKV). Nodes are copied, not changed (they may be
// shared with the graph this one was specialised from). It returns the
// number of gradients rewritten.
func RecomputeAttentionProbs(g *Graph, minRatio int) int {
	readers := readCounts(g)
	gradOf := map[string]*Node{}
	for _, n := range g.Nodes {
		if n.Domain == FusedDomain && (n.OpType == AttentionSoftmaxGrad || n.OpType == AttentionSoftmaxGradConcat) &&
			len(n.Inputs) == 5 && n.Inputs[1] != "" && n.Attr(AttnRecomputeP) == nil {
			gradOf[n.Inputs[1]] = n
		}
	}
	replace := map[*Node]*Node{}
	made := 0
	for _, f := range g.Nodes {
		if f.Domain != FusedDomain || f.OpType != AttentionSoftmax || len(f.Inputs) != 3 || len(f.Outputs) != 2 || f.Outputs[1] == "" {
			continue
		}
		p := f.Outputs[1]
		grad := gradOf[p]
		if grad == nil || readers[p] != 1 {
			continue
		}
		gq := AttentionQKV(grad.OpType)
		if grad.Inputs[gq[0]] != f.Inputs[0] || grad.Inputs[gq[1]] != f.Inputs[1] || !sameAttr(f.Attr(AttnPackedQKV), grad.Attr(AttnPackedQKV)) {
			continue
		}
		ps, pdt, ok1 := knownTensorType(g, p)
		os, _, ok2 := knownTensorType(g, f.Outputs[0])
		if !ok1 || !ok2 || pdt != Float32 {
			continue
		}
		pn, err1 := NumElements(ps)
		on, err2 := NumElements(os)
		if err1 != nil || err2 != nil || on <= 0 || pn < minRatio*on {
			continue
		}
		fc := copyNode(f)
		fc.Outputs = []string{f.Outputs[0], ""}
		gc := copyNode(grad)
		gc.Inputs = append([]string(nil), grad.Inputs...)
		gc.Inputs[1] = ""
		for k, a := range f.Attrs {
			if strings.HasPrefix(k, AttnQK) || k == AttnCausal {
				c := *a
				gc.Attrs[k] = &c
			}
		}
		gc.SetAttr(IntAttr(AttnRecomputeP, 1))
		replace[f], replace[grad] = fc, gc
		delete(g.ValueInfo, p) // no longer a value of the graph
		made++
	}
	if made > 0 {
		replaceAndRemove(g, replace, nil)
	}
	return made
}

// sameAttr reports whether two ints attributes (either may be nil) are
// both absent or hold the same ints.
func sameAttr(a, b *Attr) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Type == b.Type && slices.Equal(a.Ints, b.Ints)
}
