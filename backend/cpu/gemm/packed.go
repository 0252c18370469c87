package gemm

import (
	"runtime"
	"sync"
)

// PackedProduct is a float32 product C = A·B + beta·C whose operands need
// not exist as matrices: the caller may pack panels of A and of B straight
// from where their values live (an implicit GEMM), through PackA and
// PackB. A convolution packs B from the NCHW image instead of first
// writing an im2col matrix that the GEMM would then read and pack again,
// and its filter gradient packs both operands from the images.
//
// The packed layouts are the micro-kernel's (see KernelShape): PackA
// writes rows [i0, i0+mc) of A, shared indices [p0, p0+kc), as MR-high
// strips, each k-major (strip s holds rows i0+MR·s.., element (i, q) of
// the strip at dst[s·MR·kc + q·MR + i]); rows past mc are zero. PackB
// writes columns [j0, j0+nc) of B, shared indices [p0, p0+kc), as
// NR-wide strips (element (q, j) of strip s at dst[s·NR·kc + q·NR + j]);
// columns past nc are zero. Either may instead be a plain row-major
// matrix (PackA nil: A, LDA, TransA; PackB nil: B, LDB, TransB).
//
// C is row-major with row stride LDC, except that with ColBlock > 0 its
// columns come in blocks of ColBlock, block b starting at C[b·ColStride]:
// element (i, j) is at C[(j/ColBlock)·ColStride + i·LDC + j%ColBlock].
// A convolution's output (N, M, L) is thereby written in place as the
// M × N·L product of the whole batch (ColBlock = LDC = L, ColStride = M·L).
//
// Run splits the columns, or the rows, of C over GOMAXPROCS goroutines,
// whichever repacks less; the packing callbacks must therefore be safe to
// call concurrently (each call writes only its dst).
type PackedProduct struct {
	M, N, K int

	PackA  func(dst []float32, i0, mc, p0, kc int)
	A      []float32
	LDA    int
	TransA bool

	PackB  func(dst []float32, p0, kc, j0, nc int)
	B      []float32
	LDB    int
	TransB bool

	C                   []float32
	LDC                 int
	ColBlock, ColStride int
	Beta                float32

	// NC, when positive, caps the columns of one packed B panel (rounded
	// to whole strips; the kernel's own limit still applies). A narrower
	// panel keeps an implicit PackB's output in L2 at the price of
	// packing A once per panel.
	NC int
}

// KernelShape returns the micro-kernel's tile, MR rows by NR columns: the
// strip heights of PackA's and the strip widths of PackB's layouts.
func KernelShape() (mr, nr int) { return kernel.mr, kernel.nr }

// packedBuffers are one worker's panels for PackedProduct.
type packedBuffers struct {
	a, b []float32
	tile [16 * 16]float32
}

var packedPool = sync.Pool{New: func() any { return new(packedBuffers) }}

// Run computes the product.
func (pp *PackedProduct) Run() {
	if pp.M <= 0 || pp.N <= 0 {
		return
	}
	mk := kernel
	workers := runtime.GOMAXPROCS(0)
	if pp.M*pp.N*pp.K < parallelWork || workers < 2 {
		pp.blocked(mk, 0, pp.M, 0, pp.N)
		return
	}
	mTiles := (pp.M + mk.mr - 1) / mk.mr
	nTiles := (pp.N + mk.nr - 1) / mk.nr
	// Splitting the columns repacks A once per extra worker, splitting
	// the rows repacks B; an implicit B costs about twice a plain copy.
	costN := (workers - 1) * pp.M * pp.K
	costM := (workers - 1) * pp.K * pp.N
	if pp.PackB != nil {
		costM *= 2
	}
	if pp.PackA != nil {
		costN *= 2
	}
	switch {
	case nTiles >= workers && (costN <= costM || mTiles < workers):
		// Columns in a few more pieces than workers, handed out as
		// workers free up: a core taken by another process then delays
		// one piece, not half the product.
		// Only where repacking A for the extra pieces costs under a
		// twentieth of packing B.
		parts := workers
		if nTiles >= 4*workers && 20*pp.M <= pp.N {
			parts = 2 * workers
		}
		bounds := splitRange(pp.N, mk.nr, parts)
		parallelFor(len(bounds)-1, func(w int) { pp.blocked(mk, 0, pp.M, bounds[w], bounds[w+1]) })
	case mTiles >= workers:
		bounds := splitRange(pp.M, mk.mr, workers)
		parallelFor(len(bounds)-1, func(w int) { pp.blocked(mk, bounds[w], bounds[w+1], 0, pp.N) })
	default:
		pp.blocked(mk, 0, pp.M, 0, pp.N)
	}
}

