package graph

import "fmt"

// InlineFunctions replaces every call of a model-local function (in g and its
// subgraphs) by the function's body, with fresh value names and the caller's
// attributes substituted for attribute references.
func InlineFunctions(g *Graph, funcs map[string]*Function) error {
	if len(funcs) == 0 {
		return nil
	}
	counter := 0
	return inlineIn(g, funcs, &counter, 0)
}

func inlineIn(g *Graph, funcs map[string]*Function, counter *int, depth int) error {
	if depth > 32 {
		return fmt.Errorf("graph: functions nested more than 32 deep (recursive function?)")
	}
	var out []*Node
	changed := false
	for _, n := range g.Nodes {
		for _, sg := range n.Subgraphs() {
			if err := inlineIn(sg, funcs, counter, depth); err != nil {
				return err
			}
		}
		fn, ok := funcs[n.Domain+":"+n.OpType]
		if !ok {
			out = append(out, n)
			continue
		}
		changed = true
		*counter++
		prefix := fmt.Sprintf("%s/%s#%d/", n.Label(), fn.Name, *counter)
		rename := map[string]string{"": ""}
		for i, formal := range fn.Inputs {
			rename[formal] = n.Input(i)
		}
		for i, formal := range fn.Outputs {
			if i < len(n.Outputs) {
				rename[formal] = n.Outputs[i]
			}
		}
		name := func(s string) string {
			if r, ok := rename[s]; ok {
				return r
			}
			r := prefix + s
			rename[s] = r
			return r
		}
		for _, bn := range fn.Nodes {
			c := &Node{Name: prefix + bn.Name, OpType: bn.OpType, Domain: bn.Domain, Attrs: map[string]*Attr{}}
			for _, in := range bn.Inputs {
				c.Inputs = append(c.Inputs, name(in))
			}
			for _, o := range bn.Outputs {
				c.Outputs = append(c.Outputs, name(o))
			}
			for k, a := range bn.Attrs {
				if a.RefAttrName != "" {
					if v := n.Attr(a.RefAttrName); v != nil {
						cp := *v
						cp.Name = k
						c.Attrs[k] = &cp
					} else if v := fn.AttrDefaults[a.RefAttrName]; v != nil {
						cp := *v
						cp.Name = k
						c.Attrs[k] = &cp
					}
					continue
				}
				c.Attrs[k] = a
			}
			out = append(out, c)
		}
	}
	g.Nodes = out
	if changed {
		// Bodies may call functions too.
		return inlineIn(g, funcs, counter, depth+1)
	}
	return nil
}
