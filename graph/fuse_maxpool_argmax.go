package graph

import (
	"slices"
	"strconv"
)

// MaxPoolArgmax and MaxPoolArgmaxGrad are the fused ops of
// FuseMaxPoolArgmax: a 2-D float32 MaxPool that also writes, per output,
// which tap of its window holds the maximum, and the gradient that routes
// dY through those codes instead of finding each window's maximum in X
// again:
//
//	MaxPoolArgmax(X) = (Y, Codes)                MaxPool's attributes
//	MaxPoolArgmaxGrad(dY, Codes, Shape(X)) = dX  the same attributes
//
// Codes is uint8 of Y's shape. For a window whose taps inside the input
// are rows lo_r .. lo_r+n_r-1 and columns lo_c .. lo_c+n_c-1 (the window cut
// to the input: padding never wins), the code of the tap at (lo_r+i,
// lo_c+j) is i·kw + j, kw = kernel_shape[1], and the chosen tap is MaxPool's
// first maximum: the taps scanned row-major, the first taken and replaced
// only by a strictly greater value (so ties keep the earliest tap, and a
// NaN counts only as the first tap). A window with no tap inside the input
// has code 255 (kernel_shape's product is at most 255, so no tap has it).
// Y equals MaxPool's Y bit for bit and dX equals MaxPoolGrad(dY, X)'s.
//
// The backward then reads 1 byte per output instead of X (the stem pool of
// ResNet-50 reads 1.6 MB of codes in place of 25.7 MB of X), and X need not
// live until the backward for the pool's sake.
const (
	MaxPoolArgmax     = "MaxPoolArgmax"
	MaxPoolArgmaxGrad = "MaxPoolArgmaxGrad"
)

// MaxPoolNoTap is the code of a window with no tap inside the input.
const MaxPoolNoTap = 255

func init() {
	fusedInferRules[MaxPoolArgmax] = func(c *inferCall) error {
		if err := inferRules["MaxPool"](c); err != nil {
			return err
		}
		if len(c.n.Outputs) > 1 && c.n.Outputs[1] != "" {
			if t := c.st.types[c.n.Outputs[0]]; t != nil && t.HasShape {
				c.setOut(1, Uint8, append([]Dim{}, t.Shape...))
			} else {
				c.setUnranked(1, Uint8)
			}
		}
		return nil
	}
	// (dY, Codes, Shape(X)): dX has dY's dtype and the shape held in
	// input 2, as ConvBackwardData's (dY, W, Shape(X)).
	fusedInferRules[MaxPoolArgmaxGrad] = func(c *inferCall) error {
		return internalInferRules["ConvBackwardData"](c)
	}
}

