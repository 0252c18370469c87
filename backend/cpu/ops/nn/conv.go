package nn

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// colBudget bounds the elements of one im2col or col2im buffer (per
// worker): 2 MiB of float32 keeps the buffer in the outer caches while
// leaving the GEMM wide tiles to work on. Tests lower it to exercise tiling.
var colBudget = 1 << 19

// implicitConv routes ungrouped 2-D float32 convolutions through the
// implicit GEMM (Conv2D); tests turn it off to compare with im2col.
var implicitConv = true

// convShape is a convolution's resolved dimensions.
type convShape struct {
	n, c, m, group int
	win            *window
}

// readConvShape validates Conv's X and W and resolves the window.
func readConvShape(n *graph.Node, x, w *graph.Tensor) (*convShape, error) {
	if err := spatialInput(n, x, "input X"); err != nil {
		return nil, err
	}
	if len(w.Shape) != len(x.Shape) {
		return nil, n.Errorf("weight W has shape %v, want rank %d like X %v", w.Shape, len(x.Shape), x.Shape)
	}
	group := int(n.AttrInt("group", 1))
	cs := &convShape{n: x.Shape[0], c: x.Shape[1], m: w.Shape[0], group: group}
	if group <= 0 || cs.c%group != 0 || cs.m%group != 0 {
		return nil, n.Errorf("group %d must divide the %d input and %d output channels", group, cs.c, cs.m)
	}
	if w.Shape[1] != cs.c/group {
		return nil, n.Errorf("weight W has shape %v: dim 1 must be C/group = %d/%d", w.Shape, cs.c, group)
	}
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
	win, err := resolveWindow(n, x.Shape[2:], kernel, windowOpts{})
	if err != nil {
		return nil, err
	}
	cs.win = win
	return cs, nil
}

// convKernel implements Conv for float32 and float64.
func convKernel(kctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x, w, b := in[0], in[1], kern.Opt(in, 2)
	if x.DType != w.DType || (b != nil && b.DType != x.DType) {
		return nil, n.Errorf("inputs must share one float dtype, have X %v, W %v", x.DType, w.DType)
	}
	st := kern.State[convState](n)
	if !st.valid || !graph.SameShape(st.xs, x.Shape) || !graph.SameShape(st.ws, w.Shape) {
		st.valid = false
		cs, err := readConvShape(n, x, w)
		if err != nil {
			return nil, err
		}
		st.cs, st.yShape = cs, concatShape([]int{cs.n, cs.m}, cs.win.out)
		st.xs, st.ws = append(st.xs[:0], x.Shape...), append(st.ws[:0], w.Shape...)
		st.valid = true
	}
	cs := st.cs
	if b != nil && (len(b.Shape) != 1 || b.Shape[0] != cs.m) {
		return nil, n.Errorf("bias B has shape %v, want [%d]", b.Shape, cs.m)
	}
	alloc := kern.New
	if convOverwrites(cs, x, w) {
		// Every output element is written (a product with beta 0, or
		// the bias first): no need to clear the storage beforehand.
		alloc = kern.NewUninit
	}
	y, err := alloc(n, x.DType, st.yShape)
	if err != nil {
		return nil, err
	}
	switch xd := x.Data.(type) {
	case []float32:
		var bd []float32
		if b != nil {
			bd = b.Data.([]float32)
		}
		if !convWithoutProducts(cs, xd, w.Data.([]float32), bd, y.Data.([]float32)) {
			convRun(cs, kctx.Winograd, xd, w.Data.([]float32), bd, y.Data.([]float32))
		}
	case []float64:
		var bd []float64
		if b != nil {
			bd = b.Data.([]float64)
		}
		if !convWithoutProducts(cs, xd, w.Data.([]float64), bd, y.Data.([]float64)) {
			convRun(cs, kctx.Winograd, xd, w.Data.([]float64), bd, y.Data.([]float64))
		}
	default:
		return nil, n.Errorf("dtype %v is not supported (float32, float64, float16, bfloat16)", x.DType)
	}
	return kern.Results(n, y), nil
}

