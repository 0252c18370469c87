package graph

import "slices"

// Patchify is the fused op of FusePatchEmbedding: Patchify(X) with
// attribute kernel_shape [KH, KW] rearranges X [N, C, H, W] (H and W
// multiples of KH and KW) into the patches of its KH×KW tiles, [N,
// (H/KH)·(W/KW), C·KH·KW]: row oh·(W/KW) + ow of image n holds X[n, c,
// oh·KH + a, ow·KW + b] at column (c·KH + a)·KW + b. Every element is
// copied once; nothing is computed.
const Patchify = "Patchify"

// FusePatchEmbedding rewrites a vision transformer's patch embedding,
// Transpose(Reshape(Conv(X, W, B)), perm [0, 2, 1]), where the Conv's
// windows tile X exactly (kernel = stride, no padding, dilations 1, one
// group) and the Reshape flattens its output's spatial axes ([N, M,
// OH·OW]), into MatMulAdd(Patchify(X), Flatten(W), B) with transB
// (TransposedMatMul without B): one GEMM of the batch's patches by the
// filters, written as [N, OH·OW, M] where the Transpose put it, instead
// of the convolution's per-image planes and a Transpose that copies them
// back. The values are the same sums of the same products (C·KH·KW of them
// per output, in the convolution's tap order, the bias added to the
// rounded product in both), equal to float32 rounding; bit for bit where
// the GEMM splits the transposed product's work as it split the
// convolution's (every gradient of the ViT fixtures, vit_tiny and vit_tv).
// The Conv's gradients read X, W and the output's gradient, not the Conv's
// output, which (with the Reshape's) may have no other reader; those that
// read the output's gradient back through the Transpose and Reshape
// autodiff writes become a GEMM over it and the kept patch matrix, and a
// SumToShape (rewritePatchGradients). Shapes must be known and float32 (a
// specialised graph). It returns the number of patch embeddings rewritten.
func FusePatchEmbedding(g *Graph) int {
	ix := newFuseIndex(g)
	expand := map[*Node][]*Node{}
	drop := map[*Node]bool{}
	fused := 0
	for _, c := range g.Nodes {
		pe, ok := patchEmbedding(g, ix, c)
		if !ok {
			continue
		}
		fused++
		t := pe.t
		l, ckk := (pe.h/pe.kh)*(pe.w/pe.kw), pe.c*pe.kh*pe.kw
		patches := uniqueName(g, ix, t.Outputs[0]+"/patches")
		ix.producer[patches] = c // taken, for uniqueName
		flat := uniqueName(g, ix, c.Inputs[1]+"/flat")
		ix.producer[flat] = c
		g.ValueInfo[patches] = &ValueInfo{Name: patches, Type: staticType(Float32, pe.n, l, ckk)}
		g.ValueInfo[flat] = &ValueInfo{Name: flat, Type: staticType(Float32, pe.m, ckk)}
		product := &Node{Name: c.Name + "/matmul", OpType: TransposedMatMul, Domain: FusedDomain,
			Inputs: []string{patches, flat}, Outputs: []string{t.Outputs[0]},
			Attrs: map[string]*Attr{"transA": IntAttr("transA", 0), "transB": IntAttr("transB", 1)}}
		if len(c.Inputs) == 3 && c.Inputs[2] != "" {
			product.OpType = MatMulAdd
			product.Inputs = append(product.Inputs, c.Inputs[2])
		}
		expand[c] = []*Node{
			{Name: c.Name + "/patchify", OpType: Patchify, Domain: FusedDomain, Inputs: []string{c.Inputs[0]},
				Outputs: []string{patches}, Attrs: map[string]*Attr{"kernel_shape": IntsAttr("kernel_shape", int64(pe.kh), int64(pe.kw))}},
			{Name: c.Name + "/flatten", OpType: "Flatten", Inputs: []string{c.Inputs[1]}, Outputs: []string{flat},
				Attrs: map[string]*Attr{"axis": IntAttr("axis", 1)}},
			product,
		}
		drop[pe.r], drop[t] = true, true
		bias := ""
		if len(c.Inputs) == 3 {
			bias = c.Inputs[2]
		}
		rewritePatchGradients(g, ix, pe, c.Inputs[0], patches, flat, bias, expand, drop)
	}
	if len(expand) == 0 {
		return 0
	}
	out := make([]*Node, 0, len(g.Nodes)+2*len(expand))
	for _, n := range g.Nodes {
		switch {
		case expand[n] != nil:
			out = append(out, expand[n]...)
		case !drop[n]:
			out = append(out, n)
		}
	}
	g.Nodes = out
	return fused
}

