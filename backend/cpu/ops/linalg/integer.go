package linalg

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.Register("MatMulInteger", matMulIntegerKernel)
	kern.Register("ConvInteger", convIntegerKernel)
}

// integerShifted returns x - zeroPoint as int32, with the zero point
// broadcast to x's shape (unidirectionally). x and the zero point must be
// int8 or uint8.
func integerShifted(n *graph.Node, what string, x, zp *graph.Tensor, zpShape []int) ([]int32, error) {
	if x.DType != graph.Int8 && x.DType != graph.Uint8 {
		return nil, n.Errorf("%s must be int8 or uint8, got %v", what, x.DType)
	}
	out := make([]int32, x.Size())
	switch xd := x.Data.(type) {
	case []int8:
		for i, v := range xd {
			out[i] = int32(v)
		}
	case []uint8:
		for i, v := range xd {
			out[i] = int32(v)
		}
	}
	if zp == nil {
		return out, nil
	}
	if zp.DType != x.DType {
		return nil, n.Errorf("%s zero point is %v but %s is %v", what, zp.DType, what, x.DType)
	}
	if zp.Size() == 1 {
		z := int32(zp.Int(0))
		for i := range out {
			out[i] -= z
		}
		return out, nil
	}
	bs, err := kern.BroadcastShape(zpShape, x.Shape)
	if err != nil || !equalInts(bs, x.Shape) {
		return nil, n.Errorf("%s zero point of shape %v does not broadcast to %s's shape %v", what, zp.Shape, what, x.Shape)
	}
	for i, j := range kern.BroadcastIndex(zpShape, x.Shape) {
		out[i] -= int32(zp.Int(j))
	}
	return out, nil
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// matMulIntegerKernel is MatMulInteger: matmul of (A - a_zero_point) and
// (B - b_zero_point) accumulated in int32. A's zero point is per tensor or
// per row (an M-vector, or [..., M, 1]); B's is per tensor or per column.
func matMulIntegerKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	a, b := in[0], in[1]
	p, err := newMatmulPlan(n, a.Shape, b.Shape)
	if err != nil {
		return nil, err
	}
	azp := kern.Opt(in, 2)
	var azpShape []int
	if azp != nil {
		azpShape = azp.Shape
		if len(azp.Shape) == 1 && len(a.Shape) >= 2 && azp.Shape[0] == a.Shape[len(a.Shape)-2] && azp.Shape[0] != 1 {
			azpShape = []int{azp.Shape[0], 1} // per-row vector
		}
	}
	ai, err := integerShifted(n, "A", a, azp, azpShape)
	if err != nil {
		return nil, err
	}
	bzp := kern.Opt(in, 3)
	var bzpShape []int
	if bzp != nil {
		bzpShape = bzp.Shape
	}
	bi, err := integerShifted(n, "B", b, bzp, bzpShape)
	if err != nil {
		return nil, err
	}
	out, err := kern.New(n, graph.Int32, p.outShape)
	if err != nil {
		return nil, err
	}
	linalgMatMulRun(p, ai, bi, out.Data.([]int32))
	return []*graph.Tensor{out}, nil
}

// convGeometry is the resolved shape of an N-D convolution.
type convGeometry struct {
	batch, inC, outC, group int
	in, kernel, out         []int
	strides, dilations      []int
	padBegin                []int
}

// newConvGeometry resolves Conv-style attributes for input shape xs and
// weight shape ws.
func newConvGeometry(n *graph.Node, xs, ws []int) (*convGeometry, error) {
	if len(xs) < 3 || len(ws) != len(xs) {
		return nil, n.Errorf("x %v and w %v must both be [N, C, spatial...] of the same rank >= 3", xs, ws)
	}
	sp := len(xs) - 2
	g := &convGeometry{
		batch: xs[0], inC: xs[1], outC: ws[0],
		group: int(n.AttrInt("group", 1)),
		in:    xs[2:], kernel: ws[2:],
	}
	if g.group <= 0 || g.inC%g.group != 0 || g.outC%g.group != 0 || ws[1]*g.group != g.inC {
		return nil, n.Errorf("group %d does not fit %d input channels, %d output channels and w of shape %v", g.group, g.inC, g.outC, ws)
	}
	if ks := n.AttrInts("kernel_shape", nil); ks != nil && !equalInts(graph.IntsToInt(ks), g.kernel) {
		return nil, n.Errorf("kernel_shape %v disagrees with w of shape %v", ks, ws)
	}
	ints := func(name string, def int) ([]int, error) {
		v := n.AttrInts(name, nil)
		if v == nil {
			out := make([]int, sp)
			for i := range out {
				out[i] = def
			}
			return out, nil
		}
		if len(v) != sp {
			return nil, n.Errorf("%s has %d values, want %d", name, len(v), sp)
		}
		out := graph.IntsToInt(v)
		for _, x := range out {
			if x < 1 {
				return nil, n.Errorf("%s %v must be positive", name, v)
			}
		}
		return out, nil
	}
	var err error
	if g.strides, err = ints("strides", 1); err != nil {
		return nil, err
	}
	if g.dilations, err = ints("dilations", 1); err != nil {
		return nil, err
	}
	pads := make([]int, 2*sp)
	if v := n.AttrInts("pads", nil); v != nil {
		if len(v) != 2*sp {
			return nil, n.Errorf("pads has %d values, want %d", len(v), 2*sp)
		}
		pads = graph.IntsToInt(v)
	}
	autoPad := n.AttrString("auto_pad", "NOTSET")
	g.padBegin = make([]int, sp)
	g.out = make([]int, sp)
	for i := 0; i < sp; i++ {
		ext := (g.kernel[i]-1)*g.dilations[i] + 1
		span := 0 // input extent the kernel slides over, minus the kernel
		switch autoPad {
		case "NOTSET", "":
			g.padBegin[i] = pads[i]
			span = g.in[i] + pads[i] + pads[sp+i] - ext
			g.out[i] = span/g.strides[i] + 1
		case "VALID":
			span = g.in[i] - ext
			g.out[i] = span/g.strides[i] + 1
		case "SAME_UPPER", "SAME_LOWER":
			g.out[i] = (g.in[i] + g.strides[i] - 1) / g.strides[i]
			total := max(0, (g.out[i]-1)*g.strides[i]+ext-g.in[i])
			g.padBegin[i] = total / 2
			if autoPad == "SAME_LOWER" {
				g.padBegin[i] = total - total/2
			}
		default:
			return nil, n.Errorf("unknown auto_pad %q", autoPad)
		}
		if span < 0 || pads[i] < 0 || pads[sp+i] < 0 {
			return nil, n.Errorf("spatial dim %d: input %d, kernel extent %d and pads %v give no output", i, g.in[i], ext, pads)
		}
	}
	return g, nil
}