// convOverwrites reports whether convRun writes every element of y
// without reading it: the implicit GEMM's route (float32, ungrouped, 2-D,
// with something to multiply), whose products store with beta 0 (or over
// the bias, which convRun writes first). Every other route (grouped,
// depthwise, float64, other ranks, empty operands) counts on a zeroed y.
// The executor then hands the kernel its output storage without clearing
// it first: ResNet-50's Conv outputs at batch 8 are some 340 MB a step,
// cleared on the calling thread alone before this.
func convOverwrites(cs *convShape, x, w *graph.Tensor) bool {
	if x.DType != graph.Float32 || cs.group != 1 || !implicitConv || x.Size() == 0 || w.Size() == 0 {
		return false
	}
	_, ok := Conv2DOf(cs.win.export(), cs.n, cs.c, cs.m)
	return ok
}

// convState is a Conv node's resolved shape, kept between runs (the
// attributes are fixed, so it holds while X's and W's shapes do).
type convState struct {
	xs, ws []int
	cs     *convShape
	yShape []int
	valid  bool
}

// convRun computes y = conv(x, w) + b; y is zero on entry.
func convRun[T convElem](cs *convShape, winograd WinogradPolicy, x, w, b, y []T) {
	win := cs.win
	inSize, outSize := prod(win.in), prod(win.out)
	if cs.n == 0 || cs.m == 0 || outSize == 0 {
		return
	}
	cg, mg := cs.c/cs.group, cs.m/cs.group
	kSize := prod(win.kernel)
	if xf, ok := any(x).([]float32); ok && cs.group == 1 && implicitConv {
		// Patchify windows (kernel = stride): the bias goes in with the
		// product's layout pass instead of a pass of its own.
		if g, ok := Conv2DOf(win.export(), cs.n, cs.c, cs.m); ok && g.patchify() {
			bf, _ := any(b).([]float32)
			g.forwardPatches(xf, any(w).([]float32), bf, any(y).([]float32), false)
			return
		}
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
	accumulate := b != nil

	// Depthwise: one input channel per group.
	if cg == 1 && cs.group > 1 && win.rank() <= 2 {
		convDepthwise(cs, x, w, y)
		return
	}

	// Ungrouped 2-D float32: one implicit GEMM over the whole batch (1×1
	// windows included: their product's columns run across the images).
	if xf, ok := any(x).([]float32); ok && cs.group == 1 && implicitConv {
		if g, ok := Conv2DOf(win.export(), cs.n, cs.c, cs.m); ok {
			g.Winograd = winograd
			g.Forward(xf, any(w).([]float32), any(y).([]float32), accumulate)
			return
		}
	}

	// Pointwise: a 1x1 window with unit stride and no padding is a GEMM
	// over the input itself, one per image and group.
	pointwise := kSize == 1
	for j := 0; j < win.rank(); j++ {
		if win.strides[j] != 1 || win.padBegin[j] != 0 || win.padEnd[j] != 0 {
			pointwise = false
		}
	}
	if pointwise {
		items := cs.n * cs.group
		workers := itemWorkers(items, mg*cg*outSize)
		parallelFor(items, workers, func(_, item int) {
			i, g := item/cs.group, item%cs.group
			wg := w[g*mg*cg : (g+1)*mg*cg]
			xg := x[(i*cs.c+g*cg)*inSize : (i*cs.c+(g+1)*cg)*inSize]
			yg := y[(i*cs.m+g*mg)*outSize : (i*cs.m+(g+1)*mg)*outSize]
			matmul(false, mg, outSize, cg, wg, cg, xg, inSize, accumulate, yg, outSize)
		})
		return
	}

	// General: im2col over tiles of output rows, then GEMM into y.
	oLast := win.out[win.rank()-1]
	rows := outSize / oLast
	ck := cg * kSize
	if cs.group == 1 {
		if nb := imageBatch(cs.n, ck*outSize); nb > 1 {
			convBatched(cs, x, w, y, nb, accumulate)
			return
		}
	}
	rowsPerTile := colBudget / (ck * oLast)
	if rowsPerTile < 1 {
		rowsPerTile = 1
	}
	if rowsPerTile > rows {
		rowsPerTile = rows
	}
	tiles := (rows + rowsPerTile - 1) / rowsPerTile
	items := cs.n * cs.group * tiles
	workers := itemWorkers(items, mg*ck*rowsPerTile*oLast)
	bufs := make([][]T, workers)
	defer func() {
		for _, b := range bufs {
			release(b)
		}
	}()
	parallelFor(items, workers, func(worker, item int) {
		t := item % tiles
		g := (item / tiles) % cs.group
		i := item / (tiles * cs.group)
		r0 := t * rowsPerTile
		r1 := min(r0+rowsPerTile, rows)
		cols := (r1 - r0) * oLast
		if bufs[worker] == nil {
			bufs[worker] = scratch[T](ck * rowsPerTile * oLast)
		}
		col := bufs[worker][:ck*cols]
		xg := x[(i*cs.c+g*cg)*inSize : (i*cs.c+(g+1)*cg)*inSize]
		if workers == 1 {
			// The GEMM parallelises itself; share the im2col out too.
			im2colParallel(col, xg, cg, win, r0, r1)
		} else {
			im2col(col, xg, cg, win, r0, r1)
		}
		wg := w[g*mg*ck : (g+1)*mg*ck]
		yg := y[(i*cs.m+g*mg)*outSize+r0*oLast:]
		matmul(false, mg, cols, ck, wg, ck, col, cols, accumulate, yg, outSize)
	})
}

// imageBatch returns how many images of a batch of n share one product,
// their im2col columns (perImage elements each) side by side, when at least
// two fit the budget of 2·colBudget elements; 1 otherwise. The batch is cut
// into tiles of nearly equal size. Small late layers (a few window
// positions per image) thereby make one wide GEMM instead of n skinny ones
// that each pack the whole weight matrix.
func imageBatch(n, perImage int) int {
	if n < 2 || perImage <= 0 {
		return 1
	}
	most := 2 * colBudget / perImage
	if most < 2 {
		return 1
	}
	tiles := (n + most - 1) / most
	return (n + tiles - 1) / tiles
}

// convBatched computes an ungrouped convolution nb images at a time: the
// images' im2col columns side by side in one matrix, one GEMM for them all
// into a scratch matrix, whose rows are then added (accumulate: y holds the
// bias) or copied into each image's output planes.
func convBatched[T convElem](cs *convShape, x, w, y []T, nb int, accumulate bool) {
	win := cs.win
	inSize, outSize := prod(win.in), prod(win.out)
	rows := outSize / win.out[win.rank()-1]
	ck := cs.c * prod(win.kernel)
	ld := nb * outSize
	col := scratch[T](ck * ld)
	defer release(col)
	out := scratch[T](cs.m * ld)
	defer release(out)
	for i0 := 0; i0 < cs.n; i0 += nb {
		cnt := min(nb, cs.n-i0)
		parallelFor(cnt, nnWorkers(cnt, ck*outSize), func(_, b int) {
			xi := x[(i0+b)*cs.c*inSize : (i0+b+1)*cs.c*inSize]
			im2colStrided(col[b*outSize:], ld, xi, cs.c, win, 0, rows)
		})
		matmul(false, cs.m, cnt*outSize, ck, w, ck, col, ld, false, out, ld)
		parallelFor(cnt, nnWorkers(cnt, cs.m*outSize), func(_, b int) {
			yi := y[(i0+b)*cs.m*outSize : (i0+b+1)*cs.m*outSize]
			for m := 0; m < cs.m; m++ {
				src := out[m*ld+b*outSize : m*ld+(b+1)*outSize]
				dst := yi[m*outSize : (m+1)*outSize]
				if !accumulate {
					copy(dst, src)
					continue
				}
				dst = dst[:len(src)]
				for j, v := range src {
					dst[j] += v
				}
			}
		})
	}
}

// gemmParallelWork is the m·n·k above which a single gemm.Sgemm call
// spreads itself over the cores; below it, convolutions spread their
// independent products instead.
const gemmParallelWork = 1 << 20

// itemWorkers picks the goroutines for items independent GEMMs of work
// m·n·k each: one when each GEMM is large enough to parallelise itself,
// else one per core.
func itemWorkers(items, work int) int {
	if work >= gemmParallelWork {
		return 1
	}
	return nnWorkers(items, work)
}

// im2colParallel is im2col split by channels over the cores.
func im2colParallel[T convElem](col, x []T, cg int, w *window, r0, r1 int) {
	perChan := prod(w.kernel) * (r1 - r0) * w.out[w.rank()-1]
	inSize := prod(w.in)
	workers := nnWorkers(cg, perChan)
	if workers <= 1 {
		im2col(col, x, cg, w, r0, r1)
		return
	}
	per := (cg + workers - 1) / workers
	parallelFor(workers, workers, func(_, part int) {
		c0, c1 := part*per, min((part+1)*per, cg)
		if c0 < c1 {
			im2col(col[c0*perChan:], x[c0*inSize:], c1-c0, w, r0, r1)
		}
	})
}

// convDepthwise handles 1-D and 2-D convolutions with one input channel per
// group (any channel multiplier) by direct accumulation: each output
// channel adds its kernel taps, row by row, into a plane that already holds
// the bias (or zero).
func convDepthwise[T convElem](cs *convShape, x, w, y []T) {
	win := cs.win
	// View 1-D as 2-D with a unit height.
	ih, iw, oh, ow := 1, win.in[0], 1, win.out[0]
	kh, kw, sh, sw, dh, dw, ph, pw := 1, win.kernel[0], 1, win.strides[0], 1, win.dilations[0], 0, win.padBegin[0]
	if win.rank() == 2 {
		ih, iw, oh, ow = win.in[0], win.in[1], win.out[0], win.out[1]
		kh, kw = win.kernel[0], win.kernel[1]
		sh, sw = win.strides[0], win.strides[1]
		dh, dw = win.dilations[0], win.dilations[1]
		ph, pw = win.padBegin[0], win.padBegin[1]
	}
	mg := cs.m / cs.group
	inSize, outSize, kSize := ih*iw, oh*ow, kh*kw
	items := cs.n * cs.m
	workers := nnWorkers(items, outSize*kSize)
	// Valid output columns for each horizontal tap.
	los, his := make([]int, kw), make([]int, kw)
	for b := 0; b < kw; b++ {
		los[b], his[b] = validRange(b*dw-pw, sw, iw, ow)
	}
	parallelFor(items, workers, func(_, item int) {
		i, m := item/cs.m, item%cs.m
		g := m / mg
		xp := x[(i*cs.c+g)*inSize : (i*cs.c+g+1)*inSize]
		yp := y[(i*cs.m+m)*outSize : (i*cs.m+m+1)*outSize]
		wk := w[m*kSize : (m+1)*kSize]
		for r := 0; r < oh; r++ {
			yrow := yp[r*ow : (r+1)*ow]
			for a := 0; a < kh; a++ {
				in := r*sh + a*dh - ph
				if in < 0 || in >= ih {
					continue
				}
				xrow := xp[in*iw : (in+1)*iw]
				for b := 0; b < kw; b++ {
					wv := wk[a*kw+b]
					lo, hi := los[b], his[b]
					if lo >= hi {
						continue
					}
					off := b*dw - pw
					ys := yrow[lo:hi]
					if sw == 1 {
						xs := xrow[lo+off : hi+off]
						xs = xs[:len(ys)]
						for j := range ys {
							ys[j] += wv * xs[j]
						}
					} else {
						p := lo*sw + off
						for j := range ys {
							ys[j] += wv * xrow[p]
							p += sw
						}
					}
				}
			}
		}
	})
}
