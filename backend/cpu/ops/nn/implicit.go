package nn

import (
	"sync"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
)

// Conv2D is the geometry of an ungrouped 2-D convolution over a batch, for
// the float32 implicit-GEMM kernels: the forward product and the filter
// gradient pack their GEMM panels straight from the NCHW tensors (see
// gemm.PackedProduct), so no im2col matrix is ever written, and the whole
// batch makes one product (its columns are the N·OH·OW window positions),
// which both cores share.
//
// The image X is (N, C, H, W), the kernel W (M, C, KH, KW) and the output
// (N, M, OH, OW); output position (oh, ow) reads image row
// oh·SH + a·DH − PadTop and column ow·SW + b·DW − PadLeft for tap (a, b).
// Positions outside the image read as zero.
type Conv2D struct {
	N, C, H, W      int
	M               int
	KH, KW          int
	SH, SW, DH, DW  int
	PadTop, PadLeft int
	OH, OW          int

	// flipTaps makes im2col row (c, a, b) read tap (KH−1−a, KW−1−b):
	// InputGrad's correlation with the flipped kernel then packs the
	// kernel unflipped.
	flipTaps bool
	// Winograd is the compile option that chooses the transform for the
	// products it can compute (backend.Tuning.Winograd).
	Winograd WinogradPolicy
}

// Conv2DOf returns the implicit-GEMM geometry of an ungrouped 2-D window
// over images of c channels producing m channels, or false for other
// ranks and for negative begin pads (ConvTranspose with a larger
// output_shape).
func Conv2DOf(w Window, n, c, m int) (Conv2D, bool) {
	if len(w.In) != 2 || w.PadBegin[0] < 0 || w.PadBegin[1] < 0 {
		return Conv2D{}, false
	}
	return Conv2D{N: n, C: c, H: w.In[0], W: w.In[1], M: m, KH: w.Kernel[0], KW: w.Kernel[1],
		SH: w.Strides[0], SW: w.Strides[1], DH: w.Dilations[0], DW: w.Dilations[1],
		PadTop: w.PadBegin[0], PadLeft: w.PadBegin[1], OH: w.Out[0], OW: w.Out[1]}, true
}

// Forward computes y = conv(x, w), or y += conv(x, w) when accumulate is set.
func (g *Conv2D) Forward(x, w, y []float32, accumulate bool) {
	if g.oneByOne() {
		g.forwardOneByOne(x, w, y, accumulate)
		return
	}
	if g.patchify() {
		g.forwardPatches(x, w, nil, y, accumulate)
		return
	}
	if g.winoForward(x, w, y, accumulate) {
		return
	}
	L, ck := g.OH*g.OW, g.C*g.KH*g.KW
	if g.N == 0 || g.M == 0 || L == 0 {
		return
	}
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	if ck == 0 {
		if !accumulate {
			clear(y[:g.N*g.M*L])
		}
		return
	}
	xp := g.pad(x)
	defer xp.release()
	pk := kern.TakeBox[columnPacker]()
	defer kern.PutBox(pk)
	*pk = columnPacker{g: *g, xp: xp}
	pp := gemm.PackedProduct{M: g.M, N: g.N * L, K: ck,
		A: w, LDA: ck,
		BPacker: pk,
		C:       y, LDC: L, ColBlock: L, ColStride: g.M * L, Beta: beta,
		NC: implicitNC(g.M)}
	pp.Run()
}

// FilterGrad computes dw = Σ over the batch of dy·im2col(x)ᵀ (or adds it
// to dw when accumulate is set): the weight gradient, as one product
// whose shared dimension runs over every window position of every image.
func (g *Conv2D) FilterGrad(dy, x, dw []float32, accumulate bool) {
	if g.oneByOne() {
		g.filterGradOneByOne(dy, x, dw, accumulate)
		return
	}
	if g.patchify() {
		g.filterGradPatches(dy, x, dw, accumulate)
		return
	}
	if g.wgradUse() {
		g.winogradFilterGrad(dy, x, dw, accumulate)
		return
	}
	L, ck := g.OH*g.OW, g.C*g.KH*g.KW
	if g.M == 0 || ck == 0 {
		return
	}
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	if g.N == 0 || L == 0 {
		if !accumulate {
			clear(dw[:g.M*ck])
		}
		return
	}
	xp := g.pad(x)
	defer xp.release()
	pk := kern.TakeBox[filterGradPackers]()
	defer kern.PutBox(pk)
	*pk = filterGradPackers{a: outputRowPacker{g: *g, dy: dy}, b: columnTPacker{g: *g, xp: xp}}
	pp := gemm.PackedProduct{M: g.M, N: ck, K: g.N * L,
		APacker: &pk.a,
		BPacker: &pk.b,
		C:       dw, LDC: ck, Beta: beta, NC: implicitNC(g.M)}
	pp.Run()
}

