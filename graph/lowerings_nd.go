package graph

// GatherND and ScatterND with static shapes: the first k dims of data are
// flattened into one, the k-tuples of indices become linear indices
// (negative entries counted from the end), and a Gather or an
// element scatter along that one axis does the rest.

func init() {
	registerTyped("GatherND", lowerGatherND)
	registerTyped("ScatterND", lowerScatterND)
}

// linearIndex turns the last-axis k-tuples of idx (static shape is, data
// shape ds) into int64 linear indices of shape is[:len(is)-1].
func (l *lowering) linearIndex(idx string, is, ds []int64) (string, int64, error) {
	k := is[len(is)-1]
	if k < 1 || k > int64(len(ds)) {
		return "", 0, l.unsupported("index tuples of length %d for data of rank %d", k, len(ds))
	}
	i := l.cast(idx, Int64)
	// Negative entries count from the end of their axis.
	dims := l.b.Const(FromInt64(append([]int64{}, ds[:k]...), int(k)))
	i = l.op("Where", l.op("Less", i, l.scalarOf(Int64, 0)), l.add(i, dims), i)
	strides := make([]int64, k)
	n := int64(1)
	for j := k - 1; j >= 0; j-- {
		strides[j] = n
		n *= ds[j]
	}
	lin, err := l.reduce("ReduceSum", l.mul(i, l.b.Const(FromInt64(strides, int(k)))), reduceAxes{list: []int64{-1}}, false)
	if err != nil {
		return "", 0, err
	}
	return lin, n, nil
}

func lowerGatherND(l *lowering) error {
	data, idx := l.in(0), l.in(1)
	ds, ok1 := l.staticShape(data)
	is, ok2 := l.staticShape(idx)
	if !ok1 || !ok2 || len(is) == 0 {
		return l.unsupported("GatherND needs static shapes")
	}
	b := int(l.n.AttrInt("batch_dims", 0))
	if b < 0 || b >= len(is) || b >= len(ds) {
		return l.unsupported("batch_dims %d", b)
	}
	batches := int64(1)
	for j := 0; j < b; j++ {
		if is[j] != ds[j] {
			return l.unsupported("batch dims of data %v and indices %v differ", ds, is)
		}
		batches *= ds[j]
	}
	lin, n, err := l.linearIndex(idx, is[b:], ds[b:])
	if err != nil {
		return err
	}
	if b > 0 {
		// The leading batch dims pick a block of n rows each: add j*n for
		// flat batch j, broadcast over the index tuples.
		offsets := make([]int64, batches)
		for j := range offsets {
			offsets[j] = int64(j) * n
		}
		view := make([]int, len(is)-1)
		for j := range view {
			view[j] = 1
			if j < b {
				view[j] = int(is[j])
			}
		}
		lin = l.add(lin, l.b.Const(FromInt64(offsets, view...)))
	}
	k := is[len(is)-1]
	flat := l.reshape(data, append([]int64{batches * n}, ds[b+int(k):]...)...)
	l.finish(0, l.opAttrs("Gather", []string{flat, lin}, IntAttr("axis", 0)))
	return nil
}

// lowerScatterND writes each update slice at its linear index of the
// flattened data ([n, rest]) with ScatterElements along axis 0.
func lowerScatterND(l *lowering) error {
	data, idx, upd := l.in(0), l.in(1), l.in(2)
	ds, ok1 := l.staticShape(data)
	is, ok2 := l.staticShape(idx)
	if !ok1 || !ok2 || len(is) == 0 {
		return l.unsupported("ScatterND needs static shapes")
	}
	lin, n, err := l.linearIndex(idx, is, ds)
	if err != nil {
		return err
	}
	k := is[len(is)-1]
	rest := int64(1)
	for _, d := range ds[k:] {
		rest *= d
	}
	m := int64(1)
	for _, d := range is[:len(is)-1] {
		m *= d
	}
	flat := l.reshape(data, n, rest)
	ix := l.op("Expand", l.reshape(lin, m, 1), l.int64s(m, rest))
	var attrs []*Attr
	attrs = append(attrs, IntAttr("axis", 0))
	if a := l.n.Attr("reduction"); a != nil {
		attrs = append(attrs, a)
	}
	y := l.opAttrs("ScatterElements", []string{flat, ix, l.reshape(upd, m, rest)}, attrs...)
	l.finish(0, l.reshape(y, ds...))
	return nil
}

func init() {
	registerTyped("MeanVarianceNormalization", lowerMVN)
	registerTyped("LRN", lowerLRN)
}

// lowerMVN is (x - E[x]) / (sqrt(E[x²] - E[x]²) + 1e-9) over axes (default
// 0, 2, 3), as ONNX's function body defines it.
func lowerMVN(l *lowering) error {
	x := l.in(0)
	axes := reduceAxes{list: l.n.AttrInts("axes", []int64{0, 2, 3})}
	mean, err := l.reduce("ReduceMean", x, axes, true)
	if err != nil {
		return err
	}
	sq, err := l.reduce("ReduceMean", l.mul(x, x), axes, true)
	if err != nil {
		return err
	}
	sd := l.op("Sqrt", l.sub(sq, l.mul(mean, mean)))
	l.finish(0, l.div(l.sub(x, mean), l.add(sd, l.scalar(x, 1e-9))))
	return nil
}

// lowerLRN sums squares over a window of channels with a Conv of ones on x²
// viewed as [N, 1, C, rest], then x / (bias + alpha/size · sum)**beta.
func lowerLRN(l *lowering) error {
	x := l.in(0)
	xs, static := l.staticShape(x)
	if r := l.rank(x); r < 3 {
		return l.unsupported("LRN needs an input of known rank 3 or more")
	}
	size := l.n.AttrInt("size", 0)
	if size < 1 {
		return l.unsupported("LRN size must be positive")
	}
	d := l.dtypeOr(x)
	ones, err := NewTensor(d, []int{1, 1, int(size), 1})
	if err != nil {
		return l.unsupported("LRN of %v", d)
	}
	for i := 0; i < int(size); i++ {
		ones.SetFloat(i, 1)
	}
	var sum string
	if static {
		rest := int64(1)
		for _, d := range xs[2:] {
			rest *= d
		}
		sq := l.reshape(l.mul(x, x), xs[0], 1, xs[1], rest)
		sum = l.opAttrs("Conv", []string{sq, l.b.Const(ones)}, IntsAttr("pads", (size-1)/2, 0, size/2, 0))
		sum = l.reshape(sum, xs...)
	} else {
		// The same view with the dims read at run time (Specialize folds
		// them once the input shape is known).
		shape := l.op("Shape", x)
		view := l.concat1D(l.slice1D(shape, 0, 1), l.int64s(1), l.slice1D(shape, 1, 2), l.int64s(-1))
		sq, err := l.reshapeTo(l.mul(x, x), view)
		if err != nil {
			return err
		}
		sum = l.opAttrs("Conv", []string{sq, l.b.Const(ones)}, IntsAttr("pads", (size-1)/2, 0, size/2, 0))
		if sum, err = l.reshapeTo(sum, shape); err != nil {
			return err
		}
	}
	alpha := float64(l.n.AttrFloat("alpha", 1e-4))
	beta := float64(l.n.AttrFloat("beta", 0.75))
	bias := float64(l.n.AttrFloat("bias", 1))
	base := l.add(l.mul(sum, l.scalar(x, alpha/float64(size))), l.scalar(x, bias))
	l.finish(0, l.div(x, l.op("Pow", base, l.scalar(x, beta))))
	return nil
}
