package graph

// DropSameShapeSumToShape rewrites SumToShape(G, Like) into Identity(G)
// where G and Like have one known shape: nothing is summed, and Like was
// read only for its shape. Without the rewrite the memory plan keeps Like
// (often a forward activation: attention's transposed q, the masked scores)
// alive until the gradient reaches it, for nothing. Needs the specialised
// graph's shapes (g.ValueInfo). A Transpose, Reshape or Identity that
// made Like for nothing else (attention's transposed queries, once their
// product reads them as a view) goes too, and so on up the chain of such
// copies. It returns the number of rewrites.
func DropSameShapeSumToShape(g *Graph) int {
	n := 0
	var likes []string
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
		likes = append(likes, node.Inputs[1])
		n++
	}
	if n > 0 {
		dropUnreadCopies(g, likes)
	}
	return n
}

// dropUnreadCopies removes the plain Transpose, Reshape and Identity nodes
// that make one of names when nothing reads it (and it is no graph
// output), then those that made their inputs, up each chain. They compute
// nothing but a copy, so no other value changes.
func dropUnreadCopies(g *Graph, names []string) {
	reads := readCounts(g) // graph outputs count as readers
	producer := map[string]int{}
	for i, nd := range g.Nodes {
		for _, o := range nd.Outputs {
			if o != "" {
				producer[o] = i
			}
		}
	}
	drop := map[int]bool{}
	for _, name := range names {
		for reads[name] == 0 {
			i, ok := producer[name]
			if !ok || drop[i] {
				break
			}
			nd := g.Nodes[i]
			if !isPlain(nd) || len(nd.Outputs) != 1 || len(nd.Inputs) == 0 ||
				(nd.OpType != "Transpose" && nd.OpType != "Reshape" && nd.OpType != "Identity") {
				break
			}
			drop[i] = true
			for _, in := range nd.Inputs {
				if in != "" {
					reads[in]--
				}
			}
			name = nd.Inputs[0]
		}
	}
	if len(drop) == 0 {
		return
	}
	kept := make([]*Node, 0, len(g.Nodes)-len(drop))
	for i, nd := range g.Nodes {
		if !drop[i] {
			kept = append(kept, nd)
		}
	}
	g.Nodes = kept
}
