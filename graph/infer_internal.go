package graph

// Shape inference for the gradient ops autodiff emits (domain onnxtrain),
// so that passes after autodiff, the lowering to primitives among them,
// see the types of gradients. Each gradient has the dtype of the incoming
// gradient and the shape of the value it is the gradient of.

func init() {
	// like(j) types every output i from input j's shape and input 0's dtype.
	like := func(js ...int) inferFunc {
		return func(c *inferCall) error {
			dt := c.dtype(0)
			for i, j := range js {
				if j < 0 || !c.has(j) {
					continue
				}
				d := dt
				if d == Undefined {
					d = c.dtype(j)
				}
				s, ok := c.shape(j)
				if d == Undefined {
					continue
				}
				c.setShapeOrUnranked(i, d, s, ok)
			}
			return nil
		}
	}
	// fromValue types output 0 with the shape held in input j.
	fromValue := func(j int) inferFunc {
		return func(c *inferCall) error {
			dt := c.dtype(0)
			if dt == Undefined {
				return nil
			}
			if s := c.sym(j); s != nil && !s.scalar {
				c.setOut(0, dt, append([]Dim{}, s.dims...))
				return nil
			}
			if v, ok := c.ints(j); ok {
				dims := make([]Dim, len(v))
				for k, d := range v {
					dims[k] = knownDim(d)
				}
				c.setOut(0, dt, dims)
			}
			return nil
		}
	}
	for op, f := range map[string]inferFunc{
		"SumToShape":                    like(1),
		"UnreduceTo":                    like(1),
		"MatMulGradA":                   like(1),
		"MatMulGradB":                   like(2),
		"SoftmaxGrad":                   like(1),
		"LogSoftmaxGrad":                like(1),
		"GatherGrad":                    like(1),
		"GatherElementsGrad":            like(1),
		"MaxPoolGrad":                   like(1),
		"GlobalMaxPoolGrad":             like(1),
		"SliceGrad":                     like(1),
		"PadGrad":                       like(1),
		"TileGrad":                      like(1),
		"BatchNormalizationGrad":        like(1, 2, 2, 2, 2),
		"GroupNormalizationGrad":        like(1, 2, 2),
		"SoftmaxCrossEntropyLossGrad":   like(1),
		"NegativeLogLikelihoodLossGrad": fromValue(1),
		"ConvBackwardData":              fromValue(2),
		"ConvBackwardFilter":            fromValue(2),
		"ConvTransposeBackwardData":     fromValue(2),
		"ConvTransposeBackwardFilter":   fromValue(2),
		"AveragePoolGrad":               fromValue(1),
		"ResizeGrad":                    fromValue(1),
	} {
		if _, ok := internalInferRules[op]; !ok {
			internalInferRules[op] = f
		}
	}
	internalInferRules["SplitLike"] = func(c *inferCall) error {
		dt := c.dtype(0)
		if dt == Undefined {
			return nil
		}
		for i := range c.n.Outputs {
			s, ok := c.shape(i + 1)
			c.setShapeOrUnranked(i, dt, s, ok)
		}
		return nil
	}
}
