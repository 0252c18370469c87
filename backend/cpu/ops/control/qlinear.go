package control

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// qparams is a quantized operand's scale and zero point, read as float32
// and int32, with the element of each that applies to a row or column.
type qparams struct {
	scale []float32
	zp    []int32
	index []int // per row/column of the operand; nil: per tensor (index 0)
}

func (q *qparams) at(i int) (float32, int32) {
	j := 0
	if q.index != nil {
		j = q.index[i]
	}
	z := int32(0)
	if q.zp != nil {
		z = q.zp[j]
	}
	return q.scale[j], z
}

// readQParams reads a scale and zero point pair. lines is the shape of the
// operand's rows (for a: batch dims and M) or columns (for b: batch dims and
// N); lineAxis is the axis of the operand that the scale does not vary
// along (a: the last, K; b: the second last, K). A scalar or one-element
// scale is per tensor; a 1-D scale of the line count is per line; a scale of
// the operand's rank with 1 on lineAxis broadcasts over the batch dims.
func readQParams(n *graph.Node, name string, scale, zp *graph.Tensor, operand []int, lines []int, lineAxis int) (*qparams, error) {
	if scale == nil {
		return nil, n.Errorf("%s_scale is required", name)
	}
	q := &qparams{}
	var err error
	if q.scale, err = asFloat32(n, name+"_scale", scale); err != nil {
		return nil, err
	}
	if zp != nil {
		if zp.Size() != scale.Size() {
			return nil, n.Errorf("%s_zero_point has shape %v, %s_scale %v: they must match", name, zp.Shape, name, scale.Shape)
		}
		if q.zp, err = asInt32(n, name+"_zero_point", zp); err != nil {
			return nil, err
		}
	}
	if scale.Size() == 1 {
		return q, nil
	}
	last := lines[len(lines)-1]
	switch {
	case scale.Rank() == 1 && scale.Shape[0] == last:
		total := 1
		for _, d := range lines {
			total *= d
		}
		q.index = make([]int, total)
		for i := range q.index {
			q.index[i] = i % last
		}
	case scale.Rank() == len(operand) && len(operand) >= 2 && scale.Shape[lineAxis] == 1:
		sh := append(append([]int{}, scale.Shape[:lineAxis]...), scale.Shape[lineAxis+1:]...)
		if _, err := kern.BroadcastShape(sh, lines); err != nil {
			return nil, n.Errorf("%s_scale has shape %v, which does not fit %s %v", name, scale.Shape, name, operand)
		}
		q.index = kern.BroadcastIndex(sh, lines)
	default:
		return nil, n.Errorf("%s_scale has shape %v, which does not fit %s %v (want a scalar or per-%s values)", name, scale.Shape, name, operand, map[string]string{"a": "row", "b": "column", "w": "output-channel"}[name])
	}
	return q, nil
}

