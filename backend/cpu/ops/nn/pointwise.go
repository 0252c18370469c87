package nn

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
)

// 1×1 convolutions (ResNet's bottleneck and downsample layers) are
// products over the channels: output position (oh, ow) reads input
// position (oh·SH, ow·SW) only. Their three products run as one GEMM
// each over the whole batch, whose columns (forward, input gradient) or
// shared dimension (filter gradient) run across image boundaries:
//
//	forward        Y[:, i·L+p] = W · X[:, i·L+p]       M × N·L × C
//	input gradient dX[:, i·L+p] = Wᵀ · dY[:, i·L+p]    C × N·L × M
//	filter grad.   dW = Σ_{i,p} dY[:, i·L+p] · X[:, i·L+p]ᵀ   M × C × N·L
//
// (L = OH·OW, X read at the window positions.) With unit strides the
// packers read X and dY where they lie, each image plane a contiguous run
// of L positions, and the output is written in place (a column block of
// L per image); nothing is copied. A strided 1×1 window first copies
// the positions it reads into a compact batch (a quarter of X at stride
// 2), and its input gradient scatters the product's columns back into a
// zeroed dX.

// oneByOneProducts routes 1×1 windows through the products here;
// benchmarks turn it off to time the general implicit GEMM on them.
var oneByOneProducts = true

// oneByOne reports whether g's window is 1×1 without padding, every
// window position reading inside the image: the convolution is a product
// over the channels at the positions (oh·SH, ow·SW).
func (g *Conv2D) oneByOne() bool {
	return oneByOneProducts && g.KH == 1 && g.KW == 1 && g.PadTop == 0 && g.PadLeft == 0 && !g.flipTaps &&
		g.OH > 0 && g.OW > 0 && g.SH > 0 && g.SW > 0 &&
		(g.OH-1)*g.SH < g.H && (g.OW-1)*g.SW < g.W
}

// unitOneByOne reports whether g is a 1×1 window that reads every input
// position once, in order (unit strides, output the size of the input).
func (g *Conv2D) unitOneByOne() bool {
	// (An output the input's size leaves no room for a stride above 1,
	// unless the axis is one position long.)
	return g.oneByOne() && g.OH == g.H && g.OW == g.W
}

// flat returns the unit-stride 1×1 convolution over images of one row of
// OH·OW positions that g's product is once the read positions are
// compact (the geometry outputRowPacker reads dY with).
func (g *Conv2D) flat() Conv2D {
	L := g.OH * g.OW
	return Conv2D{N: g.N, C: g.C, H: 1, W: L, M: g.M, KH: 1, KW: 1, SH: 1, SW: 1, DH: 1, DW: 1,
		OH: 1, OW: L, Winograd: g.Winograd}
}

// compactReads copies the positions a strided 1×1 window reads, X[:, :,
// oh·SH, ow·SW], into a scratch batch (N, C, OH·OW); give it back with
// release.
func (g *Conv2D) compactReads(x []float32) []float32 {
	L := g.OH * g.OW
	planes := g.N * g.C
	xs := scratch[float32](planes * L)
	per := max(1, padChunk/L)
	items := (planes + per - 1) / per
	ParallelItemsOf(items, nnWorkers(items, per*g.H*g.W/2), false,
		strideTask{g: *g, x: x, xs: xs, per: per, planes: planes})
	return xs
}

// strideTask moves planes [it·per, (it+1)·per) between a full batch x and
// its compact read positions xs: gather (scatter false) copies the read
// positions into xs; scatter writes xs's values at their positions of x and
// zero everywhere else.
type strideTask struct {
	g           Conv2D
	x, xs       []float32
	per, planes int
	scatter     bool
}

func (t *strideTask) Item(_, it int) {
	g := &t.g
	L, I := g.OH*g.OW, g.H*g.W
	for p := it * t.per; p < min((it+1)*t.per, t.planes); p++ {
		full := t.x[p*I : (p+1)*I]
		compact := t.xs[p*L : (p+1)*L]
		if g.SW == 2 {
			t.plane2(full, compact)
			continue
		}
		if t.scatter {
			clear(full)
		}
		for r := 0; r < g.OH; r++ {
			row := full[r*g.SH*g.W : r*g.SH*g.W+(g.OW-1)*g.SW+1]
			c := compact[r*g.OW : (r+1)*g.OW]
			if t.scatter {
				for j, v := range c {
					row[j*g.SW] = v
				}
				continue
			}
			for j := range c {
				c[j] = row[j*g.SW]
			}
		}
	}
}

