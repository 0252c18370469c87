package graph

// DropSameShapeSumToShape rewrites SumToShape(G, Like) into Identity(G)
// where G and Like have one known shape: nothing is summed, and Like was
// read only for its shape. Without the rewrite the memory plan keeps Like
// (often a forward activation: attention's transposed q, the masked scores)
// alive until the gradient reaches it, for nothing. Needs the specialised
// graph's shapes (g.ValueInfo). It returns the number of rewrites.
func DropSameShapeSumToShape(g *Graph) int {
	n := 0
	for i, node := range g.Nodes {
		if node.OpType != "SumToShape" || node.Domain != InternalDomain || len(node.Inputs) != 2 || len(node.Outputs) != 1 {
			continue
		}
		a, b := knownShape(g, node.Inputs[0]), knownShape(g, node.Inputs[1])
		if a == nil || b == nil || !SameShape(a, b) {
			continue
		}
		// A new node: a specialised graph shares its nodes with the
		// graph it was made from.
		g.Nodes[i] = &Node{Name: node.Name, OpType: "Identity", Inputs: []string{node.Inputs[0]}, Outputs: []string{node.Outputs[0]}}
		n++
	}
	return n
}