// qlinearMatMulKernel implements QLinearMatMul: numpy-style matmul of the
// integer operands less their zero points, accumulated in int32, rescaled
// by a_scale*b_scale/y_scale and requantized to y's zero point.
func qlinearMatMulKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 8); err != nil {
		return nil, err
	}
	a, b := in[0], in[3]
	if a.Rank() == 0 || b.Rank() == 0 {
		return nil, n.Errorf("operands must have rank >= 1, have %v and %v", a.Shape, b.Shape)
	}
	aShape, bShape := a.Shape, b.Shape
	if len(aShape) == 1 {
		aShape = []int{1, aShape[0]}
	}
	if len(bShape) == 1 {
		bShape = []int{bShape[0], 1}
	}
	ra, rb := len(aShape), len(bShape)
	m, k, k2, nn := aShape[ra-2], aShape[ra-1], bShape[rb-2], bShape[rb-1]
	if k != k2 {
		return nil, n.Errorf("a %v and b %v: inner dimensions %d and %d differ", a.Shape, b.Shape, k, k2)
	}
	batch, err := kern.BroadcastShape(aShape[:ra-2], bShape[:rb-2])
	if err != nil {
		return nil, n.Errorf("batch dims of a %v and b %v: %v", a.Shape, b.Shape, err)
	}
	aRows := append(append([]int{}, aShape[:ra-2]...), m)
	bCols := append(append([]int{}, bShape[:rb-2]...), nn)
	ap, err := readQParams(n, "a", in[1], in[2], aShape, aRows, ra-1)
	if err != nil {
		return nil, err
	}
	bp, err := readQParams(n, "b", in[4], in[5], bShape, bCols, rb-2)
	if err != nil {
		return nil, err
	}
	ys, err := asFloat32(n, "y_scale", in[6])
	if err != nil {
		return nil, err
	}
	yzp, err := asInt32(n, "y_zero_point", in[7])
	if err != nil {
		return nil, err
	}
	if len(ys) != 1 || len(yzp) != 1 {
		return nil, n.Errorf("y_scale and y_zero_point must be scalars, have shapes %v and %v", in[6].Shape, in[7].Shape)
	}
	lo, hi, ok := quantRange(in[7].DType)
	if !ok {
		return nil, n.Errorf("y_zero_point has dtype %v, want uint8 or int8", in[7].DType)
	}
	av, err := asInt32(n, "a", a)
	if err != nil {
		return nil, err
	}
	bv, err := asInt32(n, "b", b)
	if err != nil {
		return nil, err
	}
	// Subtract the zero points once: a per row, b per column.
	for r := 0; r < len(av)/max(k, 1); r++ {
		_, z := ap.at(r)
		for p := 0; p < k; p++ {
			av[r*k+p] -= z
		}
	}
	for i := range bv {
		bb, rem := i/(k*nn), i%(k*nn)
		_, z := bp.at(bb*nn + rem%nn)
		bv[i] -= z
	}
	outShape := append(append([]int{}, batch...), m, nn)
	nBatch := 1
	for _, d := range batch {
		nBatch *= d
	}
	aIdx := kern.BroadcastIndex(aShape[:ra-2], batch)
	bIdx := kern.BroadcastIndex(bShape[:rb-2], batch)
	final := append([]int{}, batch...)
	if len(a.Shape) > 1 {
		final = append(final, m)
	}
	if len(b.Shape) > 1 {
		final = append(final, nn)
	}
	y, err := kern.New(n, in[7].DType, outShape)
	if err != nil {
		return nil, err
	}
	acc := make([]int32, m*nn)
	for bi := 0; bi < nBatch; bi++ {
		ab, bb := aIdx[bi], bIdx[bi]
		igemm(m, nn, k, av[ab*m*k:(ab+1)*m*k], bv[bb*k*nn:(bb+1)*k*nn], acc)
		for i := 0; i < m; i++ {
			sa, _ := ap.at(ab*m + i)
			for j := 0; j < nn; j++ {
				sb, _ := bp.at(bb*nn + j)
				mult := float64(sa * sb / ys[0])
				requantize(y, (bi*m+i)*nn+j, acc[i*nn+j], mult, yzp[0], lo, hi)
			}
		}
	}
	y.Shape = final
	return []*graph.Tensor{y}, nil
}

// convGeometry is the resolved window arithmetic of an N-D convolution.
type convGeometry struct {
	in, kernel, out      []int
	strides, dilations   []int
	padBegin             []int
	inSize, kSize, oSize int
}