// plane2 is Item's work on one plane for a column stride of 2: a gather
// takes the even columns of each read row, a scatter writes each read row
// whole (its values at the even columns, zero between and after them) and
// clears the rows between, so that every value of the plane is written
// once, in order.
func (t *strideTask) plane2(full, compact []float32) {
	g := &t.g
	for r := 0; r < g.OH; r++ {
		row := full[r*g.SH*g.W : (r*g.SH+1)*g.W]
		c := compact[r*g.OW : (r+1)*g.OW]
		if !t.scatter {
			row = row[:2*(g.OW-1)+1]
			j := evens2Blocks(c, row)
			for ; j < len(c); j++ {
				c[j] = row[2*j]
			}
			continue
		}
		j := spread2Blocks(row, c)
		tail := row[2*j:]
		clear(tail)
		if j < len(c) {
			tail = tail[:2*(len(c)-j-1)+1]
			for i, v := range c[j:] {
				tail[2*i] = v
			}
		}
		// The rows up to the next read row (after the last, to the
		// plane's end) are not read.
		next := min((r+1)*g.SH, g.H)
		if r == g.OH-1 {
			next = g.H
		}
		clear(full[(r*g.SH+1)*g.W : next*g.W])
	}
}

// forwardOneByOne is Forward for a 1×1 window (oneByOne): Y = W·X over
// the batch's read positions.
func (g *Conv2D) forwardOneByOne(x, w, y []float32, accumulate bool) {
	L := g.OH * g.OW
	if g.N == 0 || g.M == 0 {
		return
	}
	if g.C == 0 {
		if !accumulate {
			clear(y[:g.N*g.M*L])
		}
		return
	}
	xs := x
	if !g.unitOneByOne() {
		xs = g.compactReads(x)
		defer release(xs)
	}
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	pk := kern.TakeBox[planeColumns]()
	*pk = planeColumns{x: xs, c: g.C, l: L}
	pp := gemm.PackedProduct{M: g.M, N: g.N * L, K: g.C,
		A: w, LDA: g.C,
		BPacker: pk,
		C:       y, LDC: L, ColBlock: L, ColStride: g.M * L, Beta: beta, NC: pointwiseNC(g.C)}
	pp.Run()
	kern.PutBox(pk)
}

// filterGradOneByOne is FilterGrad for a 1×1 window (oneByOne): dW =
// dY·Xᵀ, the shared dimension running over every read position of every
// image.
func (g *Conv2D) filterGradOneByOne(dy, x, dw []float32, accumulate bool) {
	L := g.OH * g.OW
	if g.M == 0 || g.C == 0 {
		return
	}
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	if g.N == 0 {
		if !accumulate {
			clear(dw[:g.M*g.C])
		}
		return
	}
	xs := x
	if !g.unitOneByOne() {
		xs = g.compactReads(x)
		defer release(xs)
	}
	flat := g.flat()
	pk := kern.TakeBox[planeGradPackers]()
	*pk = planeGradPackers{a: outputRowPacker{g: flat, dy: dy}, b: planeRowsT{x: xs, c: g.C, l: L}}
	pp := gemm.PackedProduct{M: g.M, N: g.C, K: g.N * L,
		APacker: &pk.a,
		BPacker: &pk.b,
		C:       dw, LDC: g.C, Beta: beta, NC: implicitNC(g.M)}
	pp.Run()
	kern.PutBox(pk)
}

// inputGradOneByOne is InputGrad for a 1×1 window (oneByOne): dX's read
// positions are Wᵀ·dY, one product over the batch whose A is W read
// transposed in place and whose B is dY's planes; with strides the product
// goes to a compact scratch batch, scattered into dX (zero elsewhere).
func (g *Conv2D) inputGradOneByOne(dy, w, dx []float32) {
	L := g.OH * g.OW
	if g.M == 0 {
		clear(dx[:g.N*g.C*g.H*g.W])
		return
	}
	out := dx
	unit := g.unitOneByOne()
	if !unit {
		out = scratch[float32](g.N * g.C * L)
	}
	pk := kern.TakeBox[planeColumns]()
	*pk = planeColumns{x: dy, c: g.M, l: L}
	pp := gemm.PackedProduct{M: g.C, N: g.N * L, K: g.M,
		A: w, LDA: g.C, TransA: true,
		BPacker: pk,
		C:       out, LDC: L, ColBlock: L, ColStride: g.C * L, NC: pointwiseNC(g.M)}
	pp.Run()
	kern.PutBox(pk)
	if unit {
		return
	}
	planes := g.N * g.C
	per := max(1, padChunk/(g.H*g.W))
	items := (planes + per - 1) / per
	ParallelItemsOf(items, nnWorkers(items, per*g.H*g.W), false,
		strideTask{g: *g, x: dx, xs: out, per: per, planes: planes, scatter: true})
	release(out)
}

// pointwiseNC is the widest B panel of a 1×1 product whose shared
// dimension is k: about 384 KiB of packed B at the GEMM's k block (at most
// 256), so that the panel stays in L2 while every A block runs over it
// (a per-image product of ResNet-50's 28×28 layers had that for free).
// A is repacked once per panel, an m×k copy for every 2·m·NC·k of work.
func pointwiseNC(k int) int {
	return max(256, 96<<10/max(min(k, 256), 1))
}