// InputGradImplicit reports whether InputGrad handles g: a 1×1 window
// without padding (any strides; see pointwise.go), a strided window
// without dilation whose stride phases are stride-1 correlations with
// non-negative pads (see strided_grad.go), or unit strides and
// dilations and pads below the kernel size on every side (padBottom and
// padRight are the end pads), so that the input gradient is a plain
// correlation of dy with the flipped kernel.
func (g *Conv2D) InputGradImplicit(padBottom, padRight int) bool {
	if g.oneByOne() {
		return true
	}
	var ph [maxPhases]inputPhase
	if _, ok := g.inputPhases(&ph); ok {
		return true
	}
	return g.SH == 1 && g.SW == 1 && g.DH == 1 && g.DW == 1 &&
		g.PadTop < g.KH && g.PadLeft < g.KW && padBottom < g.KH && padRight < g.KW &&
		g.PadTop >= 0 && g.PadLeft >= 0 && padBottom >= 0 && padRight >= 0
}

// InputGrad computes dx from dy for a convolution that InputGradImplicit
// accepts: dx = conv(dy, W') over dy padded by kernel−1−pad, where
// W'[c, m, a, b] = W[m, c, KH−1−a, KW−1−b]. The product gathers dy's
// windows (as Forward gathers x's) and packs W' straight from W, so
// neither the flipped kernel nor an im2col matrix is written, and dx is
// overwritten in place.
func (g *Conv2D) InputGrad(dy, w, dx []float32) {
	if g.oneByOne() {
		if g.N > 0 && g.C > 0 && g.H*g.W > 0 {
			g.inputGradOneByOne(dy, w, dx)
		}
		return
	}
	var ph [maxPhases]inputPhase
	if n, ok := g.inputPhases(&ph); ok {
		g.inputGradPhased(dy, w, dx, ph[:n])
		return
	}
	if g.winoInputGrad(dy, w, dx) {
		return
	}
	ks := g.KH * g.KW
	I := g.H * g.W
	if g.N == 0 || g.C == 0 || I == 0 {
		return
	}
	if g.M == 0 || ks == 0 || g.OH*g.OW == 0 {
		clear(dx[:g.N*g.C*I])
		return
	}
	gt := Conv2D{N: g.N, C: g.M, H: g.OH, W: g.OW, M: g.C, KH: g.KH, KW: g.KW,
		SH: 1, SW: 1, DH: 1, DW: 1, PadTop: g.KH - 1 - g.PadTop, PadLeft: g.KW - 1 - g.PadLeft,
		OH: g.H, OW: g.W, flipTaps: true, Winograd: g.Winograd}
	dyp := gt.pad(dy)
	defer dyp.release()
	pk := kern.TakeBox[inputGradPackers]()
	defer kern.PutBox(pk)
	*pk = inputGradPackers{a: transposedPacker{g: *g, w: w}, b: columnPacker{g: gt, xp: dyp}}
	pp := gemm.PackedProduct{M: g.C, N: g.N * I, K: g.M * ks,
		APacker: &pk.a,
		BPacker: &pk.b,
		C:       dx, LDC: I, ColBlock: I, ColStride: g.C * I, NC: implicitNC(g.C)}
	pp.Run()
}

// The packers of the implicit products are structs that hold the
// geometry (copied, so that a local Conv2D stays on its caller's stack)
// and the operand they read, boxed per call (kern.TakeBox): a closure
// handed to the product would be allocated on every call.
type (
	// filterGradPackers are FilterGrad's packers.
	filterGradPackers struct {
		a outputRowPacker
		b columnTPacker
	}
	// inputGradPackers are InputGrad's packers.
	inputGradPackers struct {
		a transposedPacker
		b columnPacker
	}
)

// transposedPacker is the PackA of InputGrad: A has rows the C input
// channels and columns (m, a, b), A[c, (m, a, b)] = W[m, c, a, b] (the
// B side reads the flipped taps, see flipTaps). The MR channels of a
// strip are MR consecutive rows KH·KW long in W[m], so each output
// channel's stretch is one interleave of rows.
type transposedPacker struct {
	g Conv2D
	w []float32
}

func (pk *transposedPacker) PackA(dst []float32, i0, mc, p0, kc int) {
	g, w := &pk.g, pk.w
	mr, _ := gemm.KernelShape()
	ks := g.KH * g.KW
	for s := 0; s*mr < mc; s++ {
		strip := dst[s*mr*kc : (s+1)*mr*kc]
		rows := min(mr, mc-s*mr)
		c0 := i0 + s*mr
		m, t := p0/ks, p0%ks
		for q := 0; q < kc; {
			n := min(ks-t, kc-q)
			gemm.PackRowsA(strip, q, w[(m*g.C+c0)*ks+t:], ks, rows, n)
			q += n
			t = 0
			m++
		}
	}
}

// implicitNC is the widest B panel of an implicit product with m rows:
// wide enough that packing A again per panel costs at most an eighth of
// packing B, and at least 512 columns (a 512 KiB panel at the GEMM's k
// block of 256, which stays in L2).
func implicitNC(m int) int {
	return max(512, 8*m)
}

// padded is an image batch copied into zero-bordered planes of hp rows
// and wp columns (the image at row PadTop, column PadLeft), so that every
// tap of every window reads inside a plane: the packers then copy runs
// without checking for the padding.
//
// With a column stride SW above 1 (and a window of at least SH·SW taps)
// each padded row is stored phase-split: its columns c ≡ r (mod SW) come
// first for r = 0, then for r = 1, and so on, each phase pw columns wide
// (wp = SW·pw), so that the columns one tap reads at consecutive window
// positions (ow·SW + b·DW) lie side by side in phase b·DW mod SW. The
// packers then copy contiguous runs instead of gathering every SW-th
// value.
type padded struct {
	x      []float32
	hp, wp int
	pw     int  // phase width (phased); wp otherwise
	phased bool // rows are phase-split (SW > 1)
	copied bool // x is a scratch buffer, not the caller's batch
}

