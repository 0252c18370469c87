package gradient

import (
	"sync"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/nn"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Backward kernels of Conv and ConvTranspose (the rules are in
// graph/grad_conv.go). Each takes the forward node's attributes and resolves
// the same geometry the forward kernel does.
//
// Both ops are described by one picture: an "image" tensor (channels ci,
// spatial dims win.in) and a "column" tensor (channels cq, spatial dims
// win.out) related per group g by Q_g = W_g · im2col(I_g), with W of shape
// (cq, ci/group, kernel...). Conv has I = X and Q = Y; ConvTranspose has
// I = Y and Q = X (Y = col2im(W_gᵀ·X_g)). So:
//
//	ConvBackwardData(dy, W, shape(X))            dX = col2im(Wᵀ·dy)
//	ConvBackwardFilter(dy, X, shape(W))          dW = dy · im2col(X)ᵀ
//	ConvTransposeBackwardData(dy, W, shape(X))   dX = W · im2col(dy)  (a Conv of dy)
//	ConvTransposeBackwardFilter(dy, X, shape(W)) dW = X · im2col(dy)ᵀ
//
// float32 runs its products through gemm.Sgemm; float64 (gradient checks)
// uses a plain loop.

func init() {
	register("ConvBackwardData", convGradKernel(false, false))
	register("ConvBackwardFilter", convGradKernel(false, true))
	register("ConvTransposeBackwardData", convGradKernel(true, false))
	register("ConvTransposeBackwardFilter", convGradKernel(true, true))
}

// convGradColBudget bounds the elements of one im2col buffer per worker.
var convGradColBudget = 1 << 19

// gradWindow is the resolved geometry of a sliding window over the spatial
// dims: in are the image dims, out the window positions.
type gradWindow struct {
	in, out, kernel              []int
	strides, dilations           []int
	padBegin, padEnd             []int
	inSize, outSize, kernelSize  int
	outLast, outRows, lastStride int
}

// finish fills the derived sizes.
func (w *gradWindow) finish() {
	w.inSize, w.outSize, w.kernelSize = product(w.in), product(w.out), product(w.kernel)
	r := len(w.in)
	w.outLast = w.out[r-1]
	w.outRows = 0
	if w.outLast > 0 {
		w.outRows = w.outSize / w.outLast
	}
	w.lastStride = w.strides[r-1]
}

// fromWindow adds the derived sizes to a window resolved by package nn.
func fromWindow(w nn.Window) *gradWindow {
	g := &gradWindow{in: w.In, out: w.Out, kernel: w.Kernel, strides: w.Strides, dilations: w.Dilations,
		padBegin: w.PadBegin, padEnd: w.PadEnd}
	g.finish()
	return g
}

// resolveGradWindow computes the window of Conv or a pool over image dims
// in exactly as the forward kernels resolve it (ceil allows ceil_mode).
func resolveGradWindow(n *graph.Node, in, kernel []int, ceil bool) (*gradWindow, error) {
	w, err := nn.ResolveWindow(n, in, kernel, ceil)
	if err != nil {
		return nil, err
	}
	return fromWindow(w), nil
}

// resolveConvTransposeGradWindow computes ConvTranspose's geometry as the
// window of the equivalent convolution: the image (in) is the ConvTranspose
// output and the window positions (out) are its input positions xs.
func resolveConvTransposeGradWindow(n *graph.Node, xs, kernel []int) (*gradWindow, error) {
	w, err := nn.ConvTransposeWindow(n, xs, kernel)
	if err != nil {
		return nil, err
	}
	return fromWindow(w), nil
}

// convGradPlan is the resolved geometry of one Conv or ConvTranspose.
type convGradPlan struct {
	batch, group int
	ci, cq       int // channels of the image and the column tensor
	win          *gradWindow
	xShape       []int
	wShape       []int
	dyShape      []int // the shape dy must have (the forward output's)
	// tw caches transposedWindow once twDone is set.
	tw     *gradWindow
	twDone bool
}

// newConvGradPlan validates X's and W's shapes against the attributes.
func newConvGradPlan(n *graph.Node, xShape, wShape []int, transpose bool) (*convGradPlan, error) {
	if len(xShape) < 3 {
		return nil, n.Errorf("input X must have rank >= 3 (N, C, spatial...), has shape %v", xShape)
	}
	if len(wShape) != len(xShape) {
		return nil, n.Errorf("weight W has shape %v, want rank %d like X %v", wShape, len(xShape), xShape)
	}
	for _, d := range append(append([]int{}, xShape...), wShape...) {
		if d < 0 {
			return nil, n.Errorf("shapes %v and %v must not be negative", xShape, wShape)
		}
	}
	group := int(n.AttrInt("group", 1))
	kernel := append([]int{}, wShape[2:]...)
	if ks := n.AttrInts("kernel_shape", nil); ks != nil {
		if len(ks) != len(kernel) {
			return nil, n.Errorf("kernel_shape %v does not match weight shape %v", ks, wShape)
		}
		for i, k := range ks {
			if int(k) != kernel[i] {
				return nil, n.Errorf("kernel_shape %v does not match weight shape %v", ks, wShape)
			}
		}
	}
	p := &convGradPlan{batch: xShape[0], group: group, xShape: xShape, wShape: wShape}
	c := xShape[1]
	if group <= 0 || c%group != 0 {
		return nil, n.Errorf("group %d must divide the %d input channels", group, c)
	}
	var err error
	if !transpose {
		// W is (M, C/group, k...): the image is X, the columns Y.
		p.ci, p.cq = c, wShape[0]
		if p.cq%group != 0 || wShape[1] != c/group {
			return nil, n.Errorf("weight W has shape %v: want (M, C/group = %d, ...) with group %d dividing M", wShape, c/group, group)
		}
		if p.win, err = resolveGradWindow(n, xShape[2:], kernel, false); err != nil {
			return nil, err
		}
		p.dyShape = append([]int{p.batch, p.cq}, p.win.out...)
	} else {
		// W is (C, M/group, k...): the image is Y, the columns X.
		if wShape[0] != c {
			return nil, n.Errorf("weight W has shape %v: dim 0 must be C = %d", wShape, c)
		}
		p.cq, p.ci = c, wShape[1]*group
		if p.win, err = resolveConvTransposeGradWindow(n, xShape[2:], kernel); err != nil {
			return nil, err
		}
		p.dyShape = append([]int{p.batch, p.ci}, p.win.in...)
	}
	return p, nil
}

// pointwise reports whether im2col is the identity (a 1×…×1 window, unit
// strides, no padding, image and columns of one size).
func (p *convGradPlan) pointwise() bool {
	w := p.win
	if w.kernelSize != 1 {
		return false
	}
	for j := range w.in {
		if w.strides[j] != 1 || w.padBegin[j] != 0 || w.padEnd[j] != 0 || w.in[j] != w.out[j] {
			return false
		}
	}
	return true
}

// convGradKernel returns one of the four backward kernels: transpose picks
// ConvTranspose's roles, filter the weight gradient over the input one.
func convGradKernel(transpose, filter bool) kern.Kernel {
	return func(kctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		if err := kern.Need(n, in, 3); err != nil {
			return nil, err
		}
		dy, other, shapeT := in[0], in[1], in[2]
		if dy.DType != graph.Float32 && dy.DType != graph.Float64 {
			return nil, n.Errorf("dtype %v is not supported (float32, float64)", dy.DType)
		}
		if other.DType != dy.DType {
			return nil, n.Errorf("gradient has dtype %v, the forward value %v", dy.DType, other.DType)
		}
		if !shapeT.DType.IsInt() || len(shapeT.Shape) != 1 {
			return nil, n.Errorf("input 2 must be a 1-D integer shape, has %v of shape %v", shapeT.DType, shapeT.Shape)
		}
		st := kern.State[convGradState](n)
		if !st.valid || st.transpose != transpose || st.filter != filter ||
			!graph.SameShape(st.other, other.Shape) || !sameTarget(st.target, shapeT) {
			// Resolve the plan for these shapes, from copies (the plan
			// outlives this run's tensors).
			st.valid = false
			st.other = append(st.other[:0], other.Shape...)
			st.target = append(st.target[:0], shapeT.Ints()...)
			xShape, wShape := st.target, st.other
			if filter {
				xShape, wShape = st.other, st.target
			}
			p, err := newConvGradPlan(n, xShape, wShape, transpose)
			if err != nil {
				return nil, err
			}
			st.plan, st.transpose, st.filter, st.valid = p, transpose, filter, true
		}
		p, target := st.plan, st.target
		if !graph.SameShape(dy.Shape, p.dyShape) {
			return nil, n.Errorf("gradient has shape %v, the forward output %v", dy.Shape, p.dyShape)
		}
		alloc := kern.New
		if p.overwrites(dy.DType, transpose, filter) {
			// The implicit products write every element: the
			// storage need not be cleared first.
			alloc = kern.NewUninit
		}
		out, err := alloc(n, dy.DType, target)
		if err != nil {
			return nil, err
		}
		switch d := dy.Data.(type) {
		case []float32:
			convGradRun(p, kctx.Winograd, transpose, filter, d, other.Data.([]float32), out.Data.([]float32))
		case []float64:
			convGradRun(p, kctx.Winograd, transpose, filter, d, other.Data.([]float64), out.Data.([]float64))
		}
		return kern.Results(n, out), nil
	}
}

// convGradState is a Conv gradient node's plan, kept between runs while
// the forward value's shape and the target shape stay the same.
type convGradState struct {
	other, target     []int
	transpose, filter bool
	plan              *convGradPlan
	valid             bool
}

// sameTarget reports whether the 1-D integer tensor t holds the values of
// want, without converting it.
func sameTarget(want []int, t *graph.Tensor) bool {
	if t.Size() != len(want) {
		return false
	}
	for i, v := range want {
		if int(t.Int(i)) != v {
			return false
		}
	}
	return true
}

// convGradRun dispatches to the product that computes the wanted gradient;
// out is zero on entry.
func convGradRun[T float32 | float64](p *convGradPlan, winograd nn.WinogradPolicy, transpose, filter bool, dy, other, out []T) {
	depthwise := p.ci == p.group && p.group > 1 && len(p.win.in) <= 2
	switch {
	case !transpose && !filter && depthwise:
		depthwiseDataGrad(p, dy, other, out)
	case !transpose && filter && depthwise:
		depthwiseFilterGrad(p, dy, other, out)
	case !transpose && !filter:
		convColsToImage(p, winograd, dy, other, out)
	case !transpose && filter:
		convFilterGrad(p, winograd, dy, other, out)
	case transpose && !filter:
		convImageToCols(p, dy, other, out)
	default:
		convFilterGrad(p, winograd, other, dy, out)
	}
}

// convColsToImage computes img = col2im(Wᵀ·q) per image and group (the
// input gradient of Conv). img is zero on entry.
func convColsToImage[T float32 | float64](p *convGradPlan, winograd nn.WinogradPolicy, q, w, img []T) {
	win := p.win
	if p.batch == 0 || win.inSize == 0 || win.outSize == 0 || p.ci == 0 || p.cq == 0 {
		return
	}
	ciG, cqG := p.ci/p.group, p.cq/p.group
	ck := ciG * win.kernelSize
	L, I := win.outSize, win.inSize
	items := p.batch * p.group
	if qf, ok := any(q).([]float32); ok {
		// The implicit GEMM over the whole batch: 1×1 windows (any
		// stride) and stride-1 windows.
		if g, ok := p.implicit(); ok && g.InputGradImplicit(win.padEnd[0], win.padEnd[1]) {
			g.Winograd = winograd
			g.InputGrad(qf, any(w).([]float32), any(img).([]float32))
			return
		}
	}
	if p.pointwise() {
		workers := convGradItemWorkers(items, ck*cqG*L)
		nn.ParallelItems(items, workers, false, func(_, item int) {
			i, g := item/p.group, item%p.group
			wg := w[g*cqG*ck : (g+1)*cqG*ck]
			qg := q[(i*p.cq+g*cqG)*L:]
			ig := img[(i*p.ci+g*ciG)*I:]
			gemmAcc(true, false, ck, L, cqG, wg, ck, qg, L, false, ig, I)
		})
		return
	}
	if p.group == 1 {
		if tw := p.transposedWindow(); tw != nil {
			if nb := convGradImageBatch(p.batch, p.cq*win.kernelSize*I); nb > 1 {
				convColsToImageGather(p, tw, q, w, img, nb)
				return
			}
		}
		if nb := convGradImageBatch(p.batch, ck*L); nb > 1 {
			convColsToImageBatched(p, q, w, img, nb)
			return
		}
	}
	rowsPerTile := convGradRowsPerTile(ck, win)
	workers := convGradItemWorkers(items, ck*cqG*L)
	bufs := make([][]T, workers)
	nn.ParallelItems(items, workers, false, func(worker, item int) {
		i, g := item/p.group, item%p.group
		if bufs[worker] == nil {
			bufs[worker] = make([]T, ck*rowsPerTile*win.outLast)
		}
		wg := w[g*cqG*ck : (g+1)*cqG*ck]
		qg := q[(i*p.cq+g*cqG)*L:]
		ig := img[(i*p.ci+g*ciG)*I : (i*p.ci+(g+1)*ciG)*I]
		for r0 := 0; r0 < win.outRows; r0 += rowsPerTile {
			r1 := min(r0+rowsPerTile, win.outRows)
			cols := (r1 - r0) * win.outLast
			col := bufs[worker][:ck*cols]
			gemmAcc(true, false, ck, cols, cqG, wg, ck, qg[r0*win.outLast:], L, false, col, cols)
			windowColumns(col, ig, ciG, win, r0, r1, true)
		}
	})
}

// convImageToCols computes q = W·im2col(img) per image and group (the input
// gradient of ConvTranspose: a convolution of dy with W).
func convImageToCols[T float32 | float64](p *convGradPlan, img, w, q []T) {
	win := p.win
	if p.batch == 0 || win.outSize == 0 || p.cq == 0 {
		return
	}
	ciG, cqG := p.ci/p.group, p.cq/p.group
	ck := ciG * win.kernelSize
	L, I := win.outSize, win.inSize
	if p.pointwise() {
		items := p.batch * p.group
		workers := convGradItemWorkers(items, ck*cqG*L)
		nn.ParallelItems(items, workers, false, func(_, item int) {
			i, g := item/p.group, item%p.group
			wg := w[g*cqG*ck : (g+1)*cqG*ck]
			ig := img[(i*p.ci+g*ciG)*I:]
			qg := q[(i*p.cq+g*cqG)*L:]
			gemmAcc(false, false, cqG, L, ck, wg, ck, ig, I, false, qg, L)
		})
		return
	}
	rowsPerTile := convGradRowsPerTile(ck, win)
	tiles := (win.outRows + rowsPerTile - 1) / rowsPerTile
	items := p.batch * p.group * tiles
	workers := convGradItemWorkers(items, cqG*ck*rowsPerTile*win.outLast)
	bufs := make([][]T, workers)
	nn.ParallelItems(items, workers, false, func(worker, item int) {
		t := item % tiles
		g := (item / tiles) % p.group
		i := item / (tiles * p.group)
		r0 := t * rowsPerTile
		r1 := min(r0+rowsPerTile, win.outRows)
		cols := (r1 - r0) * win.outLast
		if bufs[worker] == nil {
			bufs[worker] = make([]T, ck*rowsPerTile*win.outLast)
		}
		col := bufs[worker][:ck*cols]
		ig := img[(i*p.ci+g*ciG)*I : (i*p.ci+(g+1)*ciG)*I]
		windowColumns(col, ig, ciG, win, r0, r1, false)
		wg := w[g*cqG*ck : (g+1)*cqG*ck]
		qg := q[(i*p.cq+g*cqG)*L+r0*win.outLast:]
		gemmAcc(false, false, cqG, cols, ck, wg, ck, col, cols, false, qg, L)
	})
}

// convFilterGrad computes dw = Σ over images of q·im2col(img)ᵀ per group
// (the weight gradient of both ops: q is the column-side tensor, img the
// image-side one). Images are split statically over the workers, each
// summing into its own buffer, and the buffers are added in worker order, so
// the result does not depend on scheduling.
func convFilterGrad[T float32 | float64](p *convGradPlan, winograd nn.WinogradPolicy, q, img, dw []T) {
	win := p.win
	if p.batch == 0 || win.outSize == 0 || len(dw) == 0 {
		return
	}
	ciG, cqG := p.ci/p.group, p.cq/p.group
	ck := ciG * win.kernelSize
	L, I := win.outSize, win.inSize
	pointwise := p.pointwise()
	if qf, ok := any(q).([]float32); ok {
		if g, ok := p.implicit(); ok {
			g.Winograd = winograd
			g.FilterGrad(qf, any(img).([]float32), any(dw).([]float32), false)
			return
		}
	}
	if p.group == 1 && !pointwise {
		if nb := convGradImageBatch(p.batch, ck*L); nb > 1 {
			convFilterGradBatched(p, q, img, dw, nb)
			return
		}
	}
	rowsPerTile, tiles := win.outRows, 1
	if !pointwise {
		rowsPerTile = convGradRowsPerTile(ck, win)
		tiles = (win.outRows + rowsPerTile - 1) / rowsPerTile
	}
	items := p.batch * p.group * tiles
	workers := convGradItemWorkers(items, cqG*ck*rowsPerTile*win.outLast)
	partial := make([][]T, workers)
	partial[0] = dw
	cols := make([][]T, workers)
	nn.ParallelItems(items, workers, true, func(worker, item int) {
		t := item % tiles
		g := (item / tiles) % p.group
		i := item / (tiles * p.group)
		if partial[worker] == nil {
			partial[worker] = make([]T, len(dw))
		}
		dwg := partial[worker][g*cqG*ck : (g+1)*cqG*ck]
		ig := img[(i*p.ci+g*ciG)*I : (i*p.ci+(g+1)*ciG)*I]
		if pointwise {
			qg := q[(i*p.cq+g*cqG)*L:]
			gemmAcc(false, true, cqG, ck, L, qg, L, ig, I, true, dwg, ck)
			return
		}
		r0 := t * rowsPerTile
		r1 := min(r0+rowsPerTile, win.outRows)
		n := (r1 - r0) * win.outLast
		if cols[worker] == nil {
			cols[worker] = make([]T, ck*rowsPerTile*win.outLast)
		}
		col := cols[worker][:ck*n]
		windowColumns(col, ig, ciG, win, r0, r1, false)
		qg := q[(i*p.cq+g*cqG)*L+r0*win.outLast:]
		gemmAcc(false, true, cqG, ck, n, qg, L, col, n, true, dwg, ck)
	})
	for _, part := range partial[1:] {
		if part == nil {
			continue
		}
		for j, v := range part {
			dw[j] += v
		}
	}
}

// overwrites reports whether convGradRun writes every element of its
// output without reading it: a float32 Conv gradient that package nn's
// implicit GEMM computes (ungrouped, 2-D; for the input gradient a window
// InputGradImplicit accepts), with something to multiply. Its products
// store with beta 0 (and its strided 1×1 and phased input gradients write
// the positions no window reads as zeros), so the executor hands the
// kernel its output uncleared: ResNet-50's input gradients at batch 8 are
// some 340 MB a step, cleared on the calling thread alone before this.
// Every other route (im2col, col2im's scatter-add, depthwise, float64,
// ConvTranspose) counts on a zeroed output.
func (p *convGradPlan) overwrites(dt graph.DType, transpose, filter bool) bool {
	win := p.win
	if dt != graph.Float32 || transpose || p.batch == 0 || win.outSize == 0 || win.inSize == 0 || p.ci == 0 || p.cq == 0 {
		return false
	}
	g, ok := p.implicit()
	if !ok {
		return false
	}
	return filter || g.InputGradImplicit(win.padEnd[0], win.padEnd[1])
}

// implicitConvGrad routes ungrouped 2-D float32 Conv gradients through
// package nn's implicit GEMM; tests turn it off to compare with im2col.
var implicitConvGrad = true

// implicit returns the implicit-GEMM geometry of an ungrouped 2-D float32
// convolution (image X of ci channels, columns of cq), or false.
func (p *convGradPlan) implicit() (nn.Conv2D, bool) {
	if !implicitConvGrad || p.group != 1 || len(p.win.in) != 2 {
		return nn.Conv2D{}, false
	}
	return nn.Conv2DOf(p.win.nnWindow(), p.batch, p.ci, p.cq)
}

// convGradImageBatch returns how many images of a batch of n share one
// product, their im2col columns (perImage elements each) side by side, when
// at least two fit 2·convGradColBudget elements; 1 otherwise. The batch is
// cut into tiles of nearly equal size. The late layers of a CNN (a few
// window positions per image) thereby run one wide GEMM instead of n skinny
// ones that each pack the whole weight matrix again.
func convGradImageBatch(n, perImage int) int {
	if n < 2 || perImage <= 0 {
		return 1
	}
	most := 2 * convGradColBudget / perImage
	if most < 2 {
		return 1
	}
	tiles := (n + most - 1) / most
	return (n + tiles - 1) / tiles
}

// gradBufs keeps a few float32 scratch matrices alive between calls (a
// free list, not a sync.Pool: the pool is emptied at every garbage
// collection, and megabytes of fresh garbage per call would let the heap
// grow to twice the live activations before the collector runs). At most
// 4 buffers are kept; they grow to the largest request and stay.
var gradBufs struct {
	mu   sync.Mutex
	free [][]float32
}

// gradScratch returns a buffer of n elements with unspecified contents; give it
// back with gradRelease.
func gradScratch[T float32 | float64](n int) []T {
	var zero T
	if _, ok := any(zero).(float32); !ok {
		return make([]T, n)
	}
	gradBufs.mu.Lock()
	best := -1
	for i, b := range gradBufs.free {
		if cap(b) >= n && (best < 0 || cap(b) < cap(gradBufs.free[best])) {
			best = i
		}
	}
	if best < 0 {
		gradBufs.mu.Unlock()
		return any(make([]float32, n)).([]T)
	}
	b := gradBufs.free[best]
	last := len(gradBufs.free) - 1
	gradBufs.free[best] = gradBufs.free[last]
	gradBufs.free = gradBufs.free[:last]
	gradBufs.mu.Unlock()
	return any(b[:n]).([]T)
}

// gradRelease returns a buffer from gradScratch, replacing the smallest kept one
// when the list is full.
func gradRelease[T float32 | float64](buf []T) {
	b, ok := any(buf).([]float32)
	if !ok || cap(b) == 0 {
		return
	}
	gradBufs.mu.Lock()
	defer gradBufs.mu.Unlock()
	if len(gradBufs.free) < 4 {
		gradBufs.free = append(gradBufs.free, b)
		return
	}
	small := 0
	for i, f := range gradBufs.free {
		if cap(f) < cap(gradBufs.free[small]) {
			small = i
		}
	}
	if cap(b) > cap(gradBufs.free[small]) {
		gradBufs.free[small] = b
	}
}

// gatherImageRows copies the ch planes of L elements of images [i0, i0+cnt)
// of t (each image ch·L elements) side by side into dst, whose rows are ld
// elements apart: row c holds plane c of every image in turn.
func gatherImageRows[T float32 | float64](dst []T, ld int, t []T, ch, L, i0, cnt int) {
	nn.ParallelItemsOf(cnt, gradWorkers(cnt, ch*L), false, gatherRowsTask[T]{dst: dst, t: t, ld: ld, ch: ch, L: L, i0: i0})
}

// gatherRowsTask is gatherImageRows's work: item b is image i0+b.
type gatherRowsTask[T float32 | float64] struct {
	dst, t        []T
	ld, ch, L, i0 int
}

func (k *gatherRowsTask[T]) Item(_, b int) {
	dst, ld, ch, L := k.dst, k.ld, k.ch, k.L
	ti := k.t[(k.i0+b)*ch*L : (k.i0+b+1)*ch*L]
	for c := 0; c < ch; c++ {
		copy(dst[c*ld+b*L:c*ld+(b+1)*L], ti[c*L:(c+1)*L])
	}
}

// convColsToImageBatched is convColsToImage for one group, nb images at a
// time: one product Wᵀ·[q_i …] for the images' columns side by side, then
// col2im per image (in parallel: each writes its own image).
func convColsToImageBatched[T float32 | float64](p *convGradPlan, q, w, img []T, nb int) {
	win := p.win
	ck := p.ci * win.kernelSize
	L, I := win.outSize, win.inSize
	ld := nb * L
	col := gradScratch[T](ck * ld)
	defer gradRelease(col)
	qb := gradScratch[T](p.cq * ld)
	defer gradRelease(qb)
	for i0 := 0; i0 < p.batch; i0 += nb {
		cnt := min(nb, p.batch-i0)
		gatherImageRows(qb, ld, q, p.cq, L, i0, cnt)
		gemmAcc(true, false, ck, cnt*L, p.cq, w, ck, qb, ld, false, col, ld)
		if len(win.in) == 2 {
			// col2im channel by channel over all cnt images: each
			// column row is read in one pass.
			per := max(1, (p.ci+colChannelChunks-1)/colChannelChunks)
			items := (p.ci + per - 1) / per
			nn.ParallelItemsOf(items, gradWorkers(items, per*win.kernelSize*cnt*L), false, col2ImTask[T]{
				img: img[i0*p.ci*I:], col: col, stride: p.ci * I, ld: ld, cnt: cnt, per: per, ci: p.ci, win: win})
			continue
		}
		nn.ParallelItems(cnt, gradWorkers(cnt, ck*L), false, func(_, b int) {
			ig := img[(i0+b)*p.ci*I : (i0+b+1)*p.ci*I]
			windowColumnsStrided(col[b*L:], ld, ig, p.ci, win, 0, win.outRows, true)
		})
	}
}

// col2ImTask is convColsToImageBatched's 2-D col2im: item it adds the
// columns of channels [it·per, (it+1)·per) into the cnt images.
type col2ImTask[T float32 | float64] struct {
	img, col                 []T
	stride, ld, cnt, per, ci int
	win                      *gradWindow
}

func (k *col2ImTask[T]) Item(_, it int) {
	c0, c1 := it*k.per, min((it+1)*k.per, k.ci)
	nn.Col2ImAddImages(k.img, k.stride, k.col, k.ld, k.cnt, c0, c1, k.win.nnWindow())
}

// colChannelChunks is how many channel ranges the batched col2im hands
// out to the workers.
const colChannelChunks = 16

// transposedWindow returns, for a 2-D Conv with unit strides and
// dilations whose pads are below the kernel size, the window that makes
// its input gradient a plain correlation: dX = conv(dY, W') with W' the
// kernel flipped in space and its channel axes swapped, over dY padded by
// kernel-1-pad on each side. nil for every other geometry.
func (p *convGradPlan) transposedWindow() *gradWindow {
	if !p.twDone {
		p.tw, p.twDone = p.makeTransposedWindow(), true
	}
	return p.tw
}

// makeTransposedWindow is transposedWindow, worked out.
func (p *convGradPlan) makeTransposedWindow() *gradWindow {
	w := p.win
	if len(w.in) != 2 {
		return nil
	}
	tw := &gradWindow{in: w.out, out: w.in, kernel: w.kernel,
		strides: []int{1, 1}, dilations: []int{1, 1}, padBegin: make([]int, 2), padEnd: make([]int, 2)}
	for j := 0; j < 2; j++ {
		if w.strides[j] != 1 || w.dilations[j] != 1 || w.padBegin[j] >= w.kernel[j] || w.padEnd[j] >= w.kernel[j] {
			return nil
		}
		tw.padBegin[j] = w.kernel[j] - 1 - w.padBegin[j]
		tw.padEnd[j] = w.kernel[j] - 1 - w.padEnd[j]
	}
	tw.finish()
	return tw
}

// convColsToImageGather is the input gradient of an ungrouped stride-1
// Conv as the correlation of dY with the flipped kernel (see
// transposedWindow), nb images at a time: im2col gathers dY instead of
// col2im scattering (read-modify-write) into dX, and the product writes
// ci rows instead of ci·kernel ones.
func convColsToImageGather[T float32 | float64](p *convGradPlan, tw *gradWindow, q, w, img []T, nb int) {
	win := p.win
	ks := win.kernelSize
	L, I := win.outSize, win.inSize
	ck := p.cq * ks
	wt := flippedKernel(p, w)
	defer gradRelease(wt)
	ld := nb * I
	col := gradScratch[T](ck * ld)
	defer gradRelease(col)
	out := gradScratch[T](p.ci * ld)
	defer gradRelease(out)
	for i0 := 0; i0 < p.batch; i0 += nb {
		cnt := min(nb, p.batch-i0)
		nn.ParallelItems(cnt, gradWorkers(cnt, ck*I), false, func(_, b int) {
			qi := q[(i0+b)*p.cq*L : (i0+b+1)*p.cq*L]
			windowColumnsStrided(col[b*I:], ld, qi, p.cq, tw, 0, tw.outRows, false)
		})
		gemmAcc(false, false, p.ci, cnt*I, ck, wt, ck, col, ld, false, out, ld)
		nn.ParallelItems(cnt, gradWorkers(cnt, p.ci*I), false, func(_, b int) {
			ig := img[(i0+b)*p.ci*I : (i0+b+1)*p.ci*I]
			for c := 0; c < p.ci; c++ {
				copy(ig[c*I:(c+1)*I], out[c*ld+b*I:c*ld+(b+1)*I])
			}
		})
	}
}

// flippedKernel returns W' for the input gradient as a correlation (see
// transposedWindow): W'[c, (m, a, b)] = W[m, c, kh-1-a, kw-1-b], in a
// scratch buffer to give back with gradRelease.
func flippedKernel[T float32 | float64](p *convGradPlan, w []T) []T {
	win := p.win
	ks := win.kernelSize
	kh, kw := win.kernel[0], win.kernel[1]
	ck := p.cq * ks
	wt := gradScratch[T](p.ci * ck)
	for m := 0; m < p.cq; m++ {
		for c := 0; c < p.ci; c++ {
			src := w[(m*p.ci+c)*ks : (m*p.ci+c+1)*ks]
			dst := wt[c*ck+m*ks : c*ck+(m+1)*ks]
			for a := 0; a < kh; a++ {
				for b := 0; b < kw; b++ {
					dst[a*kw+b] = src[(kh-1-a)*kw+kw-1-b]
				}
			}
		}
	}
	return wt
}

// convFilterGradBatched is convFilterGrad for one group, nb images at a
// time: dw += [q_i …]·[im2col(img_i) …]ᵀ, one product whose shared dimension
// runs over the images' window positions. Tiles are summed in batch order,
// so the result does not depend on scheduling.
func convFilterGradBatched[T float32 | float64](p *convGradPlan, q, img, dw []T, nb int) {
	win := p.win
	ck := p.ci * win.kernelSize
	L, I := win.outSize, win.inSize
	ld := nb * L
	col := gradScratch[T](ck * ld)
	defer gradRelease(col)
	qb := gradScratch[T](p.cq * ld)
	defer gradRelease(qb)
	for i0 := 0; i0 < p.batch; i0 += nb {
		cnt := min(nb, p.batch-i0)
		gatherImageRows(qb, ld, q, p.cq, L, i0, cnt)
		nn.ParallelItems(cnt, gradWorkers(cnt, ck*L), false, func(_, b int) {
			ig := img[(i0+b)*p.ci*I : (i0+b+1)*p.ci*I]
			windowColumnsStrided(col[b*L:], ld, ig, p.ci, win, 0, win.outRows, false)
		})
		gemmAcc(false, true, p.cq, ck, cnt*L, qb, ld, col, ld, true, dw, ck)
	}
}

// depthwiseGeom views a 1-D or 2-D window as 2-D (a unit height for 1-D).
type depthwiseGeom struct {
	ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw int
	los, his                                       []int // valid output columns per horizontal tap
}

func newDepthwiseGeom(w *gradWindow) *depthwiseGeom {
	g := &depthwiseGeom{ih: 1, iw: w.in[0], oh: 1, ow: w.out[0], kh: 1, kw: w.kernel[0], sh: 1, sw: w.strides[0],
		dh: 1, dw: w.dilations[0], ph: 0, pw: w.padBegin[0]}
	if len(w.in) == 2 {
		g.ih, g.iw, g.oh, g.ow = w.in[0], w.in[1], w.out[0], w.out[1]
		g.kh, g.kw = w.kernel[0], w.kernel[1]
		g.sh, g.sw = w.strides[0], w.strides[1]
		g.dh, g.dw = w.dilations[0], w.dilations[1]
		g.ph, g.pw = w.padBegin[0], w.padBegin[1]
	}
	g.los, g.his = make([]int, g.kw), make([]int, g.kw)
	for b := 0; b < g.kw; b++ {
		g.los[b], g.his[b] = windowValidRange(b*g.dw-g.pw, g.sw, g.iw, g.ow)
	}
	return g
}

// depthwiseDataGrad is the input gradient of a 1-D or 2-D Conv with one
// input channel per group, by direct accumulation: every output channel of
// a group adds its taps times dy into the group's input channel.
func depthwiseDataGrad[T float32 | float64](p *convGradPlan, dy, w, dx []T) {
	g := newDepthwiseGeom(p.win)
	mult := p.cq / p.group
	inSize, outSize, kSize := g.ih*g.iw, g.oh*g.ow, g.kh*g.kw
	items := p.batch * p.group
	workers := gradWorkers(items, mult*outSize*kSize)
	nn.ParallelItems(items, workers, false, func(_, item int) {
		i, c := item/p.group, item%p.group
		dxp := dx[(i*p.ci+c)*inSize : (i*p.ci+c+1)*inSize]
		for m := c * mult; m < (c+1)*mult; m++ {
			dyp := dy[(i*p.cq+m)*outSize : (i*p.cq+m+1)*outSize]
			wk := w[m*kSize : (m+1)*kSize]
			for r := 0; r < g.oh; r++ {
				dyrow := dyp[r*g.ow : (r+1)*g.ow]
				for a := 0; a < g.kh; a++ {
					in := r*g.sh + a*g.dh - g.ph
					if in < 0 || in >= g.ih {
						continue
					}
					xrow := dxp[in*g.iw : (in+1)*g.iw]
					for b := 0; b < g.kw; b++ {
						lo, hi := g.los[b], g.his[b]
						if lo >= hi {
							continue
						}
						wv := wk[a*g.kw+b]
						pos := lo*g.sw + b*g.dw - g.pw
						for _, v := range dyrow[lo:hi] {
							xrow[pos] += wv * v
							pos += g.sw
						}
					}
				}
			}
		}
	})
}

// depthwiseFilterGrad is the weight gradient of a 1-D or 2-D Conv with one
// input channel per group: each output channel's taps correlate its dy with
// its input channel, summed over the batch in order (one goroutine per
// channel, so the result is reproducible).
func depthwiseFilterGrad[T float32 | float64](p *convGradPlan, dy, x, dw []T) {
	g := newDepthwiseGeom(p.win)
	mult := p.cq / p.group
	inSize, outSize, kSize := g.ih*g.iw, g.oh*g.ow, g.kh*g.kw
	workers := gradWorkers(p.cq, p.batch*outSize*kSize)
	nn.ParallelItems(p.cq, workers, false, func(_, m int) {
		c := m / mult
		wk := dw[m*kSize : (m+1)*kSize]
		for i := 0; i < p.batch; i++ {
			xp := x[(i*p.ci+c)*inSize : (i*p.ci+c+1)*inSize]
			dyp := dy[(i*p.cq+m)*outSize : (i*p.cq+m+1)*outSize]
			for a := 0; a < g.kh; a++ {
				for b := 0; b < g.kw; b++ {
					lo, hi := g.los[b], g.his[b]
					if lo >= hi {
						continue
					}
					var sum T
					for r := 0; r < g.oh; r++ {
						in := r*g.sh + a*g.dh - g.ph
						if in < 0 || in >= g.ih {
							continue
						}
						xrow := xp[in*g.iw : (in+1)*g.iw]
						pos := lo*g.sw + b*g.dw - g.pw
						for _, v := range dyp[r*g.ow+lo : r*g.ow+hi] {
							sum += v * xrow[pos]
							pos += g.sw
						}
					}
					wk[a*g.kw+b] += sum
				}
			}
		}
	})
}

// convGradRowsPerTile picks how many rows of window positions one im2col
// buffer of ck rows holds.
func convGradRowsPerTile(ck int, win *gradWindow) int {
	rows := convGradColBudget / max(ck*win.outLast, 1)
	return min(max(rows, 1), max(win.outRows, 1))
}

// windowValidRange returns the window positions [lo, hi) of one axis whose
// image position o*stride+off lies in [0, in), clamped to [0, out).
func windowValidRange(off, stride, in, out int) (lo, hi int) {
	if off < 0 {
		lo = (-off + stride - 1) / stride
	}
	if last := in - 1 - off; last >= 0 {
		hi = last/stride + 1
	}
	hi = min(hi, out)
	lo = min(lo, hi)
	return lo, hi
}

// nnWindow returns the window as package nn takes it.
func (w *gradWindow) nnWindow() nn.Window {
	return nn.Window{In: w.in, Out: w.out, Kernel: w.kernel, Strides: w.strides, Dilations: w.dilations,
		PadBegin: w.padBegin, PadEnd: w.padEnd}
}

// windowColumns moves data between an image of ch channels (each
// prod(w.in) elements) and its column matrix: ch·prod(w.kernel) rows, one
// column per window position in rows [r0, r1) of positions. With scatter
// false it fills col (im2col, zero where a tap falls in the padding); with
// scatter true it adds col's entries into the image positions they were
// read from (col2im, the adjoint), dropping those in the padding. Both are
// package nn's (Im2Col, Col2ImAdd).
func windowColumns[T float32 | float64](col, img []T, ch int, w *gradWindow, r0, r1 int, scatter bool) {
	windowColumnsStrided(col, (r1-r0)*w.outLast, img, ch, w, r0, r1, scatter)
}

// windowColumnsStrided is windowColumns with the column matrix's rows ld
// elements apart (ld at least the (r1-r0)·w.outLast columns moved), so that
// several images' columns can sit side by side in one matrix.
func windowColumnsStrided[T float32 | float64](col []T, ld int, img []T, ch int, w *gradWindow, r0, r1 int, scatter bool) {
	if scatter {
		nn.Col2ImAdd(img, col, ld, ch, w.nnWindow(), r0, r1)
		return
	}
	nn.Im2Col(col, ld, img, ch, w.nnWindow(), r0, r1)
}

// gemmAcc computes C = op(A)·op(B), or C += op(A)·op(B) when accumulate is
// set, for row-major matrices: op(A) is m×k, op(B) k×n, with row strides
// lda, ldb, ldc as stored. float32 goes to gemm.Sgemm; float64 uses a plain
// loop (it serves gradient checks).
func gemmAcc[T float32 | float64](transA, transB bool, m, n, k int, a []T, lda int, b []T, ldb int, accumulate bool, c []T, ldc int) {
	if m <= 0 || n <= 0 {
		return
	}
	if af, ok := any(a).([]float32); ok {
		beta := float32(0)
		if accumulate {
			beta = 1
		}
		gemm.Sgemm(transA, transB, m, n, k, 1, af, lda, any(b).([]float32), ldb, beta, any(c).([]float32), ldc)
		return
	}
	at := func(i, p int) T {
		if transA {
			return a[p*lda+i]
		}
		return a[i*lda+p]
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if !accumulate {
			clear(row)
		}
		if transB {
			for j := range row {
				bj := b[j*ldb : j*ldb+k]
				var s T
				for p, bv := range bj {
					s += at(i, p) * bv
				}
				row[j] += s
			}
			continue
		}
		for p := 0; p < k; p++ {
			av := at(i, p)
			if av == 0 {
				continue
			}
			brow := b[p*ldb : p*ldb+n]
			for j, bv := range brow {
				row[j] += av * bv
			}
		}
	}
}

// convGradGemmParallelWork is the m·n·k above which one gemm.Sgemm call
// spreads itself over the cores, so the caller runs its products in turn.
const convGradGemmParallelWork = 1 << 20

// convGradItemWorkers picks the goroutines for items independent products
// of m·n·k work each.
func convGradItemWorkers(items, work int) int {
	if work >= convGradGemmParallelWork {
		return 1
	}
	return gradWorkers(items, work)
}

// gradWorkers is how many goroutines share items work items of about cost
// operations each: one per core, fewer when the work is small.
func gradWorkers(items, cost int) int {
	p := min(kern.Workers(), items)
	if total := items * cost; total < p*(1<<16) {
		p = total / (1 << 16)
	}
	return max(p, 1)
}
