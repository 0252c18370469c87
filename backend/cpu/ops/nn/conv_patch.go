package nn

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
)

// patchConv routes patchify convolutions (see Conv2D.patchify) through
// their patch matrix and the plain GEMM; tests turn it off to compare
// with the implicit GEMM.
var patchConv = true

// patchify reports whether g's windows tile the image without overlap or
// gaps inside their span: kernel equal to stride on both axes (above 1×1,
// which pointwise.go handles), no dilation, no begin padding, and every
// window inside the image (an end pad, if any, is never read). ViT's patch
// embedding (16×16 windows, stride 16) is one. Its im2col is then a pure
// rearrangement of X, each value read once: the patch matrix P, one row
// per window position (image, oh, ow) and one column per tap (c, a, b),
// is written in one memory-bound pass and the products run as plain
// GEMMs, instead of the implicit GEMM's gathers (which, at a stride of 16,
// first split every image row into 16 phases and then copy runs of OW
// positions, 14 for ViT-B/16, per tap and panel).
func (g *Conv2D) patchify() bool {
	return patchConv && !g.flipTaps && g.KH*g.KW > 1 &&
		g.SH == g.KH && g.SW == g.KW && g.DH == 1 && g.DW == 1 &&
		g.PadTop == 0 && g.PadLeft == 0 &&
		g.OH > 0 && g.OW > 0 && g.OH*g.KH <= g.H && g.OW*g.KW <= g.W &&
		g.N > 0 && g.C > 0 && g.M > 0
}

// PatchScratch reports whether g's forward pass and filter gradient take
// the patchify path, and how many float32 elements of scratch they then
// request: the patch matrix P (both passes) and, held beside it by the
// forward pass, the M × N·OH·OW product before its layout pass. Memory
// estimates use it. (The input gradient does not take this path.)
func (g *Conv2D) PatchScratch() (ok bool, patch, product int) {
	if !g.patchify() {
		return false, 0, 0
	}
	return true, g.patchElems(), g.productElems()
}

// patchElems is the size of the patch matrix P: N·OH·OW rows of C·KH·KW.
func (g *Conv2D) patchElems() int { return g.N * g.OH * g.OW * g.C * g.KH * g.KW }

// productElems is the size of forwardPatches' M × N·OH·OW product.
func (g *Conv2D) productElems() int { return g.M * g.N * g.OH * g.OW }

// patches writes g's patch matrix P of x (N·OH·OW rows of C·KH·KW) into
// a scratch buffer; give it back with release.
func (g *Conv2D) patches(x []float32) []float32 {
	p := scratch[float32](g.patchElems())
	g.writePatches(x, p)
	return p
}

// writePatches writes g's patch matrix P of x into p (g.patchElems()
// elements): the graph.Patchify op's result, and the patchify path's.
func (g *Conv2D) writePatches(x, p []float32) {
	ck := g.C * g.KH * g.KW
	rows := g.N * g.OH
	// One item per row of windows (image, oh): OW·C·KH·KW values.
	ParallelItemsOf(rows, nnWorkers(rows, g.OW*ck), false, patchTask{g: *g, x: x, p: p})
}

// patchTask is patches' work: item it (image it/OH, window row it%OH)
// copies the KW-long pieces of the C·KH image rows that the row of
// windows covers into its OW rows of P.
type patchTask struct {
	g    Conv2D
	x, p []float32
}

func (t *patchTask) Item(_, it int) {
	g, x := &t.g, t.x
	img, oh := it/g.OH, it%g.OH
	ck := g.C * g.KH * g.KW
	out := t.p[it*g.OW*ck : (it+1)*g.OW*ck]
	span := g.OW * g.KW
	for c := 0; c < g.C; c++ {
		for a := 0; a < g.KH; a++ {
			at := ((img*g.C+c)*g.H + oh*g.KH + a) * g.W
			src := x[at : at+span]
			col := (c*g.KH + a) * g.KW
			for ow := 0; ow < g.OW; ow++ {
				copyRun(out[ow*ck+col:], src, ow*g.KW, g.KW, 1)
			}
		}
	}
}

// forwardPatches is Forward for a patchify g: y = W·Pᵀ + bias (bias may
// be nil), or y += W·Pᵀ when accumulate is set, as one plain GEMM of the
// whole batch (M × N·OH·OW, shared dimension C·KH·KW) into a scratch
// matrix, whose finished blocks the GEMM's epilogue lays out into y's
// per-image planes (adding the bias) while they are in cache.
//
// Each output sums its C·KH·KW products in the implicit GEMM's order; the
// bias is added last (the implicit path starts from it), so results agree
// with that path to rounding, not bit for bit.
func (g *Conv2D) forwardPatches(x, w, bias, y []float32, accumulate bool) {
	L, ck := g.OH*g.OW, g.C*g.KH*g.KW
	cols := g.N * L
	p := g.patches(x)
	defer release(p)
	c := scratch[float32](g.productElems())
	defer release(c)
	ep := kern.TakeBox[planeEpilogue]()
	defer kern.PutBox(ep)
	*ep = planeEpilogue{y: y, bias: bias, m: g.M, l: L, accumulate: accumulate}
	gemm.SgemmEpilogue(false, true, g.M, cols, ck, 1, w, ck, p, ck, 0, c, cols, gemm.Epilogue{Block: ep})
	ep.y, ep.bias = nil, nil
}

// planeEpilogue lays out finished blocks of the M × N·L product of a
// batch (column j is image j/L, position j%L) into the (N, M, L) output
// y: y = product + bias[m], or y += product when accumulate is set (the
// bias, if any, added after the product).
type planeEpilogue struct {
	y, bias    []float32
	m, l       int
	accumulate bool
}

func (e *planeEpilogue) ApplyBlock(c []float32, ldc, i0, i1, j0, j1 int) {
	for j := j0; j < j1; {
		img, pos := j/e.l, j%e.l
		n := min(e.l-pos, j1-j)
		for i := i0; i < i1; i++ {
			src := c[i*ldc+j : i*ldc+j+n]
			dst := e.y[(img*e.m+i)*e.l+pos:]
			dst = dst[:n]
			switch {
			case e.accumulate && e.bias != nil:
				b := e.bias[i]
				for q, v := range src {
					dst[q] += v + b
				}
			case e.accumulate:
				for q, v := range src {
					dst[q] += v
				}
			case e.bias != nil:
				b := e.bias[i]
				for q, v := range src {
					dst[q] = v + b
				}
			default:
				copy(dst, src)
			}
		}
		j += n
	}
}

// filterGradPatches is FilterGrad for a patchify g: dw = dy·P (or dw +=
// dy·P), one product whose shared dimension is every window position of
// the batch, dy packed from its per-image planes and P a plain matrix.
func (g *Conv2D) filterGradPatches(dy, x, dw []float32, accumulate bool) {
	ck := g.C * g.KH * g.KW
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	p := g.patches(x)
	defer release(p)
	pk := kern.TakeBox[outputRowPacker]()
	defer kern.PutBox(pk)
	*pk = outputRowPacker{g: *g, dy: dy}
	pp := gemm.PackedProduct{M: g.M, N: ck, K: g.N * g.OH * g.OW,
		APacker: pk,
		B:       p, LDB: ck,
		C: dw, LDC: ck, Beta: beta}
	pp.Run()
	pk.dy = nil
}