// colStep is the distance in x between the values one tap reads at
// consecutive window positions of a row.
func (p padded) colStep(sw int) int {
	if p.phased {
		return 1
	}
	return sw
}

// col is where padded column c (a tap's column at window column 0) lies
// in a stored row.
func (p padded) col(c, sw int) int {
	if p.phased {
		return (c%sw)*p.pw + c/sw
	}
	return c
}

// release gives a copied batch's buffer back to scratch.
func (p padded) release() {
	if p.copied {
		release(p.x)
	}
}

// pad copies x into a padded scratch buffer; give it back with release.
// When every window already lies inside the image (no padding, no window
// past the end) and the rows are not phase-split, x itself serves,
// uncopied.
func (g *Conv2D) pad(x []float32) padded {
	hp := max(g.PadTop+g.H, (g.OH-1)*g.SH+(g.KH-1)*g.DH+1)
	wp := max(g.PadLeft+g.W, (g.OW-1)*g.SW+(g.KW-1)*g.DW+1)
	planes := g.N * g.C
	if g.SW > 1 && g.KH*g.KW >= g.SH*g.SW {
		// The packers read each value about KH·KW/(SH·SW) times:
		// splitting the phases once is cheaper than gathering
		// every time. (A strided 1×1 window reads a value at most
		// once and gathers as it packs.)
		return g.padPhased(x, hp, wp)
	}
	if g.PadTop == 0 && g.PadLeft == 0 && hp == g.H && wp == g.W && len(x) >= planes*hp*wp {
		return padded{x: x, hp: hp, wp: wp, pw: wp}
	}
	xp := scratch[float32](planes * hp * wp)
	// Work items of at least padChunk elements: the late layers' planes
	// (4×4 padded) are too small to hand out one at a time.
	plane := hp * wp
	per := max(1, padChunk/plane)
	items := (planes + per - 1) / per
	ParallelItemsOf(items, nnWorkers(items, per*plane), false,
		padTask{g: *g, x: x, xp: xp, wp: wp, plane: plane, per: per, planes: planes})
	return padded{x: xp, hp: hp, wp: wp, pw: wp, copied: true}
}

// padTask is pad's work: item it copies planes [it·per, (it+1)·per) of x
// into their bordered planes of xp.
type padTask struct {
	g                      Conv2D
	x, xp                  []float32
	wp, plane, per, planes int
}

func (t *padTask) Item(_, it int) {
	g, x, xp, wp, plane, per, planes := &t.g, t.x, t.xp, t.wp, t.plane, t.per, t.planes
	p0, p1 := it*per, min((it+1)*per, planes)
	if plane <= padChunk/4 {
		// Small planes: clear them all in one go, then copy
		// the image rows in.
		clear(xp[p0*plane : p1*plane])
		for p := p0; p < p1; p++ {
			dst := xp[p*plane : (p+1)*plane]
			for r := 0; r < g.H; r++ {
				at := (g.PadTop+r)*wp + g.PadLeft
				copyRun(dst[at:at+g.W], x, (p*g.H+r)*g.W, g.W, 1)
			}
		}
		return
	}
	for p := p0; p < p1; p++ {
		dst := xp[p*plane : (p+1)*plane]
		src := x[p*g.H*g.W : (p+1)*g.H*g.W]
		// Only the border is cleared: the top rows, then from
		// each image row's end to the next one's start (its
		// right pad and the next row's left pad), then the
		// bottom rows.
		if g.H == 0 {
			clear(dst)
			continue
		}
		clear(dst[:g.PadTop*wp+g.PadLeft])
		for r := 0; r < g.H; r++ {
			at := (g.PadTop+r)*wp + g.PadLeft
			copyRun(dst[at:at+g.W], src, r*g.W, g.W, 1)
			next := at + wp
			if r == g.H-1 {
				next = len(dst)
			}
			clear(dst[at+g.W : next])
		}
	}
}

// padChunk is the fewest elements of padded planes one work item of pad
// writes.
const padChunk = 4096

// padPhased is pad for a column stride above 1: the padded rows of hp
// rows by wl logical columns are stored phase-split (see padded). Only
// the phases and the rows that some tap reads are written; the others
// are never read and keep whatever the scratch buffer held.
func (g *Conv2D) padPhased(x []float32, hp, wl int) padded {
	sw := g.SW
	pw := (wl + sw - 1) / sw
	wp := sw * pw
	planes := g.N * g.C
	t := padPhasedTask{g: *g, x: x, hp: hp, wp: wp, pw: pw, planes: planes}
	for b := 0; b < g.KW; b++ {
		t.usedPhase[(b*g.DW)%sw%64] = true
	}
	// The rows some tap reads, worked out once (every plane reads
	// the same rows) for the first len(t.read) rows.
	for r := 0; r < min(hp, len(t.read)); r++ {
		t.read[r] = g.rowRead(r)
	}
	t.xp = scratch[float32](planes * hp * wp)
	t.per = max(1, padChunk/(hp*wp))
	items := (planes + t.per - 1) / t.per
	ParallelItemsOf(items, nnWorkers(items, t.per*hp*wp), false, t)
	return padded{x: t.xp, hp: hp, wp: wp, pw: pw, phased: true, copied: true}
}