// planeColumns is the PackB of a 1×1 product's forward pass and input
// gradient: B has rows the c channels and columns the positions of the
// whole batch, B[ch, i·l+p] = x[(i·c+ch)·l+p]. Whole strips within one
// image plane are packed row by row as the plain GEMM packs B; a strip
// that crosses an image boundary (planes of 49 or 196 positions) is
// filled run by run.
type planeColumns struct {
	x    []float32
	c, l int
}

func (pk *planeColumns) PackB(dst []float32, p0, kc, j0, nc int) {
	_, nr := gemm.KernelShape()
	x, c, l := pk.x, pk.c, pk.l
	if rem := nc % nr; rem != 0 {
		// Lanes past nc in the last strip.
		last := dst[(nc/nr)*nr*kc:]
		for q := 0; q < kc; q++ {
			clear(last[q*nr+rem : q*nr+nr])
		}
	}
	for at := 0; at < nc; {
		j := j0 + at
		img, pos := j/l, j%l
		s, lane := at/nr, at%nr
		base := (img*c+p0)*l + pos
		if lane == 0 {
			if strips := min(l-pos, nc-at) / nr; strips > 0 {
				gemm.PackPanelB(dst[s*nr*kc:], x[base:], l, kc, strips)
				at += strips * nr
				continue
			}
		}
		n := min(nr-lane, l-pos, nc-at)
		strip := dst[s*nr*kc : (s+1)*nr*kc]
		for q := 0; q < kc; q++ {
			copyRun(strip[q*nr+lane:], x, base+q*l, n, 1)
		}
		at += n
	}
}

// ViewB shows the block at channels [p0, p0+kc), batch columns [j0, j0+n)
// in place when its columns lie in one image plane: channel rows l apart
// (gemm.BViewer).
func (pk *planeColumns) ViewB(p0, kc, j0, n int) ([]float32, int, bool) {
	img, pos := j0/pk.l, j0%pk.l
	if pos+n > pk.l {
		return nil, 0, false
	}
	return pk.x[(img*pk.c+p0)*pk.l+pos:], pk.l, true
}

// planeRowsT is the PackB of a 1×1 product's filter gradient: B = Xᵀ,
// rows the positions of the whole batch and columns the c channels,
// B[i·l+p, ch] = x[(i·c+ch)·l+p]; each strip's NR channels are transposed
// run by run (a run ends at an image boundary).
type planeRowsT struct {
	x    []float32
	c, l int
}

func (pk *planeRowsT) PackB(dst []float32, p0, kc, j0, nc int) {
	_, nr := gemm.KernelShape()
	x, c, l := pk.x, pk.c, pk.l
	for s := 0; s*nr < nc; s++ {
		cols := min(nr, nc-s*nr)
		strip := dst[s*nr*kc : (s+1)*nr*kc]
		c0 := j0 + s*nr
		for at := 0; at < kc; {
			j := p0 + at
			img, pos := j/l, j%l
			n := min(l-pos, kc-at)
			gemm.PackTransposedB(strip[at*nr:], x[(img*c+c0)*l+pos:], l, cols, n)
			at += n
		}
	}
}

// SourceB names the image runs PackB(p0, kc, j0, nc) reads, the first two
// (gemm.BSourcer).
func (pk *planeRowsT) SourceB(p0, kc, j0, nc int) [2]gemm.Region {
	return planeRuns(pk.x, pk.c, pk.l, j0, nc, p0, kc)
}

// planeRuns is what a block of channels [ch0, ch0+n), positions [p0,
// p0+kc) of a batch reads, the batch being images of c channel planes of l
// positions: the block's first two runs within one image, each n channel
// rows l apart (a pack that crosses more images names only the first two).
func planeRuns(x []float32, c, l, ch0, n, p0, kc int) [2]gemm.Region {
	var rs [2]gemm.Region
	for at, i := 0, 0; at < kc && i < len(rs); i++ {
		img, pos := (p0+at)/l, (p0+at)%l
		w := min(l-pos, kc-at)
		rs[i] = gemm.Region{Src: x[(img*c+ch0)*l+pos:], LD: l, Rows: n, Width: w}
		at += w
	}
	return rs
}

// planeGradPackers are filterGradOneByOne's packers, boxed per call.
type planeGradPackers struct {
	a outputRowPacker
	b planeRowsT
}

// OneByOneScratch reports whether g's three passes take the 1×1 products
// of this file, and how many float32 elements of scratch each of them
// then requests (the compact batch of a strided window: X's read
// positions, or dX's before the scatter; none with unit strides). Memory
// estimates use it.
func (g *Conv2D) OneByOneScratch() (ok bool, elems int) {
	if !g.oneByOne() {
		return false, 0
	}
	if g.unitOneByOne() {
		return true, 0
	}
	return true, g.N * g.C * g.OH * g.OW
}
