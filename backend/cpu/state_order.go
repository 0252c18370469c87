package cpu

// A state buffer that other nodes of the step read (a parameter: the
// forward and backward passes read it) may still be updated in place by
// an optimizer-step node placed after them (the update fused into
// backward, train.Program.BindUpdate). The executor runs a plan's steps
// one after another (a kernel may use many goroutines, but returns when
// its work is done), so the update cannot race a reader that comes
// before it: a reader must not come after it, and neither may a reader of
// any view of the buffer (Reshape, Flatten, Squeeze, Unsqueeze, Identity
// share their input's storage), nor may the buffer or a view be a graph
// output.

// readersBefore reports whether every read of state (and of the views of
// it the plan makes) other than step u's own is by a step before u, and
// no graph output is one of them.
func readersBefore(p *plan, state string, u int) bool {
	alias := map[string]bool{state: true}
	for s := range p.steps {
		n := p.steps[s].node
		if viewOps[n.OpType] && len(n.Inputs) > 0 && alias[n.Inputs[0]] && len(n.Outputs) > 0 && n.Outputs[0] != "" {
			alias[n.Outputs[0]] = true
		}
	}
	for _, o := range p.g.Outputs {
		if alias[o.Name] {
			return false
		}
	}
	for s := range p.steps {
		if s < u {
			continue
		}
		n := p.steps[s].node
		for _, in := range n.Inputs {
			if !alias[in] {
				continue
			}
			if s != u || in != state {
				return false
			}
		}
		for _, sg := range n.Subgraphs() {
			for _, name := range sg.OuterScopeNames() {
				if alias[name] {
					return false
				}
			}
		}
	}
	// Step u reads the state once, as the operand it replaces.
	reads := 0
	for _, in := range p.steps[u].node.Inputs {
		if in == state {
			reads++
		}
	}
	return reads == 1
}

// transientInPlace reports whether step s, an optimizer-step op, may write
// its output j into its input in (a value of the run, not state): the
// value and every value it is a view of are made by the run (not inputs,
// initializers or state), are read by nothing but the next link of that
// chain and finally by step s, and none is a graph output. Clipping the
// step's own gradients then needs no copy of them.
func transientInPlace(p *plan, readers map[string]int, s int, in string) bool {
	fed := map[string]bool{}
	for _, v := range p.g.Inputs {
		fed[v.Name] = true
	}
	for name := range p.g.Initializers {
		fed[name] = true
	}
	outs := map[string]bool{}
	for _, o := range p.g.Outputs {
		outs[o.Name] = true
	}
	producer := map[string]int{}
	for i := range p.steps {
		for _, o := range p.steps[i].node.Outputs {
			if o != "" {
				producer[o] = i
			}
		}
	}
	reads := 0
	for _, x := range p.steps[s].node.Inputs {
		if x == in {
			reads++
		}
	}
	if reads != 1 {
		return false
	}
	v := in
	for range len(p.steps) {
		if fed[v] || outs[v] || readers[v] != 1 {
			return false
		}
		i, ok := producer[v]
		if !ok || i >= s {
			return false
		}
		n := p.steps[i].node
		if !viewOps[n.OpType] || len(n.Inputs) == 0 || n.Outputs[0] != v {
			return true // made by a kernel into storage of its own
		}
		v = n.Inputs[0]
	}
	return false
}