// padPhasedTask is padPhased's work: item it fills the phase-split planes
// [it·per, (it+1)·per) of xp. read[r] tells whether some tap reads row r
// (rows past len(read) are asked of rowRead).
type padPhasedTask struct {
	g                       Conv2D
	x, xp                   []float32
	hp, wp, pw, per, planes int
	usedPhase               [64]bool
	read                    [1024]bool
}

func (t *padPhasedTask) Item(_, it int) {
	g, x, xp, hp, wp, pw, per, planes := &t.g, t.x, t.xp, t.hp, t.wp, t.pw, t.per, t.planes
	sw, usedPhase := g.SW, &t.usedPhase
	for p := it * per; p < min((it+1)*per, planes); p++ {
		dst := xp[p*hp*wp : (p+1)*hp*wp]
		src := x[p*g.H*g.W : (p+1)*g.H*g.W]
		for r := 0; r < hp; r++ {
			if !t.rowIsRead(r) {
				continue
			}
			row := dst[r*wp : (r+1)*wp]
			ir := r - g.PadTop
			if ir < 0 || ir >= g.H {
				for ph := 0; ph < sw; ph++ {
					if sw > 64 || usedPhase[ph] {
						clear(row[ph*pw : (ph+1)*pw])
					}
				}
				continue
			}
			in := src[ir*g.W : (ir+1)*g.W]
			if sw == 2 && usedPhase[0] && usedPhase[1] {
				// The image rows read from here on, split in one
				// call where the vector loop can take them.
				n := 1
				for r+n < hp && r+n-g.PadTop < g.H && t.rowIsRead(r+n) {
					n++
				}
				if done := deinterleave2Rows(dst[r*wp:], x, p*g.H*g.W+ir*g.W, g.W, wp, pw, g.PadLeft, n); done > 0 {
					r += done - 1
					continue
				}
				deinterleave2(row[:pw], row[pw:2*pw], in, g.PadLeft)
				continue
			}
			for ph := 0; ph < sw; ph++ {
				if sw <= 64 && !usedPhase[ph] {
					continue
				}
				out := row[ph*pw : (ph+1)*pw]
				for i := range out {
					c := i*sw + ph - g.PadLeft
					if c >= 0 && c < len(in) {
						out[i] = in[c]
					} else {
						out[i] = 0
					}
				}
			}
		}
	}
}

// rowIsRead reports whether some tap reads padded row r.
func (t *padPhasedTask) rowIsRead(r int) bool {
	if r < len(t.read) {
		return t.read[r]
	}
	return t.g.rowRead(r)
}

// deinterleave2Rows is deinterleave2 for rows consecutive image rows of
// x, w wide, the first at x[at], into the phase-split padded rows of dst
// (wp apart; ev = dst[:pw], od = dst[pw:2pw] of each) through the vector
// loop: each row's 2·pw logical columns are read as one run of x from
// at − left (its neighbours' values where its pads are, cleared after).
// It returns the rows done, from the first: none without the vector loop,
// for pw < 8 or where the first row's run would start before x; the last
// rows are left out where their runs would end past it.
func deinterleave2Rows(dst, x []float32, at, w, wp, pw, left, rows int) int {
	if pw < 8 || at < left || rows < 1 {
		return 0
	}
	n := rows
	for n > 0 && at+(n-1)*w-left+2*pw > len(x) {
		n--
	}
	if n == 0 || !deinterleave2RowsVec(dst[:(n-1)*wp+2*pw], x[at-left:at+(n-1)*w-left+2*pw], n, wp, w, pw) {
		return 0
	}
	// Pair i is image columns 2i − left and 2i + 1 − left: the pairs
	// outside [0, w) read the neighbours, and are zero.
	e0, e1 := min(pw, (left+1)/2), min(pw, (w+left+1)/2)
	o0, o1 := min(pw, left/2), min(pw, (w+left)/2)
	for k := range n {
		ev, od := dst[k*wp:k*wp+pw], dst[k*wp+pw:k*wp+2*pw]
		clear(ev[:e0])
		clear(ev[max(e0, e1):])
		clear(od[:o0])
		clear(od[max(o0, o1):])
	}
	return n
}

// rowRead reports whether some window tap reads padded row r.
func (g *Conv2D) rowRead(r int) bool {
	if g.SH == 1 {
		return true
	}
	for a := 0; a < g.KH; a++ {
		d := r - a*g.DH
		if d >= 0 && d%g.SH == 0 && d/g.SH < g.OH {
			return true
		}
	}
	return false
}

