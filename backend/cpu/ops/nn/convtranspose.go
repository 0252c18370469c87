package nn

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// floorDiv is integer division rounding toward negative infinity.
func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// convTransposeWindow resolves ConvTranspose's geometry as the window of the
// equivalent convolution: the image (win.in) is the ConvTranspose output and
// the columns (win.out) are its input positions. Pads may come out negative
// when output_shape asks for more than the natural size.
func convTransposeWindow(n *graph.Node, in, kernel []int) (*window, error) {
	r := len(in)
	w := &window{out: in, kernel: kernel, in: make([]int, r), padBegin: make([]int, r), padEnd: make([]int, r)}
	var err error
	if w.strides, err = intsAttr(n, "strides", r, 1); err != nil {
		return nil, err
	}
	if w.dilations, err = intsAttr(n, "dilations", r, 1); err != nil {
		return nil, err
	}
	outPad, err := intsAttr(n, "output_padding", r, 0)
	if err != nil {
		return nil, err
	}
	pads, err := intsAttr(n, "pads", 2*r, 0)
	if err != nil {
		return nil, err
	}
	var outShape []int
	if v := n.AttrInts("output_shape", nil); v != nil {
		switch len(v) {
		case r:
			outShape = graph.IntsToInt(v)
		case r + 2:
			outShape = graph.IntsToInt(v[2:])
		default:
			return nil, n.Errorf("output_shape %v must list the %d spatial dims", v, r)
		}
	}
	autoPad := n.AttrString("auto_pad", "NOTSET")
	switch autoPad {
	case "NOTSET", "", "VALID", "SAME_UPPER", "SAME_LOWER":
	default:
		return nil, n.Errorf("auto_pad %q is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", autoPad)
	}
	for i := 0; i < r; i++ {
		if kernel[i] <= 0 || w.strides[i] <= 0 || w.dilations[i] <= 0 {
			return nil, n.Errorf("kernel %v, strides %v and dilations %v must be positive", kernel, w.strides, w.dilations)
		}
		if outPad[i] < 0 || pads[i] < 0 || pads[i+r] < 0 {
			return nil, n.Errorf("pads %v and output_padding %v must not be negative", pads, outPad)
		}
		dk := (kernel[i]-1)*w.dilations[i] + 1
		full := w.strides[i]*(in[i]-1) + outPad[i] + dk
		switch {
		case outShape != nil || autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER":
			out := in[i] * w.strides[i]
			if outShape != nil {
				out = outShape[i]
			}
			total := full - out
			if autoPad == "SAME_UPPER" {
				w.padBegin[i] = floorDiv(total, 2)
			} else {
				w.padBegin[i] = total - floorDiv(total, 2)
			}
			w.padEnd[i] = total - w.padBegin[i]
			w.in[i] = out
		case autoPad == "VALID":
			w.in[i] = full
		default:
			w.padBegin[i], w.padEnd[i] = pads[i], pads[i+r]
			w.in[i] = full - pads[i] - pads[i+r]
		}
		if w.in[i] < 0 {
			return nil, n.Errorf("output spatial dim %d would be %d", i, w.in[i])
		}
	}
	return w, nil
}

