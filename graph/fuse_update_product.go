package graph

import (
	"math"
	"slices"
)

// UpdateProductMinBytes is the smallest weight (in bytes) whose update
// FuseUpdateProduct fuses with the product that makes its gradient: the
// fused node moves that product to the update's place, after the weight's
// last reader, so its operands live a little longer, and makes it a block
// of rows at a time, which pays where the gradient is large (the GPT's
// 50257-wide head: 147 MiB). Tests set it lower.
var UpdateProductMinBytes int64 = 16 << 20

// FuseUpdateProduct rewrites each SGDUpdate (or AdamUpdate) of one float32
// matrix X of at least minBytes whose gradient is MatMulGradB(dY, A, X)
// over every row of the batch (A [..., m, k] and dY [..., m, n] with the
// same leading dimensions, X [k, n]) that nothing else reads — directly or
// through Identities and the per-tensor ClipGradNorm that reports its norm
// with an infinite max_norm, as FuseUpdateGathered follows them — into
// SGDUpdateProduct(consts, hyper[, skip][, max_norm], A, X, dY[, B]) (or
// AdamUpdateProduct(..., A, X, dY, M, V[, MX])) at the update's place: the
// gradient is made and applied a block of rows at a time, never held whole
// (optimizer_ops.go). A finite max_norm needs the whole gradient before any
// update; such updates are left alone. It returns the number of updates
// rewritten.
func FuseUpdateProduct(g *Graph, minBytes int64) int {
	forms := map[string]string{SGDUpdateOp: SGDUpdateProductOp, AdamUpdateOp: AdamUpdateProductOp}
	return fuseUpdates(g, forms, func(ix *fuseIndex, at int, x string, src gradUpdateSource) []string {
		p := src.producer
		if p.OpType != "MatMulGradB" || p.Domain != InternalDomain || len(p.Inputs) != 3 ||
			p.Inputs[2] != x || p.Inputs[0] == "" || p.Inputs[1] == "" || p.Inputs[0] == x || p.Inputs[1] == x {
			return nil
		}
		if src.clip != nil && !infiniteScalar(g, src.clip.Inputs[0]) {
			return nil
		}
		xs, xd, ok := knownTensorType(g, x)
		if !ok || xd != Float32 || len(xs) != 2 || int64(xs[0])*int64(xs[1])*4 < minBytes {
			return nil
		}
		as, ad, okA := knownTensorType(g, p.Inputs[1])
		ds, dd, okD := knownTensorType(g, p.Inputs[0])
		if !okA || !okD || ad != Float32 || dd != Float32 || len(as) < 2 || len(as) != len(ds) ||
			as[len(as)-1] != xs[0] || ds[len(ds)-1] != xs[1] || !slices.Equal(as[:len(as)-1], ds[:len(ds)-1]) {
			return nil
		}
		if updatedBetween(g, ix.at[p], at, p.Inputs[0], p.Inputs[1]) {
			return nil
		}
		return []string{p.Inputs[1], x, p.Inputs[0]}
	})
}

// infiniteScalar reports whether name is a one-element float32
// initializer holding +Inf (the max_norm of a ClipGradNorm that only
// reports the norm).
func infiniteScalar(g *Graph, name string) bool {
	t := g.Initializers[name]
	if t == nil || t.DType != Float32 || t.Size() != 1 {
		return false
	}
	return math.IsInf(float64(t.Float32s()[0]), 1)
}

// updatedBetween reports whether a node strictly between positions lo and
// hi replaces one of names in place (an optimizer update of a parameter
// the product reads): the product, moved to hi, would read the new value.
func updatedBetween(g *Graph, lo, hi int, names ...string) bool {
	for _, m := range g.Nodes[lo+1 : hi] {
		for _, in := range UpdatedInput(m) {
			if in >= 0 && slices.Contains(names, m.Inputs[in]) {
				return true
			}
		}
	}
	return false
}
