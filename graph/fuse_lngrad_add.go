package graph

// LayerNormGradAdd is the fused op of FuseLayerNormGradAdd: the gradient of
// a LayerNormalization whose input also reaches the output through a
// residual connection, the two gradients summed:
//
//	LayerNormGradAdd(dY, X, Scale, R, axis, epsilon) = (Add(R, dX), dScale, dBias)
//	(dX, dScale, dBias) = LayerNormalizationGrad(dY, X, Scale, axis, epsilon)
//
// A backend adds R to each row of dX while the row is in cache, instead of
// a second pass that reads dX back. (Add(R, dX) and Add(dX, R) are the same
// bits.)
const LayerNormGradAdd = "LayerNormGradAdd"

func init() {
	fusedInferRules[LayerNormGradAdd] = func(c *inferCall) error {
		return internalInferRules["LayerNormalizationGrad"](c)
	}
}

// FuseLayerNormGradAdd rewrites Add(R, dX), where dX is the first output
// of a LayerNormalizationGrad read only by that Add, R has dX's known
// shape, dY, X, dX, R and the sum are known to be float32, and R is defined
// before the LayerNormalizationGrad, into one
// LayerNormGradAdd at the LayerNormalizationGrad's place, writing the
// Add's output (its dScale and dBias outputs unchanged). In a pre-norm
// transformer block this is the gradient of every residual stream value
// (x + f(LayerNorm(x))). Nodes are in topological order. It returns the
// number of rewrites.
func FuseLayerNormGradAdd(g *Graph) int {
	ix := newFuseIndex(g)
	replace := map[int]*Node{}
	drop := map[*Node]bool{}
	for _, n := range g.Nodes {
		if n.OpType != "Add" || !isPlain(n) || len(n.Inputs) != 2 || len(n.Outputs) != 1 || n.Outputs[0] == "" {
			continue
		}
		for side := 0; side < 2; side++ {
			dx, r := n.Inputs[side], n.Inputs[1-side]
			ln := ix.producer[dx]
			if ln == nil || ln.OpType != "LayerNormalizationGrad" || ln.Domain != InternalDomain || len(ln.Inputs) != 3 ||
				len(ln.Outputs) == 0 || ln.Outputs[0] != dx || dx == r || ix.outputs[dx] || len(ix.readAt[dx]) != 1 {
				continue
			}
			at := ix.at[ln]
			if replace[at] != nil || !ix.definedBefore(r, at) {
				continue
			}
			ds, dd, ok1 := knownTensorType(g, dx)
			rs, rd, ok2 := knownTensorType(g, r)
			os, od, ok3 := knownTensorType(g, n.Outputs[0])
			_, yd, ok4 := knownTensorType(g, ln.Inputs[0])
			_, xd, ok5 := knownTensorType(g, ln.Inputs[1])
			// float32 throughout: under autocast a bfloat16 R beside a
			// float32 LayerNorm would make the kernel's half adapter
			// round dScale and dBias too, and in bfloat16 the unfused
			// Add reads dX rounded.
			if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || dd != Float32 || rd != dd || od != dd || yd != dd || xd != dd ||
				!SameShape(ds, rs) || !SameShape(ds, os) {
				continue
			}
			outs := append([]string{n.Outputs[0]}, ln.Outputs[1:]...)
			replace[at] = &Node{Name: ln.Name, OpType: LayerNormGradAdd, Domain: FusedDomain,
				Inputs: []string{ln.Inputs[0], ln.Inputs[1], ln.Inputs[2], r}, Outputs: outs, Attrs: ln.Attrs}
			drop[n] = true
			break
		}
	}
	return replaceNodes(g, replace, drop)
}