// deinterleave2 splits a padded row of logical columns c = 0, 1, …
// (image column c − left, zero outside the image in) into its even
// columns (ev) and odd columns (od).
func deinterleave2(ev, od, in []float32, left int) {
	// Pair i is logical columns 2i and 2i+1, image columns
	// 2i − left and 2i + 1 − left: every value of ev and od is
	// written once, zero outside the image in.
	od = od[:len(ev)]
	// Pairs [lo, hi) lie inside the image: no checks there.
	lo := min((left+1)/2, len(ev))
	hi := max(lo, min((len(in)+left)/2, len(ev)))
	edge := func(i int) {
		c := 2*i - left
		var e, o float32
		if uint(c) < uint(len(in)) {
			e = in[c]
		}
		if uint(c+1) < uint(len(in)) {
			o = in[c+1]
		}
		ev[i], od[i] = e, o
	}
	for i := 0; i < lo; i++ {
		edge(i)
	}
	if hi > lo {
		e, o := ev[lo:hi], od[lo:hi]
		s := in[2*lo-left : 2*hi-left]
		s = s[:2*len(e)]
		o = o[:len(e)]
		if k := deinterleave2Blocks(e, o, s); k > 0 {
			e, o, s = e[k:], o[k:], s[2*k:]
		}
		for len(e) >= 4 {
			p := (*[8]float32)(s)
			e4, o4 := (*[4]float32)(e), (*[4]float32)(o)
			e4[0], o4[0], e4[1], o4[1] = p[0], p[1], p[2], p[3]
			e4[2], o4[2], e4[3], o4[3] = p[4], p[5], p[6], p[7]
			e, o, s = e[4:], o[4:], s[8:]
		}
		for j := range e {
			e[j], o[j] = s[2*j], s[2*j+1]
		}
	}
	for i := hi; i < len(ev); i++ {
		edge(i)
	}
}

// posSeg is a run of n window positions on one output row of one image:
// src is the offset in the padded batch of what its first position reads
// with tap (0, 0) of channel 0, dst its lane in a strip (or its index in
// the run of positions being packed).
type posSeg struct {
	src, dst, n int
}

// packScratch is one packer call's working memory: the runs of window
// positions, the tap offsets (on the heap with the rest: they reach the
// gemm gather routines, which an on-stack array would escape through) and
// packColumnsT's staging rows (NR rows of up to the GEMM's k block each).
type packScratch struct {
	segs  []posSeg
	offs  [256]int
	lines []float32
}

// packScratchPool holds the packers' per-call scratch.
var packScratchPool = sync.Pool{New: func() any { return new(packScratch) }}

// positions appends to segs the runs of the window positions [j0, j0+n)
// of the batch (position j is image j/L, row j%L/OW, column j%OW) over
// the padded batch xp. With nr > 0 the positions are packed nr to a strip
// (a run ends at a strip's end and dst is its lane); with nr = 0 they are
// consecutive (dst is the position's index from j0).
func (g *Conv2D) positions(segs []posSeg, xp padded, j0, n, nr int) []posSeg {
	L := g.OH * g.OW
	plane := xp.hp * xp.wp
	for at := 0; at < n; {
		j := j0 + at
		img, pos := j/L, j%L
		oh, ow := pos/g.OW, pos%g.OW
		k := min(g.OW-ow, n-at)
		dst := at
		if nr > 0 {
			dst = at % nr
			k = min(k, nr-dst)
		}
		segs = append(segs, posSeg{src: img*g.C*plane + oh*g.SH*xp.wp + ow*xp.colStep(g.SW), dst: dst, n: k})
		at += k
	}
	return segs
}

// tapOffsets appends the offsets in a padded plane stack of im2col rows
// [p0, p0+kc) (row (c, a, b) reads channel c, tap row a, tap column b).
func (g *Conv2D) tapOffsets(offs []int, xp padded, p0, kc int) []int {
	ks := g.KH * g.KW
	c, t := p0/ks, p0%ks
	a, b := t/g.KW, t%g.KW
	plane := xp.hp * xp.wp
	for q := 0; q < kc; q++ {
		ta, tb := a, b
		if g.flipTaps {
			ta, tb = g.KH-1-a, g.KW-1-b
		}
		offs = append(offs, c*plane+ta*g.DH*xp.wp+xp.col(tb*g.DW, g.SW))
		if b++; b == g.KW {
			b = 0
			if a++; a == g.KH {
				a = 0
				c++
			}
		}
	}
	return offs
}

// copy16 and copy8 copy 16 or 8 float32s as 16-byte moves. A plain
// array assignment between slices of this size compiles to a call to
// memmove (the compiler cannot rule out overlap); four or two 16-byte
// moves stay inline. d and s must not overlap.
func copy16(d, s []float32) {
	d, s = d[:16], s[:16]
	*(*[4]float32)(d) = *(*[4]float32)(s)
	*(*[4]float32)(d[4:]) = *(*[4]float32)(s[4:])
	*(*[4]float32)(d[8:]) = *(*[4]float32)(s[8:])
	*(*[4]float32)(d[12:]) = *(*[4]float32)(s[12:])
}

func copy8(d, s []float32) {
	d, s = d[:8], s[:8]
	*(*[4]float32)(d) = *(*[4]float32)(s)
	*(*[4]float32)(d[4:]) = *(*[4]float32)(s[4:])
}