// convTransposeKernel implements ConvTranspose for float32 and float64.
func convTransposeKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x, w, b := in[0], in[1], kern.Opt(in, 2)
	if x.DType != w.DType || (b != nil && b.DType != x.DType) {
		return nil, n.Errorf("inputs must share one float dtype, have X %v, W %v", x.DType, w.DType)
	}
	if err := spatialInput(n, x, "input X"); err != nil {
		return nil, err
	}
	if len(w.Shape) != len(x.Shape) {
		return nil, n.Errorf("weight W has shape %v, want rank %d like X %v", w.Shape, len(x.Shape), x.Shape)
	}
	group := int(n.AttrInt("group", 1))
	c := x.Shape[1]
	if group <= 0 || c%group != 0 || w.Shape[0] != c {
		return nil, n.Errorf("weight W has shape %v: dim 0 must be C = %d, divisible by group %d", w.Shape, c, group)
	}
	mg := w.Shape[1]
	m := mg * group
	kernel := append([]int{}, w.Shape[2:]...)
	if ks := n.AttrInts("kernel_shape", nil); ks != nil {
		if len(ks) != len(kernel) {
			return nil, n.Errorf("kernel_shape %v does not match weight shape %v", ks, w.Shape)
		}
		for i, k := range ks {
			if int(k) != kernel[i] {
				return nil, n.Errorf("kernel_shape %v does not match weight shape %v", ks, w.Shape)
			}
		}
	}
	win, err := convTransposeWindow(n, x.Shape[2:], kernel)
	if err != nil {
		return nil, err
	}
	if b != nil && (len(b.Shape) != 1 || b.Shape[0] != m) {
		return nil, n.Errorf("bias B has shape %v, want [%d]", b.Shape, m)
	}
	y, err := kern.New(n, x.DType, concatShape([]int{x.Shape[0], m}, win.in))
	if err != nil {
		return nil, err
	}
	cs := &convShape{n: x.Shape[0], c: c, m: m, group: group, win: win}
	switch xd := x.Data.(type) {
	case []float32:
		var bd []float32
		if b != nil {
			bd = b.Data.([]float32)
		}
		convTransposeRun(cs, xd, w.Data.([]float32), bd, y.Data.([]float32))
	case []float64:
		var bd []float64
		if b != nil {
			bd = b.Data.([]float64)
		}
		convTransposeRun(cs, xd, w.Data.([]float64), bd, y.Data.([]float64))
	default:
		return nil, n.Errorf("dtype %v is not supported (float32, float64, float16, bfloat16)", x.DType)
	}
	return []*graph.Tensor{y}, nil
}

// convTransposeRun computes y = convtranspose(x, w) + b: per image and
// group, col = W_gᵀ·X_g over tiles of input rows, then col2im adds the
// columns into y. y is zero on entry.
func convTransposeRun[T convElem](cs *convShape, x, w, b, y []T) {
	win := cs.win
	outSize, inSize := prod(win.in), prod(win.out) // image = output, columns = input
	if cs.n == 0 || cs.m == 0 || outSize == 0 {
		return
	}
	if b != nil {
		for i := 0; i < cs.n; i++ {
			for m := 0; m < cs.m; m++ {
				plane := y[(i*cs.m+m)*outSize : (i*cs.m+m+1)*outSize]
				bv := b[m]
				for j := range plane {
					plane[j] = bv
				}
			}
		}
	}
	if inSize == 0 {
		return
	}
	cg, mg := cs.c/cs.group, cs.m/cs.group
	mk := mg * prod(win.kernel)
	iLast := win.out[win.rank()-1]
	rows := inSize / iLast
	rowsPerTile := colBudget / (mk * iLast)
	if rowsPerTile < 1 {
		rowsPerTile = 1
	}
	if rowsPerTile > rows {
		rowsPerTile = rows
	}
	items := cs.n * cs.group
	workers := itemWorkers(items, mk*cg*rowsPerTile*iLast)
	bufs := make([][]T, workers)
	defer func() {
		for _, b := range bufs {
			release(b)
		}
	}()
	parallelFor(items, workers, func(worker, item int) {
		i, g := item/cs.group, item%cs.group
		if bufs[worker] == nil {
			bufs[worker] = scratch[T](mk * rowsPerTile * iLast)
		}
		wg := w[g*cg*mk : (g+1)*cg*mk]
		xg := x[(i*cs.c+g*cg)*inSize : (i*cs.c+(g+1)*cg)*inSize]
		yg := y[(i*cs.m+g*mg)*outSize : (i*cs.m+(g+1)*mg)*outSize]
		for r0 := 0; r0 < rows; r0 += rowsPerTile {
			r1 := min(r0+rowsPerTile, rows)
			cols := (r1 - r0) * iLast
			col := bufs[worker][:mk*cols]
			matmul(true, mk, cols, cg, wg, mk, xg[r0*iLast:], inSize, false, col, cols)
			col2imAdd(yg, col, mg, win, r0, r1)
		}
	})
}