// newConvGeometry resolves kernel_shape, strides, dilations, pads and
// auto_pad for spatial input dims in and kernel dims k.
func newConvGeometry(n *graph.Node, in, k []int) (*convGeometry, error) {
	s := len(in)
	g := &convGeometry{in: in, kernel: k, out: make([]int, s), strides: make([]int, s), dilations: make([]int, s), padBegin: make([]int, s)}
	if ks := n.AttrInts("kernel_shape", nil); ks != nil {
		if len(ks) != s || !graph.SameShape(graph.IntsToInt(ks), k) {
			return nil, n.Errorf("kernel_shape %v does not match the weights' spatial shape %v", ks, k)
		}
	}
	fill := func(name string, dst []int) error {
		v := n.AttrInts(name, nil)
		if v == nil {
			for i := range dst {
				dst[i] = 1
			}
			return nil
		}
		if len(v) != s {
			return n.Errorf("%s has %d entries, want %d (one per spatial dim)", name, len(v), s)
		}
		for i, x := range v {
			if x < 1 {
				return n.Errorf("%s[%d] is %d, want >= 1", name, i, x)
			}
			dst[i] = int(x)
		}
		return nil
	}
	if err := fill("strides", g.strides); err != nil {
		return nil, err
	}
	if err := fill("dilations", g.dilations); err != nil {
		return nil, err
	}
	pads := n.AttrInts("pads", nil)
	autoPad := n.AttrString("auto_pad", "NOTSET")
	if pads != nil && len(pads) != 2*s {
		return nil, n.Errorf("pads has %d entries, want %d", len(pads), 2*s)
	}
	g.inSize, g.kSize, g.oSize = 1, 1, 1
	for i := 0; i < s; i++ {
		span := (k[i]-1)*g.dilations[i] + 1
		var pb, pe int
		switch autoPad {
		case "NOTSET", "":
			if pads != nil {
				pb, pe = int(pads[i]), int(pads[i+s])
			}
		case "VALID":
		case "SAME_UPPER", "SAME_LOWER":
			o := (in[i] + g.strides[i] - 1) / g.strides[i]
			total := max(0, (o-1)*g.strides[i]+span-in[i])
			pb = total / 2
			if autoPad == "SAME_LOWER" {
				pb = total - total/2
			}
			pe = total - pb
		default:
			return nil, n.Errorf("unknown auto_pad %q", autoPad)
		}
		if pb < 0 || pe < 0 {
			return nil, n.Errorf("pads %v must not be negative", pads)
		}
		g.padBegin[i] = pb
		o := (in[i]+pb+pe-span)/g.strides[i] + 1
		if in[i]+pb+pe < span {
			o = 0
		}
		g.out[i] = o
		g.inSize *= in[i]
		g.kSize *= k[i]
		g.oSize *= o
	}
	return g, nil
}

// im2col fills cols ([channels*kSize, oSize]) from x ([channels, inSize])
// less zp, with 0 where the window falls in the padding.
func (g *convGeometry) im2col(x []int32, zp int32, channels int, cols []int32) {
	s := len(g.in)
	// coord[d][kd*out[d]+od] is the input coordinate or -1 in the padding.
	coord := make([][]int, s)
	for d := 0; d < s; d++ {
		coord[d] = make([]int, g.kernel[d]*g.out[d])
		for kd := 0; kd < g.kernel[d]; kd++ {
			for od := 0; od < g.out[d]; od++ {
				c := od*g.strides[d] - g.padBegin[d] + kd*g.dilations[d]
				if c < 0 || c >= g.in[d] {
					c = -1
				}
				coord[d][kd*g.out[d]+od] = c
			}
		}
	}
	inStrides := graph.Strides(g.in)
	kIdx := make([]int, s)
	oIdx := make([]int, s)
	row := 0
	for c := 0; c < channels; c++ {
		plane := x[c*g.inSize : (c+1)*g.inSize]
		for i := range kIdx {
			kIdx[i] = 0
		}
		for kk := 0; kk < g.kSize; kk++ {
			dst := cols[row*g.oSize : (row+1)*g.oSize]
			for i := range oIdx {
				oIdx[i] = 0
			}
			for o := range dst {
				off := 0
				for d := 0; d < s; d++ {
					cd := coord[d][kIdx[d]*g.out[d]+oIdx[d]]
					if cd < 0 {
						off = -1
						break
					}
					off += cd * inStrides[d]
				}
				if off < 0 {
					dst[o] = 0
				} else {
					dst[o] = plane[off] - zp
				}
				for d := s - 1; d >= 0; d-- {
					oIdx[d]++
					if oIdx[d] < g.out[d] {
						break
					}
					oIdx[d] = 0
				}
			}
			for d := s - 1; d >= 0; d-- {
				kIdx[d]++
				if kIdx[d] < g.kernel[d] {
					break
				}
				kIdx[d] = 0
			}
			row++
		}
	}
}