// copyRun writes n values of x from src on, sw apart, into d[:n].
func copyRun(d, x []float32, src, n, sw int) {
	d = d[:n]
	if sw == 1 {
		s := x[src : src+n]
		// Runs up to 16 long are two fixed-size copies, the second
		// ending at the run's end and overlapping the first when n is
		// not a power of two (d and x are distinct buffers), instead of
		// a call to memmove.
		switch {
		case n == 16:
			copy16(d, s)
		case n > 16:
			copy(d, s)
		case n >= 8:
			copy8(d, s)
			copy8(d[n-8:], s[n-8:])
		case n >= 4:
			*(*[4]float32)(d) = *(*[4]float32)(s)
			*(*[4]float32)(d[n-4:]) = *(*[4]float32)(s[n-4:])
		case n >= 2:
			*(*[2]float32)(d) = *(*[2]float32)(s)
			*(*[2]float32)(d[n-2:]) = *(*[2]float32)(s[n-2:])
		case n == 1:
			d[0] = s[0]
		}
		return
	}
	s := x[src : src+(n-1)*sw+1]
	if n == 16 && sw == 2 {
		s2, d16 := (*[31]float32)(s), (*[16]float32)(d)
		for i := 0; i < 16; i++ {
			d16[i] = s2[2*i]
		}
		return
	}
	for i := range d {
		d[i] = s[i*sw]
	}
}

// columnPacker is the PackB of the forward product: B is im2col(x)
// with rows (c, a, b) and columns (image, oh, ow), packed NR columns at a
// time from the padded batch. The runs of window positions are worked
// out once per panel, then each strip is filled row after row (its
// writes stay in one strip: strips are a multiple of 4 KiB apart and
// would share L1 sets).
type columnPacker struct {
	g  Conv2D
	xp padded
}

func (pk *columnPacker) PackB(dst []float32, p0, kc, j0, nc int) {
	g, xp := &pk.g, pk.xp
	_, nr := gemm.KernelShape()
	sc := packScratchPool.Get().(*packScratch)
	defer packScratchPool.Put(sc)
	segs := g.positions(sc.segs[:0], xp, j0, nc, nr)
	sc.segs = segs
	if rem := nc % nr; rem != 0 {
		// Lanes past nc in the last strip.
		last := dst[(nc/nr)*nr*kc:]
		for q := 0; q < kc; q++ {
			clear(last[q*nr+rem : q*nr+nr])
		}
	}
	offs := g.tapOffsets(sc.offs[:0], xp, p0, kc)
	x, sw := xp.x, xp.colStep(g.SW)
	hiOff := 0
	for _, o := range offs {
		hiOff = max(hiOff, o)
	}
	for first, strip := 0, 0; first < len(segs); strip++ {
		end := first
		for at := strip * nr; end < len(segs) && at < (strip+1)*nr; end++ {
			at += segs[end].n
		}
		sd := dst[strip*nr*kc : (strip+1)*nr*kc]
		ss := segs[first:end]
		first = end
		if len(ss) == 1 && ss[0].n == 16 && nr == 16 && sw == 1 {
			gemm.GatherRows(sd, 16, x, ss[0].src, offs, 16)
			continue
		}
		if sw == 1 && nr == 16 && sameRuns(ss, 16) {
			// Whole output rows of 8, 4 or 2 positions (the late
			// layers' small images): fixed-size copies, inline.
			packRuns(sd, x, offs, ss)
			continue
		}
		if sw == 1 {
			// A run of 4 to 7 positions (output rows of 7: the
			// 7×7 layers) is copied 8 wide, and one of 9 to 15 (a
			// strip across two output rows of 28: the 28×28 and
			// stride-2 56×56 layers) 16 wide, with GatherRows when
			// the runs after it in the strip overwrite the extra
			// lanes (they are packed after it) and the extra values
			// lie in x: one vector move per tap instead of two, and
			// no Go loop over the taps.
			filled := ss[len(ss)-1].dst + ss[len(ss)-1].n
			for _, s := range ss {
				if w := overWidth(s.n); nr == 16 && w > 0 && s.dst+w <= filled && s.src+hiOff+w <= len(x) {
					gemm.GatherRows(sd[s.dst:], nr, x, s.src, offs, w)
					continue
				}
				packRun(sd, nr, x, offs, s)
			}
			continue
		}
		for q, off := range offs {
			d := sd[q*nr : q*nr+nr]
			for _, s := range ss {
				copyRun(d[s.dst:], x, s.src+off, s.n, sw)
			}
		}
	}
}

// overWidth is the width GatherRows copies a run of n positions at when
// the lanes past it may be overwritten (PackB): 8 for 4 to 7, 16 for 9 to
// 15, 0 (none: the run takes packRun) otherwise.
func overWidth(n int) int {
	switch {
	case n >= 4 && n < 8:
		return 8
	case n > 8 && n < 16:
		return 16
	}
	return 0
}

