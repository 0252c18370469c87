package graph

import "fmt"

// LowerForAutodiff rewrites every node of g whose op has no gradient rule
// but has a lowering into its primitives (recursively), so that autodiff
// only needs rules for primitives. Nodes with rules, and nodes with neither
// a rule nor a lowering, are kept as they are (Gradients reports the latter
// if they lie on the path to the loss). Constants the lowerings introduce
// become initializers. A lowering that needs the types of its inputs
// (GridSample's static shapes) gets those shape inference finds.
func LowerForAutodiff(g *Graph, opset int64) error {
	var st *inferState // shape inference, run once when a lowering needs it
	var out []*Node
	var lower func(n *Node, depth int) error
	lower = func(n *Node, depth int) error {
		if depth > 16 {
			return n.Errorf("lowering recursed too deep")
		}
		if HasGrad(n.Domain, n.OpType) || n.Domain != "" || !HasLowering(n.OpType) {
			out = append(out, n)
			return nil
		}
		sub, consts, _, err := Lower(n, opset)
		if err != nil && typedLowerings[n.OpType] != nil {
			if st == nil {
				st, _ = inferGraph(g, opset, nil, true)
			}
			sub, consts, _, err = LowerWithTypes(n, opset, func(name string) *Type { return st.types[name] },
				func(name string) *Tensor { return st.consts[name] })
		}
		if err != nil {
			// A variant the lowering does not cover: keep the node; it
			// fails later only if it needs a gradient.
			out = append(out, n)
			return nil
		}
		for k, v := range consts {
			if _, dup := g.Initializers[k]; dup {
				return fmt.Errorf("graph: lowering of %q reuses the name %q", n.Label(), k)
			}
			g.Initializers[k] = v
		}
		for _, s := range sub {
			if err := lower(s, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	for _, n := range g.Nodes {
		if err := lower(n, 0); err != nil {
			return err
		}
	}
	g.Nodes = out
	return nil
}