// qlinearConvKernel implements QLinearConv: a grouped N-D convolution of
// the integer operands less their zero points (w per output channel),
// accumulated in int32 with the optional int32 bias, then requantized.
func qlinearConvKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 8); err != nil {
		return nil, err
	}
	x, w, bias := in[0], in[3], kern.Opt(in, 8)
	if x.Rank() < 3 || w.Rank() != x.Rank() {
		return nil, n.Errorf("x %v and w %v must have the same rank, at least 3 ([N, C, spatial...])", x.Shape, w.Shape)
	}
	batch, channels := x.Shape[0], x.Shape[1]
	mOut := w.Shape[0]
	group := int(n.AttrInt("group", 1))
	if group < 1 || channels%group != 0 || mOut%group != 0 {
		return nil, n.Errorf("group %d must divide the input channels %d and the output channels %d", group, channels, mOut)
	}
	cg, mg := channels/group, mOut/group
	if w.Shape[1] != cg {
		return nil, n.Errorf("w %v has %d input channels per group, x %v with group %d needs %d", w.Shape, w.Shape[1], x.Shape, group, cg)
	}
	geo, err := newConvGeometry(n, x.Shape[2:], w.Shape[2:])
	if err != nil {
		return nil, err
	}
	xs, err := asFloat32(n, "x_scale", in[1])
	if err != nil {
		return nil, err
	}
	if len(xs) != 1 {
		return nil, n.Errorf("x_scale must be a scalar, has shape %v", in[1].Shape)
	}
	xzp := int32(0)
	if in[2] != nil {
		z, err := asInt32(n, "x_zero_point", in[2])
		if err != nil {
			return nil, err
		}
		if len(z) != 1 {
			return nil, n.Errorf("x_zero_point must be a scalar, has shape %v", in[2].Shape)
		}
		xzp = z[0]
	}
	wp, err := readQParams(n, "w", in[4], in[5], []int{mOut}, []int{mOut}, -1)
	if err != nil {
		return nil, err
	}
	ys, err := asFloat32(n, "y_scale", in[6])
	if err != nil {
		return nil, err
	}
	yzp, err := asInt32(n, "y_zero_point", in[7])
	if err != nil {
		return nil, err
	}
	if len(ys) != 1 || len(yzp) != 1 {
		return nil, n.Errorf("y_scale and y_zero_point must be scalars, have shapes %v and %v", in[6].Shape, in[7].Shape)
	}
	lo, hi, ok := quantRange(in[7].DType)
	if !ok {
		return nil, n.Errorf("y_zero_point has dtype %v, want uint8 or int8", in[7].DType)
	}
	var bv []int32
	if bias != nil {
		if bias.Size() != mOut {
			return nil, n.Errorf("bias has shape %v, want [%d]", bias.Shape, mOut)
		}
		if bv, err = asInt32(n, "B", bias); err != nil {
			return nil, err
		}
	}
	xv, err := asInt32(n, "x", x)
	if err != nil {
		return nil, err
	}
	wv, err := asInt32(n, "w", w)
	if err != nil {
		return nil, err
	}
	rowLen := cg * geo.kSize
	for m := 0; m < mOut; m++ {
		_, z := wp.at(m)
		for i := m * rowLen; i < (m+1)*rowLen; i++ {
			wv[i] -= z
		}
	}
	outShape := append([]int{batch, mOut}, geo.out...)
	y, err := kern.New(n, in[7].DType, outShape)
	if err != nil {
		return nil, err
	}
	cols := make([]int32, rowLen*geo.oSize)
	acc := make([]int32, mg*geo.oSize)
	for b := 0; b < batch; b++ {
		for g := 0; g < group; g++ {
			xg := xv[(b*channels+g*cg)*geo.inSize : (b*channels+(g+1)*cg)*geo.inSize]
			geo.im2col(xg, xzp, cg, cols)
			igemm(mg, geo.oSize, rowLen, wv[g*mg*rowLen:(g+1)*mg*rowLen], cols, acc)
			for mi := 0; mi < mg; mi++ {
				m := g*mg + mi
				sw, _ := wp.at(m)
				mult := float64(xs[0] * sw / ys[0])
				var bb int32
				if bv != nil {
					bb = bv[m]
				}
				base := (b*mOut + m) * geo.oSize
				for o := 0; o < geo.oSize; o++ {
					requantize(y, base+o, acc[mi*geo.oSize+o]+bb, mult, yzp[0], lo, hi)
				}
			}
		}
	}
	return []*graph.Tensor{y}, nil
}