// packRun copies run s (column stride 1) into every row of a block whose
// rows are nr apart, row q from tap offset offs[q]: one run at a time
// over all rows,
// so that the length test is made once per run and the copies (two
// overlapping fixed-size moves) stay inline.
func packRun(sd []float32, nr int, x []float32, offs []int, s posSeg) {
	n := s.n
	for n > 16 {
		// Long runs (the filter gradient's lines of a wide output
		// row) go 16 positions at a time.
		gemm.GatherRows(sd[s.dst:], nr, x, s.src, offs, 16)
		s.dst, s.src, n = s.dst+16, s.src+16, n-16
	}
	s.n = n
	switch {
	case n == 16 || n == 8:
		gemm.GatherRows(sd[s.dst:], nr, x, s.src, offs, n)
	case n > 8 && n < 16:
		// Two overlapping runs of 8, each one vector move a tap.
		gemm.GatherRows(sd[s.dst:], nr, x, s.src, offs, 8)
		gemm.GatherRows(sd[s.dst+n-8:], nr, x, s.src+n-8, offs, 8)
	case n >= 4 && n < 8:
		for q, off := range offs {
			d := sd[q*nr+s.dst : q*nr+s.dst+n]
			src := x[s.src+off : s.src+off+n]
			*(*[4]float32)(d) = *(*[4]float32)(src)
			*(*[4]float32)(d[n-4:]) = *(*[4]float32)(src[n-4:])
		}
	case n >= 2 && n < 4:
		for q, off := range offs {
			d := sd[q*nr+s.dst : q*nr+s.dst+n]
			src := x[s.src+off : s.src+off+n]
			*(*[2]float32)(d) = *(*[2]float32)(src)
			*(*[2]float32)(d[n-2:]) = *(*[2]float32)(src[n-2:])
		}
	default:
		for q, off := range offs {
			copyRun(sd[q*nr+s.dst:], x, s.src+off, n, 1)
		}
	}
}

// sameRuns reports whether the runs are all 8, all 4 or all 2 positions
// long and fill nr lanes.
func sameRuns(ss []posSeg, nr int) bool {
	n := ss[0].n
	if (n != 8 && n != 4 && n != 2) || len(ss)*n != nr {
		return false
	}
	for _, s := range ss[1:] {
		if s.n != n {
			return false
		}
	}
	return true
}

// packRuns fills a 16-lane strip from runs of one length (8, 4 or 2) at
// column stride 1: row q of the strip is run s of tap offset offs[q] at
// lanes s·n onwards.
func packRuns(sd, x []float32, offs []int, ss []posSeg) {
	switch ss[0].n {
	case 8:
		gemm.GatherRows(sd, 16, x, ss[0].src, offs, 8)
		gemm.GatherRows(sd[8:], 16, x, ss[1].src, offs, 8)
	case 4:
		s0, s1, s2, s3 := ss[0].src, ss[1].src, ss[2].src, ss[3].src
		for q, off := range offs {
			d := (*[16]float32)(sd[q*16 : q*16+16])
			*(*[4]float32)(d[0:4]) = *(*[4]float32)(x[s0+off : s0+off+4])
			*(*[4]float32)(d[4:8]) = *(*[4]float32)(x[s1+off : s1+off+4])
			*(*[4]float32)(d[8:12]) = *(*[4]float32)(x[s2+off : s2+off+4])
			*(*[4]float32)(d[12:16]) = *(*[4]float32)(x[s3+off : s3+off+4])
		}
	default:
		var src [8]int
		for i, s := range ss {
			src[i] = s.src
		}
		for q, off := range offs {
			d := (*[16]float32)(sd[q*16 : q*16+16])
			for i := 0; i < 8; i++ {
				o := src[i] + off
				*(*[2]float32)(d[2*i : 2*i+2]) = *(*[2]float32)(x[o : o+2])
			}
		}
	}
}

// columnTPacker is the PackB of the filter gradient: B is im2col(x)ᵀ,
// rows the window positions (image, oh, ow) and columns (c, a, b). When
// every run of positions is a multiple of 8 long, each full strip is
// gathered and transposed straight from the padded batch; with runs of 8
// positions or fewer on average (the late layers' 7-, 4- and 2-wide
// output rows, strided 1×1 windows) each strip row gathers its 16 taps
// directly; with runs that are at least half whole eights (output rows
// of 28 or 14) the eights are gathered and transposed and the rest
// gathered position by position; otherwise each strip's NR im2col rows
// are gathered into a staging block that stays in L1, then transposed
// into the strip.
type columnTPacker struct {
	g  Conv2D
	xp padded
}

