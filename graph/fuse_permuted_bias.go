package graph

// PermutedMatMulAdd is the fused op of FusePermutedMatMulBias: a
// PermutedMatMul product (grad 0) plus a bias row vector,
//
//	PermutedMatMulAdd(V0, V1, Bias, attrs) = Add(PermutedMatMul(V0, V1, attrs), Bias)
//
// with PermutedMatMul's attributes (views, alpha, permY). nn.MultiheadAttention's
// in-projection is one: x·W_inᵀ over the [T, B, E] view of the activations,
// then its 3E-wide bias. A backend adds the bias in the GEMM's epilogue
// instead of a second pass over the product.
const PermutedMatMulAdd = "PermutedMatMulAdd"

func init() {
	fusedInferRules[PermutedMatMulAdd] = inferPermutedMatMul
}

// FusePermutedMatMulBias rewrites Add(P, Bias), where P is the output of a
// PermutedMatMul with grad 0 whose second operand is a matrix (a weight,
// read as it is or transposed) and that the Add alone reads, into one
// PermutedMatMulAdd, when the specialised shapes show that Bias is a
// float32 row vector of P's last dimension and the sum has P's shape, and
// permY (if any) keeps the product's last axis last. Nodes are in
// topological order. It returns the number of rewrites.
func FusePermutedMatMulBias(g *Graph) int {
	ix := newFuseIndex(g)
	drop := map[*Node]bool{}
	for i, n := range g.Nodes {
		if n.OpType != "Add" || !isPlain(n) || len(n.Inputs) != 2 || len(n.Outputs) != 1 || n.Outputs[0] == "" {
			continue
		}
		for side := 0; side < 2; side++ {
			p, bias := n.Inputs[side], n.Inputs[1-side]
			mm := ix.producer[p]
			if mm == nil || mm.OpType != PermutedMatMul || mm.Domain != FusedDomain || len(mm.Inputs) != 2 || len(mm.Outputs) != 1 ||
				mm.AttrInt("grad", 0) != 0 || drop[mm] || p == bias || ix.outputs[p] || len(ix.readAt[p]) != 1 {
				continue
			}
			if len(mm.AttrInts("fixed1", nil)) != 0 {
				continue // B gathered out of a larger tensor: not a weight matrix
			}
			if perm := mm.AttrInts("permY", nil); len(perm) > 0 && perm[len(perm)-1] != int64(len(perm)-1) {
				continue
			}
			ws, _, okW := knownTensorType(g, mm.Inputs[1])
			ps, pd, ok1 := knownTensorType(g, p)
			os, od, ok2 := knownTensorType(g, n.Outputs[0])
			bs, bd, ok3 := knownTensorType(g, bias)
			if !okW || len(ws) != 2 || !ok1 || !ok2 || !ok3 || pd != Float32 || od != Float32 || bd != Float32 ||
				!SameShape(ps, os) || !isBiasRow(bs, ps) {
				continue
			}
			g.Nodes[i] = &Node{Name: n.Name, OpType: PermutedMatMulAdd, Domain: FusedDomain,
				Inputs: []string{mm.Inputs[0], mm.Inputs[1], bias}, Outputs: []string{n.Outputs[0]}, Attrs: mm.Attrs}
			drop[mm] = true
			break
		}
	}
	if len(drop) == 0 {
		return 0
	}
	removeNodes(g, drop)
	return len(drop)
}
