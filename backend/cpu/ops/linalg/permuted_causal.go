package linalg

import (
	"sync/atomic"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Causal attention's products (graph.MarkCausalAttention) skip the half
// of each T×T matrix that the mask makes exactly zero or that no reader
// uses. The node's attributes lower (inputs whose matrices are zero
// strictly above the diagonal) and lowerY (only R's elements on or below
// the diagonal are read; fillY goes above) are hints: ignoring them gives
// the same result. The kernel follows them where each product runs whole
// on one goroutine (the serial batch of attention's heads): as one
// gemm.SgemmSerialTri call, which skips micro-tiles and shared indices,
// where the shared dimension fits the GEMM's k block, else as a few GEMMs
// over blocks of rows or columns. Either sums each element's shared
// indices in the order the whole product would (so results are bit for
// bit the full product's while the shared dimension fits one k block).

// causalBlockSize is the height (or width) of the blocks a triangular
// product is cut into (at most; a side below two blocks is cut in two):
// smaller blocks skip more of the zero half, but each block is a GEMM
// call of its own, which packs its operands again and costs its setup.
// At the GPT's T = 128 (two blocks of 64: 3/4 of the work) the cut
// products ran at 0.84-0.97 of the whole ones' time, blocks of 24-48 no
// better (BenchmarkAttentionCausalGPT, 5 December 2026, a loaded
// machine): the calls' overhead eats most of what is skipped. (A
// variable: benchmarks compare sizes.)
var causalBlockSize = 64

// blockSize is the block size for a square of side t.
func blockSize(t int) int {
	if t < 2*causalBlockSize {
		return max(t/2, 1)
	}
	return causalBlockSize
}

// followCausalHints switches the hints off (tests compare).
var followCausalHints = true

// causalTiles runs a cut product as one gemm.SgemmSerialTri call where it
// applies (skipping micro-tiles and shared indices), and as GEMMs over
// blocks where it does not or this is off (tests and benchmarks compare).
var causalTiles = true

// causalCuts counts the PermutedMatMul calls that followed a hint (tests
// check that the cut path ran, or did not).
var causalCuts atomic.Int64

// causalMinSize is the smallest T whose triangular products are cut.
const causalMinSize = 64

// causalKind reads the node's hints for a product of grad kind grad
// whose views are views (before the swap for a column-major C) and
// returns the structure to follow in the computed product's coordinates
// (tc: C is computed transposed), and the value for the skipped part of
// C. It returns gemm.TriNone when there is no usable hint.
func causalKind(n *graph.Node, grad int64, views []strided, tc bool) (gemm.Tri, float32) {
	lower := n.AttrInts(graph.CausalLowerAttr, nil)
	kind := gemm.TriNone
	if n.AttrInt(graph.CausalLowerYAttr, 0) == 1 {
		kind = gemm.TriCLower
	}
	for _, i := range lower {
		if kind != gemm.TriNone {
			break
		}
		if i < 0 || int(i) >= len(views) {
			continue
		}
		if a, f := viewAttrs(int(i)); n.Attr(a) != nil || n.Attr(f) != nil {
			continue // the hint is about the tensor, not a view of it
		}
		switch {
		case grad == 0 && i == 0, grad == 1 && i == 0:
			kind = gemm.TriALower
		case grad == 0 && i == 1, grad == 2 && i == 0:
			kind = gemm.TriBLower
		case grad == 1 && i == 2: // op(B) = B's view transposed
			kind = gemm.TriBUpper
		case grad == 2 && i == 1: // op(A) = A's view transposed
			kind = gemm.TriAUpper
		}
	}
	if tc {
		kind = kind.Transposed()
	}
	return kind, n.AttrFloat(graph.CausalFillYAttr, 0)
}

// causalBlock is one GEMM of a cut product: rows [i0, i0+m) and columns
// [j0, j0+n) of C, summing shared indices [l0, l0+k); then rows
// [fi0, fi1) of columns [fj0, fj1) get the fill. last marks the
// product's last block.
type causalBlock struct {
	i0, j0, l0, m, n, k, fi0, fi1, fj0, fj1 int
	last                                    bool
}

// causalBlocks calls f with the blocks of a product of kind over the
// plan's m, n and k, in order. A structure of A cuts C into blocks of
// rows (each packs the part of B it reads: B is packed up to twice over
// in all); the others into blocks of columns (B packed once in all, A
// read in place).
func (p *permutedState) causalBlocks(kind gemm.Tri, f func(causalBlock)) {
	switch kind {
	case gemm.TriALower, gemm.TriAUpper:
		bs := blockSize(p.m)
		for i0 := 0; i0 < p.m; {
			i1 := blockEnd(i0, p.m, bs)
			b := causalBlock{i0: i0, m: i1 - i0, n: p.n, k: i1, last: i1 == p.m}
			if kind == gemm.TriAUpper {
				b.l0, b.k = i0, p.k-i0
			}
			f(b)
			i0 = i1
		}
	case gemm.TriBLower, gemm.TriBUpper, gemm.TriCLower, gemm.TriCUpper:
		bs := blockSize(p.n)
		for j0 := 0; j0 < p.n; {
			j1 := blockEnd(j0, p.n, bs)
			b := causalBlock{j0: j0, m: p.m, n: j1 - j0, k: p.k, last: j1 == p.n}
			switch kind {
			case gemm.TriBLower:
				b.l0, b.k = j0, p.k-j0
			case gemm.TriBUpper:
				b.k = j1
			case gemm.TriCLower: // rows i ≥ j0 only
				b.i0, b.m = j0, p.m-j0
				b.fi0, b.fi1, b.fj0, b.fj1 = 0, j0, j0, j1
			case gemm.TriCUpper: // rows i < j1 only
				b.m = j1
				b.fi0, b.fi1, b.fj0, b.fj1 = j1, p.m, j0, j1
			}
			f(b)
			j0 = j1
		}
	}
}

// blockEnd is where the block that starts at i0 of a side t cut into
// blocks of bs ends: a last piece shorter than bs/2 joins the block
// before it, so that no block is a sliver.
func blockEnd(i0, t, bs int) int {
	if t-i0 < bs+bs/2 {
		return t
	}
	return i0 + bs
}

// causalUsable reports whether the plan's products can be cut as kind
// says: the structured matrix square, at least causalMinSize on a side,
// and every block a packed-kernel GEMM (as the whole product is).
func (p *permutedState) causalUsable(kind gemm.Tri) bool {
	var t int
	switch kind {
	case gemm.TriALower, gemm.TriAUpper:
		t = p.m
		if p.m != p.k {
			return false
		}
	case gemm.TriBLower, gemm.TriBUpper:
		t = p.n
		if p.k != p.n {
			return false
		}
	case gemm.TriCLower, gemm.TriCUpper:
		t = p.m
		if p.m != p.n {
			return false
		}
	default:
		return false
	}
	if t < causalMinSize || blockSize(t) < 2 || gemm.DirectLoops(p.m, p.n, p.k) {
		return false
	}
	ok := true
	p.causalBlocks(kind, func(b causalBlock) { ok = ok && !gemm.DirectLoops(b.m, b.n, b.k) })
	return ok
}

// causalProduct computes one product of the batch (A, B and C at offsets
// oa, ob and oc) as the blocks that skip the zero or unread half; the
// last block prefetches next (the next product's operands), if not nil.
func (p *permutedState) causalProduct(oa, ob, oc int, next *gemm.Operands) {
	p.causalProductOf(p.a, p.b, p.c, oa, ob, oc, next)
}

// causalProductOf is causalProduct with A, B and C in a, b and c (the
// attention kernels put a head's buffer in place of one of them).
func (p *permutedState) causalProductOf(a, b, c []float32, oa, ob, oc int, next *gemm.Operands) {
	fill := &p.fill
	if p.unfilled {
		fill = nil
	}
	if causalTiles && gemm.SgemmSerialTri(p.tri, p.ta, p.tb, p.m, p.n, p.k, p.alpha, a[oa:], p.lda, b[ob:], p.ldb, c[oc:], p.ldc, fill, next) {
		return
	}
	p.causalBlocks(p.tri, func(bl causalBlock) {
		var nx *gemm.Operands
		if bl.last {
			nx = next
		}
		ao, bo, co := oa+bl.i0*p.lda+bl.l0, ob+bl.l0*p.ldb+bl.j0, oc+bl.i0*p.ldc+bl.j0
		if p.ta {
			ao = oa + bl.l0*p.lda + bl.i0
		}
		if p.tb {
			bo = ob + bl.j0*p.ldb + bl.l0
		}
		gemm.SgemmSerialNext(p.ta, p.tb, bl.m, bl.n, bl.k, p.alpha, a[ao:], p.lda, b[bo:], p.ldb, 0, c[co:], p.ldc, nx)
		if p.unfilled {
			return
		}
		for i := bl.fi0; i < bl.fi1; i++ {
			row := c[oc+i*p.ldc+bl.fj0 : oc+i*p.ldc+bl.fj1]
			if p.fill == 0 {
				clear(row)
				continue
			}
			for j := range row {
				row[j] = p.fill
			}
		}
	})
}