// blocked computes rows [i0, i1) and columns [j0, j1) of C.
func (pp *PackedProduct) blocked(mk microKernel, i0, i1, j0, j1 int) {
	buf := packedPool.Get().(*packedBuffers)
	defer packedPool.Put(buf)
	plain := problem{transA: pp.TransA, transB: pp.TransB, a: pp.A, lda: pp.LDA, b: pp.B, ldb: pp.LDB}
	kc := blockSize(pp.K, mk.kc, 1)
	mc := blockSize(i1-i0, mk.mc, mk.mr)
	nc := mk.nc
	if pp.NC > 0 {
		nc = min(nc, max(mk.nr, pp.NC/mk.nr*mk.nr))
	}
	for jc := j0; jc < j1; jc += nc {
		ncur := min(nc, j1-jc)
		nstrips := (ncur + mk.nr - 1) / mk.nr
		for pc := 0; pc < pp.K; pc += kc {
			kcur := min(kc, pp.K-pc)
			beta := float32(1)
			if pc == 0 {
				beta = pp.Beta
			}
			buf.b = grow(buf.b, nstrips*mk.nr*kcur)
			if pp.PackB != nil {
				pp.PackB(buf.b, pc, kcur, jc, ncur)
			} else {
				plain.packB(buf.b, pc, kcur, jc, ncur, mk.nr)
			}
			for ic := i0; ic < i1; ic += mc {
				mcur := min(mc, i1-ic)
				mstrips := (mcur + mk.mr - 1) / mk.mr
				buf.a = grow(buf.a, mstrips*mk.mr*kcur)
				if pp.PackA != nil {
					pp.PackA(buf.a, ic, mcur, pc, kcur)
				} else {
					plain.packA(buf.a, ic, mcur, pc, kcur, mk.mr)
				}
				pp.macro(mk, ic, mcur, jc, ncur, kcur, buf.a, buf.b, beta, buf.tile[:mk.mr*mk.nr])
			}
		}
	}
}

// cAt returns the offset in C of element (i, j) and the number of columns
// from j on that continue it contiguously (to the end of j's column
// block; the rest of the row when C is plain).
func (pp *PackedProduct) cAt(i, j int) (off, run int) {
	if pp.ColBlock <= 0 {
		return i*pp.LDC + j, pp.N - j
	}
	b, r := j/pp.ColBlock, j%pp.ColBlock
	return b*pp.ColStride + i*pp.LDC + r, pp.ColBlock - r
}

// macro runs the micro-kernel over the mc×nc block of C at (ic, jc) from
// packed panels kc deep, storing C = A·B + beta·C. A tile whose columns
// stay in one column block of C is stored in place; an edge tile, or one
// that crosses blocks, goes through the scratch tile.
func (pp *PackedProduct) macro(mk microKernel, ic, mc, jc, nc, kc int, ap, bp []float32, beta float32, tile []float32) {
	mr, nr := mk.mr, mk.nr
	for jr := 0; jr < nc; jr += nr {
		nb := min(nr, nc-jr)
		bs := bp[jr*kc : jr*kc+nr*kc]
		_, run := pp.cAt(0, jc+jr)
		for ir := 0; ir < mc; ir += mr {
			mb := min(mr, mc-ir)
			as := ap[ir*kc : ir*kc+mr*kc]
			if mb == mr && nb == nr && run >= nr {
				off, _ := pp.cAt(ic+ir, jc+jr)
				mk.fn(kc, as, bs, pp.C[off:], pp.LDC, 1, beta)
				continue
			}
			mk.fn(kc, as, bs, tile, nr, 1, 0)
			for i := 0; i < mb; i++ {
				t := tile[i*nr : i*nr+nb]
				for j := 0; j < nb; {
					off, n := pp.cAt(ic+ir+i, jc+jr+j)
					n = min(n, nb-j)
					row := pp.C[off : off+n]
					src := t[j : j+n]
					if beta == 0 {
						copy(row, src)
					} else {
						for q := range row {
							row[q] = beta*row[q] + src[q]
						}
					}
					j += n
				}
			}
		}
	}
}

// PackRowsA writes rows (at most MR) rows of a row-major matrix, src[0:n]
// and the rows below it ld apart, into an A strip of the layout PackA
// produces, at shared indices [q0, q0+n): strip[(q0+q)·MR + i] =
// src[i·ld + q]. Rows from rows to MR are zeroed. An implicit PackA calls
// it once per run of contiguous values (a convolution's output gradient
// per image).
func PackRowsA(strip []float32, q0 int, src []float32, ld, rows, n int) {
	mr := kernel.mr
	if n <= 0 {
		return
	}
	if rows == mr && mr == 6 {
		packRows6Fn(strip[q0*6:], src, ld, n)
		return
	}
	dst := strip[q0*mr : (q0+n)*mr]
	for i := 0; i < mr; i++ {
		if i >= rows {
			for q := 0; q < n; q++ {
				dst[q*mr+i] = 0
			}
			continue
		}
		row := src[i*ld : i*ld+n]
		for q, v := range row {
			dst[q*mr+i] = v
		}
	}
}

// PackTransposedB writes cols (at most NR) rows of a row-major matrix,
// src[0:kc] and the rows below it ld apart, as the columns of a B strip of
// the layout PackB produces, kc deep: strip[q·NR + j] = src[j·ld + q].
// Columns from cols to NR are zeroed. An implicit PackB that gathers each
// column's values into a row first (a filter gradient's im2col rows) packs
// them with it.
func PackTransposedB(strip []float32, src []float32, ld, cols, kc int) {
	nr := kernel.nr
	if kc <= 0 {
		return
	}
	if cols == nr && nr == 16 {
		packCols16TFn(strip, src, ld, kc)
		return
	}
	dst := strip[:nr*kc]
	for j := 0; j < nr; j++ {
		if j >= cols {
			for q := 0; q < kc; q++ {
				dst[q*nr+j] = 0
			}
			continue
		}
		row := src[j*ld : j*ld+kc]
		for q, v := range row {
			dst[q*nr+j] = v
		}
	}
}