// rewritePatchGradients rewrites the gradients of a patch embedding pe
// (its Conv's input x; the forward's patch matrix and flattened filters
// after the rewrite) that read its output's gradient dT [N, L, M] through
// Transpose(dT, [0, 2, 1]) reshaped to [N, M, OH, OW]:
//
//	ConvBackwardFilter(dY, x, S)      → Reshape(MatMulGradB(patches, dT, flat), S)
//	ReduceSum(Reshape(dY, [N, M, L]), axes [0, 2]) → SumToShape(dT, bias)
//
// The filters' gradient Σₙ dT[n]ᵀ·patches[n] is one GEMM over the N·L
// patches reading dT in place, not the patch matrix built again and a
// Transpose of dT; the bias's sums run over dT's rows. The Transpose and
// Reshapes that only those read go (into drop).
func rewritePatchGradients(g *Graph, ix *fuseIndex, pe patchEmbed, x, patches, flat, bias string, expand map[*Node][]*Node, drop map[*Node]bool) {
	l := (pe.h / pe.kh) * (pe.w / pe.kw)
	var constants map[string]*Tensor
	for _, at := range ix.readAt[x] {
		n := g.Nodes[at]
		if n.OpType != "ConvBackwardFilter" || n.Domain != InternalDomain || len(n.Inputs) != 3 || n.Inputs[1] != x ||
			len(n.Outputs) != 1 || n.Outputs[0] == "" || expand[n] != nil || !tilesExactly(n, pe.kh, pe.kw) {
			continue
		}
		r := ix.producer[n.Inputs[0]]
		if r == nil || r.OpType != "Reshape" || !isPlain(r) || len(r.Inputs) != 2 || len(r.Outputs) != 1 ||
			!slices.Equal(knownShape(g, r.Outputs[0]), []int{pe.n, pe.m, pe.h / pe.kh, pe.w / pe.kw}) {
			continue
		}
		t := ix.producer[r.Inputs[0]]
		if t == nil || t.OpType != "Transpose" || !isPlain(t) || len(t.Inputs) != 1 || len(t.Outputs) != 1 ||
			!slices.Equal(t.AttrInts("perm", nil), []int64{0, 2, 1}) || !slices.Equal(knownShape(g, t.Inputs[0]), []int{pe.n, l, pe.m}) {
			continue
		}
		dT := t.Inputs[0]
		grad := uniqueName(g, ix, n.Outputs[0]+"/flat")
		ix.producer[grad] = n
		g.ValueInfo[grad] = &ValueInfo{Name: grad, Type: staticType(Float32, pe.m, pe.c*pe.kh*pe.kw)}
		expand[n] = []*Node{
			{Name: n.Name + "/matmul", OpType: "MatMulGradB", Domain: InternalDomain, Inputs: []string{patches, dT, flat}, Outputs: []string{grad}},
			{Name: n.Name + "/reshape", OpType: "Reshape", Inputs: []string{grad, n.Inputs[2]}, Outputs: []string{n.Outputs[0]}},
		}
		readers := 1 // n
		// The bias's gradient: the sums of dY over the images and positions.
		for _, ra := range ix.readAt[r.Outputs[0]] {
			r2 := g.Nodes[ra]
			if r2 == n {
				continue
			}
			if bias == "" || r2.OpType != "Reshape" || !isPlain(r2) || len(r2.Outputs) != 1 ||
				!slices.Equal(knownShape(g, r2.Outputs[0]), []int{pe.n, pe.m, l}) {
				continue
			}
			sum := ix.onlyReader(r2.Outputs[0])
			if sum == nil || !reducesBatchAndPositions(g, &constants, sum, pe.m) {
				continue
			}
			expand[sum] = []*Node{{Name: sum.Name + "/sum", OpType: "SumToShape", Domain: InternalDomain, Inputs: []string{dT, bias}, Outputs: []string{sum.Outputs[0]}}}
			drop[r2] = true
			readers++
		}
		if len(ix.readAt[r.Outputs[0]]) == readers && !ix.outputs[r.Outputs[0]] {
			drop[r] = true
			if ix.onlyReader(t.Outputs[0]) == r {
				drop[t] = true
			}
		}
	}
}

