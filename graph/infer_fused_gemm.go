package graph

// Shape inference for the fused products and normalisations, so that a
// compiled (fused) graph can be sized from its input shapes alone (the CPU
// backend's memory plan from shapes): each output is what the unfused
// chain computed.
func init() {
	fusedInferRules[TransposedMatMul] = inferTransposedMatMul
	fusedInferRules[MatMulAdd] = inferTransposedMatMul // the bias keeps the product's shape
	fusedInferRules[GemmRelu] = inferGemm
	// (Looked up when used: the rule is registered by another file's init.)
	fusedInferRules[BatchNormRelu] = func(c *inferCall) error { return inferRules["BatchNormalization"](c) }
	// BatchNormReluGrad(dR, R, X, scale, mean, var): dX like X, dScale
	// and dBias like scale (BatchNormalizationGrad's outputs).
	fusedInferRules[BatchNormReluGrad] = func(c *inferCall) error {
		dt := c.dtype(0)
		for i, j := range []int{2, 3, 3} {
			if i >= len(c.n.Outputs) || !c.has(j) {
				continue
			}
			s, ok := c.shape(j)
			c.setShapeOrUnranked(i, dt, s, ok)
		}
		return nil
	}
}

// inferTransposedMatMul is MatMul's rule on operands whose last two axes
// are swapped where transA / transB say.
func inferTransposedMatMul(c *inferCall) error {
	a, okA := c.shape(0)
	b, okB := c.shape(1)
	if !okA || !okB || len(a) < 2 || len(b) < 2 {
		c.setUnranked(0, c.dtype(0))
		return nil
	}
	swap := func(s []Dim) []Dim {
		s = append([]Dim{}, s...)
		s[len(s)-1], s[len(s)-2] = s[len(s)-2], s[len(s)-1]
		return s
	}
	if c.n.AttrInt("transA", 0) != 0 {
		a = swap(a)
	}
	if c.n.AttrInt("transB", 0) != 0 {
		b = swap(b)
	}
	if _, err := unifyDims(a[len(a)-1], b[len(b)-2]); err != nil {
		return c.errorf("inner dims differ: %s times %s", dimsString(a), dimsString(b))
	}
	batch, err := broadcastShapes(a[:len(a)-2], b[:len(b)-2])
	if err != nil {
		return c.errorf("batch dims of %s and %s cannot be broadcast", dimsString(a), dimsString(b))
	}
	c.setOut(0, c.dtype(0), append(batch, a[len(a)-2], b[len(b)-1]))
	return nil
}
