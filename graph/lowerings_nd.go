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
	if l.n.AttrInt("batch_dims", 0) != 0 {
		return l.unsupported("GatherND with batch_dims")
	}
	lin, n, err := l.linearIndex(idx, is, ds)
	if err != nil {
		return err
	}
	k := is[len(is)-1]
	flat := l.reshape(data, append([]int64{n}, ds[k:]...)...)
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
