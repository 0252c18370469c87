package graph

// MatMulAddAdd is the fused op of FuseMatMulAddResidual, a Linear layer
// whose output is added to a residual stream (the MLP's last layer in ViT
// and GPT blocks):
//
//	MatMulAddAdd(A, B, Bias, R, transA, transB) = Add(R, MatMulAdd(A, B, Bias, transA, transB))
//
// with R of the product's shape. A backend adds R in the GEMM's epilogue,
// after the bias, while each block of the product is in cache.
const MatMulAddAdd = "MatMulAddAdd"

func init() {
	fusedInferRules[MatMulAddAdd] = inferTransposedMatMul // R and the bias keep the product's shape
}

// FuseMatMulAddResidual rewrites Add(R, P), where P is a MatMulAdd's output
// (directly, or through a Dropout of constant ratio 0 whose mask nothing
// reads), read by nothing else, and R has P's known shape and is defined
// before the MatMulAdd, into one MatMulAddAdd at the Add's place. Nodes are
// in topological order. It returns the number of rewrites.
func FuseMatMulAddResidual(g *Graph) int {
	ix := newFuseIndex(g)
	drop := map[*Node]bool{}
	single := func(name string) bool { return !ix.outputs[name] && len(ix.readAt[name]) == 1 }
	for i, n := range g.Nodes {
		if n.OpType != "Add" || !isPlain(n) || len(n.Inputs) != 2 || len(n.Outputs) != 1 || n.Outputs[0] == "" {
			continue
		}
		for side := 0; side < 2; side++ {
			z, r := n.Inputs[side], n.Inputs[1-side]
			if z == r || !single(z) {
				continue
			}
			p, dropout := z, (*Node)(nil)
			if d := ix.producer[z]; d != nil && zeroRatioDropout(g, d, ix.producer) && len(d.Inputs) >= 1 {
				p, dropout = d.Inputs[0], d
				if !single(p) {
					continue
				}
			}
			mm := ix.producer[p]
			if mm == nil || mm.OpType != MatMulAdd || mm.Domain != FusedDomain || len(mm.Inputs) != 3 || len(mm.Outputs) != 1 ||
				drop[mm] || !ix.definedBefore(r, ix.at[mm]) {
				continue
			}
			ps, pd, ok1 := knownTensorType(g, p)
			rs, rd, ok2 := knownTensorType(g, r)
			os, _, ok3 := knownTensorType(g, n.Outputs[0])
			if !ok1 || !ok2 || !ok3 || pd != Float32 || rd != Float32 || !SameShape(ps, rs) || !SameShape(ps, os) {
				continue
			}
			g.Nodes[i] = &Node{Name: n.Name, OpType: MatMulAddAdd, Domain: FusedDomain,
				Inputs: []string{mm.Inputs[0], mm.Inputs[1], mm.Inputs[2], r}, Outputs: []string{n.Outputs[0]}, Attrs: mm.Attrs}
			drop[mm] = true
			if dropout != nil {
				drop[dropout] = true
			}
			break
		}
	}
	if len(drop) == 0 {
		return 0
	}
	n := 0
	for d := range drop {
		if d.OpType == MatMulAdd {
			n++
		}
	}
	removeNodes(g, drop)
	return n
}
