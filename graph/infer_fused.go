package graph

// Shape inference for the elementwise fused ops: GeluErf's scalar
// constants leave Y, D and A shaped as X; the gradients' output is the
// broadcast of their inputs, as the unfused chains'. Others keep the types
// their outputs had before the fusion (ValueInfo).
func init() {
	fusedInferRules[GeluErf] = inferSameAsInputAll
	for _, op := range []string{ReluGrad, ErfGrad, GeluErfGrad} {
		fusedInferRules[op] = inferVariadic
	}
}

// inferSameAsInputAll gives every output input 0's type and shape.
func inferSameAsInputAll(c *inferCall) error {
	t := c.typ(0)
	if t == nil {
		return nil
	}
	s, ok := c.shape(0)
	for i := range c.n.Outputs {
		c.setShapeOrUnranked(i, t.DType, s, ok)
	}
	return nil
}
