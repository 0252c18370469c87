package graph

import "fmt"

// TopoSort orders g.Nodes so that every node comes after the producers of its
// inputs (including values its subgraphs capture). Among ready nodes the file
// order is kept, so an already sorted graph is unchanged. It fails on cycles
// and on inputs no one produces.
func TopoSort(g *Graph) error {
	return topoSortScope(g, nil)
}

// TopoSortSubgraph sorts the body of If, Loop or Scan: names the body
// captures from enclosing graphs count as available.
func TopoSortSubgraph(g *Graph) error {
	outer := map[string]bool{}
	for _, name := range g.OuterScopeNames() {
		outer[name] = true
	}
	return topoSortScope(g, outer)
}

func topoSortScope(g *Graph, outer map[string]bool) error {
	avail := map[string]bool{"": true}
	for k := range outer {
		avail[k] = true
	}
	for _, in := range g.Inputs {
		avail[in.Name] = true
	}
	for name := range g.Initializers {
		avail[name] = true
	}
	needs := make([][]string, len(g.Nodes))
	for i, n := range g.Nodes {
		needs[i] = append(needs[i], n.Inputs...)
		for _, sg := range n.Subgraphs() {
			needs[i] = append(needs[i], sg.OuterScopeNames()...)
		}
	}
	producedBy := map[string]int{}
	for i, n := range g.Nodes {
		for _, o := range n.Outputs {
			if o != "" {
				producedBy[o] = i
			}
		}
	}
	// Kahn's algorithm with a stable, index-ordered ready set.
	waiting := make([]int, len(g.Nodes))
	users := map[string][]int{}
	for i := range g.Nodes {
		seen := map[string]bool{}
		for _, name := range needs[i] {
			if avail[name] || seen[name] {
				continue
			}
			seen[name] = true
			if _, ok := producedBy[name]; !ok {
				return g.Nodes[i].Errorf("input %q is not produced by any node, graph input or initializer", name)
			}
			waiting[i]++
			users[name] = append(users[name], i)
		}
	}
	done := make([]bool, len(g.Nodes))
	order := make([]*Node, 0, len(g.Nodes))
	// Simple O(n^2)-worst scan that keeps file order among ready nodes;
	// graphs are sorted already in practice, so one pass suffices.
	for len(order) < len(g.Nodes) {
		progressed := false
		for i, n := range g.Nodes {
			if done[i] || waiting[i] > 0 {
				continue
			}
			done[i] = true
			progressed = true
			order = append(order, n)
			for _, o := range n.Outputs {
				if o == "" {
					continue
				}
				for _, u := range users[o] {
					waiting[u]--
				}
				delete(users, o)
			}
		}
		if !progressed {
			for i, n := range g.Nodes {
				if !done[i] {
					return n.Errorf("graph %q has a cycle through this node", g.Name)
				}
			}
		}
	}
	g.Nodes = order
	// Subgraphs see every name of this scope.
	scope := map[string]bool{}
	for k := range avail {
		scope[k] = true
	}
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			scope[o] = true
		}
	}
	for _, n := range g.Nodes {
		for _, sg := range n.Subgraphs() {
			if err := topoSortScope(sg, scope); err != nil {
				return fmt.Errorf("subgraph of %q: %w", n.Label(), err)
			}
		}
	}
	return nil
}

// RemoveDeadNodes drops nodes none of whose outputs reach a graph output, and
// initializers no node uses. It returns the number of nodes removed.
func RemoveDeadNodes(g *Graph) int {
	live := map[string]bool{}
	for _, o := range g.Outputs {
		live[o.Name] = true
	}
	keep := make([]bool, len(g.Nodes))
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := g.Nodes[i]
		used := false
		for _, o := range n.Outputs {
			if live[o] {
				used = true
				break
			}
		}
		if !used {
			continue
		}
		keep[i] = true
		for _, in := range n.Inputs {
			live[in] = true
		}
		for _, sg := range n.Subgraphs() {
			for _, name := range sg.OuterScopeNames() {
				live[name] = true
			}
		}
	}
	out := g.Nodes[:0]
	removed := 0
	for i, n := range g.Nodes {
		if keep[i] {
			out = append(out, n)
		} else {
			removed++
		}
	}
	g.Nodes = out
	isInput := map[string]bool{}
	for _, in := range g.Inputs {
		isInput[in.Name] = true
	}
	for name := range g.Initializers {
		if !live[name] && !isInput[name] {
			delete(g.Initializers, name)
		}
	}
	return removed
}