// reducesBatchAndPositions reports whether n is ReduceSum of an [N, M, L]
// value over axes 0 and 2 (keepdims 0) into [M]: the bias gradient of a
// Conv whose output gradient was flattened to [N, M, L].
func reducesBatchAndPositions(g *Graph, constants *map[string]*Tensor, n *Node, m int) bool {
	if n.OpType != "ReduceSum" || !isPlain(n) || len(n.Outputs) != 1 || n.AttrInt("keepdims", 1) != 0 ||
		n.AttrInt("noop_with_empty_axes", 0) != 0 || !slices.Equal(knownShape(g, n.Outputs[0]), []int{m}) {
		return false
	}
	axes := n.AttrInts("axes", nil)
	if len(n.Inputs) == 2 && n.Inputs[1] != "" {
		if *constants == nil {
			*constants = graphConstants(g)
		}
		var ok bool
		if axes, ok = constInts(*constants, n.Inputs[1]); !ok {
			return false
		}
	}
	norm, err := normAxes(axes, 3)
	if err != nil {
		return false
	}
	slices.Sort(norm)
	return slices.Equal(norm, []int{0, 2})
}

// patchEmbed is a chain FusePatchEmbedding rewrites: the Conv's Reshape
// r and Transpose t, X's shape [n, c, h, w] and the filters' [m, c, kh,
// kw].
type patchEmbed struct {
	r, t                  *Node
	n, c, h, w, m, kh, kw int
}

// patchEmbedding matches the chain FusePatchEmbedding rewrites at Conv c.
func patchEmbedding(g *Graph, ix *fuseIndex, c *Node) (pe patchEmbed, ok bool) {
	if c.OpType != "Conv" || !isPlain(c) || len(c.Inputs) < 2 || len(c.Inputs) > 3 || len(c.Outputs) != 1 || c.Outputs[0] == "" {
		return pe, false
	}
	xs, xd, ok1 := knownTensorType(g, c.Inputs[0])
	ws, wd, ok2 := knownTensorType(g, c.Inputs[1])
	if !ok1 || !ok2 || xd != Float32 || wd != Float32 || len(xs) != 4 || len(ws) != 4 || ws[1] != xs[1] {
		return pe, false
	}
	pe = patchEmbed{n: xs[0], c: xs[1], h: xs[2], w: xs[3], m: ws[0], kh: ws[2], kw: ws[3]}
	if pe.kh < 1 || pe.kw < 1 || pe.kh*pe.kw < 2 || pe.h%pe.kh != 0 || pe.w%pe.kw != 0 || !tilesExactly(c, pe.kh, pe.kw) {
		return pe, false
	}
	if len(c.Inputs) == 3 && c.Inputs[2] != "" {
		if bs, bd, ok := knownTensorType(g, c.Inputs[2]); !ok || bd != Float32 || !slices.Equal(bs, []int{pe.m}) {
			return pe, false
		}
	}
	l := (pe.h / pe.kh) * (pe.w / pe.kw)
	r := ix.onlyReader(c.Outputs[0])
	if r == nil || r.OpType != "Reshape" || !isPlain(r) || len(r.Inputs) != 2 || r.Inputs[0] != c.Outputs[0] ||
		len(r.Outputs) != 1 || !slices.Equal(knownShape(g, r.Outputs[0]), []int{pe.n, pe.m, l}) {
		return pe, false
	}
	t := ix.onlyReader(r.Outputs[0])
	if t == nil || t.OpType != "Transpose" || !isPlain(t) || len(t.Inputs) != 1 || len(t.Outputs) != 1 || t.Outputs[0] == "" ||
		!slices.Equal(t.AttrInts("perm", nil), []int64{0, 2, 1}) || !slices.Equal(knownShape(g, t.Outputs[0]), []int{pe.n, l, pe.m}) {
		return pe, false
	}
	pe.r, pe.t = r, t
	return pe, true
}

// tilesExactly reports whether Conv c's KH×KW windows tile its input with
// no overlap, gap or padding: strides equal to the kernel, dilations 1, one
// group, zero pads, auto_pad NOTSET or VALID, and a kernel_shape (if
// given) equal to the weight's.
func tilesExactly(c *Node, kh, kw int) bool {
	want := []int64{int64(kh), int64(kw)}
	if k := c.AttrInts("kernel_shape", nil); k != nil && !slices.Equal(k, want) {
		return false
	}
	if !slices.Equal(c.AttrInts("strides", []int64{1, 1}), want) || c.AttrInt("group", 1) != 1 {
		return false
	}
	for _, d := range c.AttrInts("dilations", nil) {
		if d != 1 {
			return false
		}
	}
	for _, p := range c.AttrInts("pads", nil) {
		if p != 0 {
			return false
		}
	}
	switch c.AttrString("auto_pad", "NOTSET") {
	case "NOTSET", "VALID":
		return true
	}
	return false
}

// staticType is the tensor type of dtype dt and the known shape dims.
func staticType(dt DType, dims ...int) *Type {
	t := &Type{Kind: KindTensor, DType: dt, HasShape: true, Shape: make([]Dim, len(dims))}
	for i, d := range dims {
		t.Shape[i] = knownDim(int64(d))
	}
	return t
}