// FuseMaxPoolArgmax rewrites each MaxPool that FuseMaxPoolArgmax can take
// (below) into a MaxPoolArgmax writing its Y and a codes value, and every
// MaxPoolGrad(dY, X) after it with the same attributes into
// MaxPoolArgmaxGrad(dY, codes, X's shape as a constant). A MaxPool is taken
// when it is of the default domain with no Indices output, its X is known
// to be float32 of a known rank-4 shape, its kernel_shape has two entries
// whose product is at most 255, its dilations (if any) are all 1, and at
// least one such MaxPoolGrad reads its X. Nodes are in topological order.
// It returns the number of MaxPools rewritten.
func FuseMaxPoolArgmax(g *Graph) int {
	ix := newFuseIndex(g)
	fused := 0
	for at, n := range g.Nodes {
		if n.OpType != "MaxPool" || !isPlain(n) || len(n.Inputs) != 1 || len(n.Outputs) == 0 || n.Outputs[0] == "" ||
			(len(n.Outputs) > 1 && slices.ContainsFunc(n.Outputs[1:], func(s string) bool { return s != "" })) {
			continue
		}
		x := n.Inputs[0]
		xs, xd, ok := knownTensorType(g, x)
		if !ok || xd != Float32 || len(xs) != 4 || !argmaxWindowFits(n) {
			continue
		}
		var grads []int
		for _, r := range ix.readAt[x] {
			m := g.Nodes[r]
			if r > at && m.OpType == "MaxPoolGrad" && m.Domain == InternalDomain && len(m.Inputs) == 2 &&
				m.Inputs[1] == x && m.Inputs[0] != "" && len(m.Outputs) == 1 && m.Outputs[0] != "" && sameAttrs(n, m) {
				grads = append(grads, r)
			}
		}
		if len(grads) == 0 {
			continue
		}
		y := n.Outputs[0]
		codes := uniqueName(g, ix, y+"/argmax")
		shape := uniqueName(g, ix, x+"/shape")
		dims := make([]int64, len(xs))
		for i, d := range xs {
			dims[i] = int64(d)
		}
		g.Initializers[shape] = FromInt64(dims, len(dims))
		if vi := g.ValueInfo[y]; vi != nil && vi.Type != nil {
			t := *vi.Type
			t.DType = Uint8
			g.ValueInfo[codes] = &ValueInfo{Name: codes, Type: &t}
		}
		pool := &Node{Name: n.Name, OpType: MaxPoolArgmax, Domain: FusedDomain, Inputs: []string{x},
			Outputs: []string{y, codes}, Attrs: n.Attrs}
		g.Nodes[at] = pool
		// The index names the node now at at as the producer of both
		// outputs (codes taken, for uniqueName).
		ix.producer[y], ix.producer[codes] = pool, pool
		ix.at[pool] = at
		for _, r := range grads {
			m := g.Nodes[r]
			g.Nodes[r] = &Node{Name: m.Name, OpType: MaxPoolArgmaxGrad, Domain: FusedDomain,
				Inputs: []string{m.Inputs[0], codes, shape}, Outputs: []string{m.Outputs[0]}, Attrs: m.Attrs}
		}
		fused++
	}
	return fused
}

// argmaxWindowFits reports whether MaxPool n's window has two spatial
// axes, every tap one apart (dilations 1) and at most 255 taps, so that a
// byte holds each tap's code and MaxPoolNoTap.
func argmaxWindowFits(n *Node) bool {
	k := n.AttrInts("kernel_shape", nil)
	if len(k) != 2 || k[0] < 1 || k[1] < 1 || k[0]*k[1] > MaxPoolNoTap {
		return false
	}
	for _, d := range n.AttrInts("dilations", nil) {
		if d != 1 {
			return false
		}
	}
	return true
}

// sameAttrs reports whether a and b have the same attributes, compared by
// value (the scalar, string and list kinds a window op carries; any other
// kind makes them differ).
func sameAttrs(a, b *Node) bool {
	if len(a.Attrs) != len(b.Attrs) {
		return false
	}
	for k, x := range a.Attrs {
		y := b.Attrs[k]
		if y == nil || x.Type != y.Type || x.RefAttrName != "" || y.RefAttrName != "" {
			return false
		}
		switch x.Type {
		case AttrInt:
			if x.I != y.I {
				return false
			}
		case AttrFloat:
			if x.F != y.F {
				return false
			}
		case AttrString:
			if x.S != y.S {
				return false
			}
		case AttrInts:
			if !slices.Equal(x.Ints, y.Ints) {
				return false
			}
		case AttrFloats:
			if !slices.Equal(x.Floats, y.Floats) {
				return false
			}
		case AttrStrings:
			if !slices.Equal(x.Strings, y.Strings) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// uniqueName returns base, or base with a numeric suffix, such that no
// value of g has that name.
func uniqueName(g *Graph, ix *fuseIndex, base string) string {
	name := base
	for i := 1; ; i++ {
		if g.Initializers[name] == nil && ix.producer[name] == nil && !ix.inputs[name] && len(ix.readAt[name]) == 0 &&
			g.ValueInfo[name] == nil {
			return name
		}
		name = base + "_" + strconv.Itoa(i)
	}
}