func (pk *columnTPacker) PackB(dst []float32, p0, kc, j0, nc int) {
	g, xp := &pk.g, pk.xp
	_, nr := gemm.KernelShape()
	sc := packScratchPool.Get().(*packScratch)
	defer packScratchPool.Put(sc)
	segs := g.positions(sc.segs[:0], xp, p0, kc, 0)
	sc.segs = segs
	if cap(sc.lines) < nr*kc {
		sc.lines = make([]float32, nr*kc)
	}
	lines := sc.lines[:nr*kc]
	x, sw := xp.x, xp.colStep(g.SW)
	// Runs of whole multiples of 8 positions (output rows of 8, 16,
	// 32…): each full strip is gathered and transposed in one pass.
	direct := sw == 1 && nr == 16
	for _, sg := range segs {
		if sg.n%8 != 0 {
			direct = false
			break
		}
	}
	// Short runs (the late layers' output rows of 7, 4 or 2
	// positions, or strided runs): staging them costs a call per run
	// and tap, so each strip row is gathered straight from the taps.
	// (At 7 positions this beat staging by about 3% on ResNet-50's
	// 14×14 3×3/2 filter gradient, one core.)
	short := !direct && len(segs) > 0 && kc <= 8*len(segs)
	// Runs not all multiples of 8 but at least half whole eights
	// (output rows of 28 or 14 positions): the eights are gathered and
	// transposed as in direct, the rest of each run position by
	// position, instead of staging every run and transposing the block
	// (one core, ResNet-50's 3×3/2 filter gradients: 56×56 17.6 → 14.5
	// cpu-ms, 28×28 about 3% less).
	mixed := false
	if !direct && !short && sw == 1 && nr == 16 {
		eights := 0
		for _, sg := range segs {
			eights += sg.n / 8 * 8
		}
		mixed = 4*eights >= 2*kc
	}
	for s := 0; s*nr < nc; s++ {
		cols := min(nr, nc-s*nr)
		offs := g.tapOffsets(sc.offs[:0], xp, j0+s*nr, cols)
		if direct && cols == 16 {
			strip := dst[s*nr*kc : (s+1)*nr*kc]
			for _, sg := range segs {
				gemm.GatherTransposed(strip[sg.dst*16:], x, sg.src, offs, sg.n)
			}
			continue
		}
		if cols == 16 && nr == 16 && short {
			gatherTaps16(dst[s*nr*kc:(s+1)*nr*kc], x, segs, offs, sw)
			continue
		}
		if mixed && cols == 16 {
			strip := dst[s*nr*kc : (s+1)*nr*kc]
			o := (*[16]int)(offs[:16])
			hi := maxOffset(o)
			for _, sg := range segs {
				n8 := sg.n / 8 * 8
				if n8 > 0 {
					gemm.GatherTransposed(strip[sg.dst*16:], x, sg.src, offs, n8)
				}
				if n8 < sg.n {
					gatherTapsRun16(strip, x, posSeg{src: sg.src + n8, dst: sg.dst + n8, n: sg.n - n8}, o, hi, 1)
				}
			}
			continue
		}
		if sw == 1 {
			for _, sg := range segs {
				packRun(lines, kc, x, offs, sg)
			}
			gemm.PackTransposedB(dst[s*nr*kc:(s+1)*nr*kc], lines, kc, cols, kc)
			continue
		}
		for j, off := range offs {
			line := lines[j*kc : (j+1)*kc]
			for _, sg := range segs {
				copyRun(line[sg.dst:], x, sg.src+off, sg.n, sw)
			}
		}
		gemm.PackTransposedB(dst[s*nr*kc:(s+1)*nr*kc], lines, kc, cols, kc)
	}
}

// gatherTaps16 fills a 16-wide B strip of the filter gradient row by row:
// strip row p (window position p of the runs segs) holds the values of the
// 16 taps at offsets offs, strip[p·16 + j] = x[src + offs[j]] where src is
// what the position reads with tap (0, 0) (positions of a run sw apart).
func gatherTaps16(strip, x []float32, segs []posSeg, offs []int, sw int) {
	o := (*[16]int)(offs[:16])
	hi := maxOffset(o)
	for _, sg := range segs {
		gatherTapsRun16(strip, x, sg, o, hi, sw)
	}
}

// maxOffset is the largest of 16 tap offsets.
func maxOffset(o *[16]int) int {
	hi := 0
	for _, v := range o {
		hi = max(hi, v)
	}
	return hi
}

// gatherTapsRun16 is gatherTaps16 for one run of positions; hi is the
// largest offset of o.
func gatherTapsRun16(strip, x []float32, sg posSeg, o *[16]int, hi, sw int) {
	for i := 0; i < sg.n; i++ {
		b := sg.src + i*sw
		xs := x[b : b+hi+1]
		d := (*[16]float32)(strip[(sg.dst+i)*16 : (sg.dst+i)*16+16])
		d[0], d[1], d[2], d[3] = xs[o[0]], xs[o[1]], xs[o[2]], xs[o[3]]
		d[4], d[5], d[6], d[7] = xs[o[4]], xs[o[5]], xs[o[6]], xs[o[7]]
		d[8], d[9], d[10], d[11] = xs[o[8]], xs[o[9]], xs[o[10]], xs[o[11]]
		d[12], d[13], d[14], d[15] = xs[o[12]], xs[o[13]], xs[o[14]], xs[o[15]]
	}
}

// outputRowPacker is the PackA of the filter gradient: A is the output
// gradient with rows the M channels and columns the window positions of
// the whole batch (image by image), packed from dy's per-image planes.
type outputRowPacker struct {
	g  Conv2D
	dy []float32
}

func (pk *outputRowPacker) PackA(dst []float32, i0, mc, p0, kc int) {
	g, dy := &pk.g, pk.dy
	mr, _ := gemm.KernelShape()
	L := g.OH * g.OW
	for s := 0; s*mr < mc; s++ {
		strip := dst[s*mr*kc : (s+1)*mr*kc]
		rows := min(mr, mc-s*mr)
		m := i0 + s*mr
		for at := 0; at < kc; {
			j := p0 + at
			img, pos := j/L, j%L
			n := min(L-pos, kc-at)
			gemm.PackRowsA(strip, at, dy[(img*g.M+m)*L+pos:], L, rows, n)
			at += n
		}
	}
}

// SourceA names the image runs PackA(i0, mc, p0, kc) reads, the first two
// (gemm.ASourcer).
func (pk *outputRowPacker) SourceA(i0, mc, p0, kc int) [2]gemm.Region {
	return planeRuns(pk.dy, pk.g.M, pk.g.OH*pk.g.OW, i0, mc, p0, kc)
}