// convIm2col fills col (rows: channel×kernel offsets, columns: output
// positions) from one group's channels of one image x (channels × in
// spatial), writing zeros where the kernel reads padding.
func convIm2col[T numeric](g *convGeometry, x []T, channels int, col []T) {
	sp := len(g.in)
	inSize, outSize, kSize := product(g.in), product(g.out), product(g.kernel)
	kpos := make([]int, sp)
	opos := make([]int, sp)
	for c := 0; c < channels; c++ {
		img := x[c*inSize : (c+1)*inSize]
		clear(kpos)
		for kk := 0; kk < kSize; kk++ {
			row := col[(c*kSize+kk)*outSize : (c*kSize+kk+1)*outSize]
			clear(opos)
			for o := range row {
				idx, ok := 0, true
				for d := 0; d < sp; d++ {
					p := opos[d]*g.strides[d] - g.padBegin[d] + kpos[d]*g.dilations[d]
					if p < 0 || p >= g.in[d] {
						ok = false
						break
					}
					idx = idx*g.in[d] + p
				}
				if ok {
					row[o] = img[idx]
				} else {
					row[o] = 0
				}
				for d := sp - 1; d >= 0; d-- {
					opos[d]++
					if opos[d] < g.out[d] {
						break
					}
					opos[d] = 0
				}
			}
			for d := sp - 1; d >= 0; d-- {
				kpos[d]++
				if kpos[d] < g.kernel[d] {
					break
				}
				kpos[d] = 0
			}
		}
	}
}

// convIntegerKernel is ConvInteger: convolution of (x - x_zero_point) with
// (w - w_zero_point) accumulated in int32; padding contributes zero (it
// holds the zero point). w's zero point is per tensor or per output channel.
func convIntegerKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x, w := in[0], in[1]
	g, err := newConvGeometry(n, x.Shape, w.Shape)
	if err != nil {
		return nil, err
	}
	xzp := kern.Opt(in, 2)
	if xzp != nil && xzp.Size() != 1 {
		return nil, n.Errorf("x_zero_point must be a scalar, got shape %v", xzp.Shape)
	}
	xi, err := integerShifted(n, "x", x, xzp, nil)
	if err != nil {
		return nil, err
	}
	wzp := kern.Opt(in, 3)
	var wzpShape []int
	if wzp != nil && wzp.Size() != 1 {
		if len(wzp.Shape) != 1 || wzp.Shape[0] != g.outC {
			return nil, n.Errorf("w_zero_point must be a scalar or have %d elements, got shape %v", g.outC, wzp.Shape)
		}
		wzpShape = make([]int, len(w.Shape))
		for i := range wzpShape {
			wzpShape[i] = 1
		}
		wzpShape[0] = g.outC
	}
	wi, err := integerShifted(n, "w", w, wzp, wzpShape)
	if err != nil {
		return nil, err
	}
	outShape := append([]int{g.batch, g.outC}, g.out...)
	out, err := kern.New(n, graph.Int32, outShape)
	if err != nil {
		return nil, err
	}
	y := out.Data.([]int32)
	inSize, outSize, kSize := product(g.in), product(g.out), product(g.kernel)
	cg, mg := g.inC/g.group, g.outC/g.group
	col := make([]int32, cg*kSize*outSize)
	for b := 0; b < g.batch; b++ {
		for gr := 0; gr < g.group; gr++ {
			convIm2col(g, xi[(b*g.inC+gr*cg)*inSize:], cg, col)
			linalgMatMulGeneric(mg, outSize, cg*kSize, wi[gr*mg*cg*kSize:], col, y[(b*g.outC+gr*mg)*outSize:])
		}
	}
	return []*graph.Tensor{out}, nil
}
