package train

// refreshHostGrads re-reads the gradient sums into the host tensors the
// optimizer is fed (Params' Grad, from GradSums) after an op changed them
// in the program's state (clipping, unscaling), where that state is not
// host memory (a GPU backend): there the host tensors are copies, and the
// optimizer step would otherwise read the values from before the op. A
// backend whose state is host memory (the CPU one) needs nothing.
func (p *Program) refreshHostGrads() error {
	if len(p.Params) == 0 {
		return nil
	}
	st, err := p.stateful()
	if err != nil {
		return err
	}
	if st.HostState(GradStateName(p.Params[0].Name)) != nil {
		return nil
	}
	_, err = p.GradSums()
	return err
}
