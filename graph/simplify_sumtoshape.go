package graph

import "slices"

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
	dropUnreadProducers(g, likes, copyOps)
	return n
}

// copyOps are the ops that compute nothing but a copy of their input:
// DropSameShapeSumToShape drops them once they make a value nothing reads.
var copyOps = map[string]bool{"Transpose": true, "Reshape": true, "Identity": true}

// dropUnreadProducers removes the producer of each of names that nothing
// reads any more (no node, graph output or subgraph) when it is a plain
// node of one of ops, then does the same for that node's inputs, up each
// chain. It returns the number of nodes removed.
func dropUnreadProducers(g *Graph, names []string, ops map[string]bool) int {
	reads := readCounts(g) // graph outputs and subgraph names count as readers
	producer := g.Producers()
	drop := map[*Node]bool{}
	work := slices.Clone(names)
	for len(work) > 0 {
		nd := producer[work[len(work)-1]]
		work = work[:len(work)-1]
		if nd == nil || drop[nd] || !isPlain(nd) || !ops[nd.OpType] {
			continue
		}
		read := false
		for _, o := range nd.Outputs {
			read = read || (o != "" && reads[o] > 0)
		}
		if read {
			continue
		}
		drop[nd] = true
		for _, in := range nd.Inputs {
			if in != "" {
				reads[in]--
				work = append(work, in)
			}
		}
	}
	if len(drop) > 0 {
		removeNodes(g, drop)
	}
	return len(drop)
}
