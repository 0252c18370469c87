package gemm

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
)

// PackedProduct is a float32 product C = A·B + beta·C whose operands need
// not exist as matrices: the caller may pack panels of A and of B straight
// from where their values live (an implicit GEMM), through an APacker
// and a BPacker. A convolution packs B from the NCHW image instead of first
// writing an im2col matrix that the GEMM would then read and pack again,
// and its filter gradient packs both operands from the images.
//
// The packed layouts are the micro-kernel's (see KernelShape): PackA
// (APacker's method) writes rows [i0, i0+mc) of A, shared indices [p0, p0+kc), as MR-high
// strips, each k-major (strip s holds rows i0+MR·s.., element (i, q) of
// the strip at dst[s·MR·kc + q·MR + i]); rows past mc are zero. PackB
// writes columns [j0, j0+nc) of B, shared indices [p0, p0+kc), as
// NR-wide strips (element (q, j) of strip s at dst[s·NR·kc + q·NR + j]);
// columns past nc are zero. Either may instead be a plain row-major
// matrix (APacker nil: A, LDA, TransA; BPacker nil: B, LDB, TransB).
//
// C is row-major with row stride LDC, except that with ColBlock > 0 its
// columns come in blocks of ColBlock, block b starting at C[b·ColStride]:
// element (i, j) is at C[(j/ColBlock)·ColStride + i·LDC + j%ColBlock].
// A convolution's output (N, M, L) is thereby written in place as the
// M × N·L product of the whole batch (ColBlock = LDC = L, ColStride = M·L).
//
// The packers are interfaces, so that a caller keeping its packer in a
// pooled or per-node struct passes it without allocating (a func that
// captured the call's operands would be allocated on every call, since
// the product's workers keep it).
//
// Run splits the columns, or the rows, of C over GOMAXPROCS goroutines,
// whichever repacks less; the packing callbacks must therefore be safe to
// call concurrently (each call writes only its dst).
type PackedProduct struct {
	M, N, K int

	APacker APacker
	A       []float32
	LDA     int
	TransA  bool

	BPacker BPacker
	B       []float32
	LDB     int
	TransB  bool

	C                   []float32
	LDC                 int
	ColBlock, ColStride int
	Beta                float32

	// NC, when positive, caps the columns of one packed B panel (rounded
	// to whole strips; the kernel's own limit still applies). A narrower
	// panel keeps an implicit PackB's output in L2 at the price of
	// packing A once per panel.
	NC int

	// kOff is added to the shared-dimension index passed to the
	// packers: a slice of the shared dimension (kSlice) calls the
	// caller's packers at its own offset without wrapping them.
	kOff int
}

// APacker packs panels of A in PackedProduct's A layout.
type APacker interface {
	PackA(dst []float32, i0, mc, p0, kc int)
}

// BPacker packs panels of B in PackedProduct's B layout.
type BPacker interface {
	PackB(dst []float32, p0, kc, j0, nc int)
}

// Region is a block of a row-major matrix that a packing step reads: Rows
// rows of Width values, LD apart, from Src[0]; the GEMM prefetches it
// while the block before that step computes. Zero rows name nothing.
type Region struct {
	Src             []float32
	LD, Rows, Width int
}

// ASourcer is an APacker that names what PackA(dst, i0, mc, p0, kc) reads,
// and BSourcer a BPacker that names what PackB(dst, p0, kc, j0, nc) reads
// (at most two regions: a packer whose source is scattered further names
// its first two). PackedProduct fetches the next block's source into L2
// while the block before it computes, as the plain GEMM does for its
// operands, so that packing does not wait for memory: a 1×1 convolution's
// filter gradient packs dY and X from memory, and its packing of dY took
// a fifth of the pass (BenchmarkResNet50OneByOne on the 2-core EPYC: the
// 56×56 filter gradients 0.73-0.75 → 0.81-0.83 of the one-core GEMM). A
// packer whose source is read in panels larger than L2 should not name it:
// the forward pass's B panels (384 KiB) fetched this way ran 5% slower on
// two cores.
type ASourcer interface {
	SourceA(i0, mc, p0, kc int) [2]Region
}

// BSourcer: see ASourcer.
type BSourcer interface {
	SourceB(p0, kc, j0, nc int) [2]Region
}

// BViewer is a BPacker that can show where a block of B already lies as
// a row-major matrix: ViewB(p0, kc, j0, n) returns b and ldb with element
// (q, j) of the block (shared index p0+q, column j0+j) at b[q*ldb + j],
// and ok false where the block is not laid out so (a 1×1 convolution's
// columns crossing from one image to the next). A product whose every B
// value feeds few rows of A (M at most viewBMaxRows) then reads B in
// place (microKernel.bIn) instead of packing it, on CPUs where that pays
// (viewBPays: AMD's).
type BViewer interface {
	ViewB(p0, kc, j0, n int) (b []float32, ldb int, ok bool)
}

// KernelShape returns the micro-kernel's tile, MR rows by NR columns: the
// strip heights of PackA's and the strip widths of PackB's layouts.
func KernelShape() (mr, nr int) { return kernel.mr, kernel.nr }

// Run computes the product.
func (pp *PackedProduct) Run() {
	if pp.M <= 0 || pp.N <= 0 {
		return
	}
	mk := kernel
	if pp.ColBlock > 0 && pp.ColBlock%mk.nr != 0 && pp.K > mk.kc {
		// Most tiles would cross column blocks, and each k block would
		// store them through the scratch tile: run into a plain
		// M×N matrix instead and lay it out in blocks once at the end.
		pp.viaPlain()
		return
	}
	workers := kern.Workers()
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
	if pp.BPacker != nil {
		costM *= 2
	}
	if pp.APacker != nil {
		costN *= 2
	}
	// Splitting the shared dimension costs a private M×N partial
	// product per extra worker, summed afterwards: the cheapest cut for
	// a filter gradient, whose small M×N result sums over every window
	// position of the batch.
	if kBlocks := pp.K / mk.kc; kBlocks >= workers {
		costK := (workers - 1) * pp.M * pp.N * 2
		if (nTiles < workers || costK < costN) && (mTiles < workers || costK < costM) {
			pp.splitK(mk, workers)
			return
		}
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
		pp.split(mk, true, parts)
	case mTiles >= workers:
		pp.split(mk, false, workers)
	default:
		pp.blocked(mk, 0, pp.M, 0, pp.N)
	}
}

// packedTask is a split PackedProduct in flight, pooled so that the
// split allocates nothing. In a column or row split (phase splitPieces)
// piece w computes columns (cols) or rows bounds[w]..bounds[w+1] of C. In
// a shared-dimension split, phase splitPartials has piece w compute the
// product over bounds[w]..bounds[w+1] of the shared dimension (into C for
// w = 0, into *held[w] otherwise), and phase splitSum has piece w add the
// partial products into rows rows[w]..rows[w+1] of C.
type packedTask struct {
	pp     PackedProduct
	mk     microKernel
	phase  int
	cols   bool
	parts  int
	bounds [maxSplit + 1]int
	rows   [maxSplit + 1]int
	held   [maxSplit]*[]float32
	shares tailShares
}

const (
	splitPieces = iota
	splitPartials
	splitSum
)

var packedTaskPool = keepPool{New: func() any { return new(packedTask) }}

func getPackedTask(pp *PackedProduct, mk microKernel, phase int) *packedTask {
	t := packedTaskPool.Get().(*packedTask)
	t.pp, t.mk, t.phase = *pp, mk, phase
	return t
}

func putPackedTask(t *packedTask) {
	t.pp = PackedProduct{} // drop the operands and callbacks
	packedTaskPool.Put(t)
}

// split computes C in up to parts pieces of whole tiles, over the columns
// (cols) or the rows.
func (pp *PackedProduct) split(mk microKernel, cols bool, parts int) {
	t := getPackedTask(pp, mk, splitPieces)
	t.cols = cols
	size, unit := pp.M, mk.mr
	if cols {
		size, unit = pp.N, mk.nr
	}
	n := splitRangeInto(t.bounds[:], size, unit, min(parts, maxSplit))
	t.parts = n
	t.shares.reset(n)
	parallelFor(n, t)
	putPackedTask(t)
}

// at runs piece w of the task's phase.
func (t *packedTask) at(w int) {
	pp := &t.pp
	switch t.phase {
	case splitPieces:
		if t.cols {
			pp.blockedShare(t.mk, 0, pp.M, t.bounds[w], t.bounds[w+1], &t.shares[w])
		} else {
			pp.blockedShare(t.mk, t.bounds[w], t.bounds[w+1], 0, pp.N, &t.shares[w])
		}
	case splitPartials:
		sub := pp.kSlice(t.bounds[w], t.bounds[w+1])
		if w > 0 {
			sub.C, sub.LDC, sub.ColBlock, sub.ColStride, sub.Beta = *t.held[w], pp.N, 0, 0, 0
		}
		sub.blockedShare(t.mk, 0, pp.M, 0, pp.N, &t.shares[w])
	case splitSum:
		for i := t.rows[w]; i < t.rows[w+1]; i++ {
			for j := 0; j < pp.N; {
				off, n := pp.cAt(i, j)
				n = min(n, pp.N-j)
				dst := pp.C[off : off+n]
				for _, h := range t.held[1:t.parts] {
					src := (*h)[i*pp.N+j : i*pp.N+j+n]
					for q, v := range src {
						dst[q] += v
					}
				}
				j += n
			}
		}
	}
}

// helpTails shares the tails of the pieces still running once a
// goroutine has claimed its last piece (forTask, tailShare).
func (t *packedTask) helpTails() {
	if t.phase != splitSum {
		t.shares.help(t.parts)
	}
}

// splitK cuts the shared dimension into one slice per worker, at
// multiples of the kernel's k block. Worker 0 applies Beta and stores
// into C; the others compute their slices into private plain M×N
// buffers, which are then added into C in worker order, so the result
// does not depend on scheduling.
func (pp *PackedProduct) splitK(mk microKernel, workers int) {
	workers = min(workers, maxSplit)
	t := getPackedTask(pp, mk, splitPartials)
	parts := splitRangeInto(t.bounds[:], pp.K, mk.kc, workers)
	t.parts = parts
	for w := 1; w < parts; w++ {
		t.held[w] = partialPool.Get().(*[]float32)
		*t.held[w] = grow(*t.held[w], pp.M*pp.N)
	}
	t.shares.reset(parts)
	parallelFor(parts, t)
	t.phase = splitSum
	rowParts := splitRangeInto(t.rows[:], pp.M, 1, workers)
	parallelFor(rowParts, t)
	for w := 1; w < parts; w++ {
		partialPool.Put(t.held[w])
		t.held[w] = nil
	}
	putPackedTask(t)
}

// kSlice returns the product over shared indices [k0, k1) (C, Beta and
// the layout of C unchanged).
func (pp *PackedProduct) kSlice(k0, k1 int) PackedProduct {
	sub := *pp
	sub.K = k1 - k0
	sub.kOff = pp.kOff + k0 // for the callbacks
	if pp.APacker != nil {
		// The packer is called at kOff.
	} else if pp.TransA {
		sub.A = pp.A[k0*pp.LDA:]
	} else {
		sub.A = pp.A[k0:]
	}
	if pp.BPacker != nil {
		// The packer is called at kOff.
	} else if pp.TransB {
		sub.B = pp.B[k0:]
	} else {
		sub.B = pp.B[k0*pp.LDB:]
	}
	return sub
}

// viaPlain runs the product into a pooled plain M×N matrix, which holds
// beta·C first when beta is not 0, then copies it into C's column blocks.
func (pp *PackedProduct) viaPlain() {
	held := partialPool.Get().(*[]float32)
	defer partialPool.Put(held)
	*held = grow(*held, pp.M*pp.N)
	tmp := *held
	plain := *pp
	plain.C, plain.LDC, plain.ColBlock, plain.ColStride = tmp, pp.N, 0, 0
	if pp.Beta != 0 {
		pp.blockRows(tmp, false)
	}
	plain.Run()
	pp.blockRows(tmp, true)
}

// blockRows copies between a plain M×N matrix and C's column blocks:
// into C when toC is set, out of C otherwise.
func (pp *PackedProduct) blockRows(plain []float32, toC bool) {
	bw := pp.ColBlock
	for b, j := 0, 0; j < pp.N; b, j = b+1, j+bw {
		n := min(bw, pp.N-j)
		for i := 0; i < pp.M; i++ {
			c := pp.C[b*pp.ColStride+i*pp.LDC:]
			c = c[:n]
			row := plain[i*pp.N+j : i*pp.N+j+n]
			if toC {
				copy(c, row)
			} else {
				copy(row, c)
			}
		}
	}
}

// blocked computes rows [i0, i1) and columns [j0, j1) of C.
func (pp *PackedProduct) blocked(mk microKernel, i0, i1, j0, j1 int) {
	pp.blockedShare(mk, i0, i1, j0, j1, nil)
}

// blockedShare is blocked for one piece of a split product: with sh not
// nil, its last k block of its last column block is shared with the
// goroutines that have run out of pieces (tailShare, as the plain GEMM's
// pieces share theirs).
func (pp *PackedProduct) blockedShare(mk microKernel, i0, i1, j0, j1 int, sh *tailShare) {
	sh.start()
	defer sh.finish()
	buf := bufferPool.Get().(*buffers)
	defer bufferPool.Put(buf)
	plain := problem{transA: pp.TransA, transB: pp.TransB, a: pp.A, lda: pp.LDA, b: pp.B, ldb: pp.LDB}
	kc := blockSize(pp.K, mk.kc, 1)
	mc := blockSize(i1-i0, mk.mc, mk.mr)
	nc := mk.nc
	if pp.NC > 0 {
		nc = min(nc, max(mk.nr, pp.NC/mk.nr*mk.nr))
	}
	stream := pp.streams(mk, kc)
	bv := pp.viewer(mk, stream)
	as, _ := pp.APacker.(ASourcer)
	bs, _ := pp.BPacker.(BSourcer)
	for jc := j0; jc < j1; jc += nc {
		ncur := min(nc, j1-jc)
		nstrips := (ncur + mk.nr - 1) / mk.nr
		for pc := 0; pc < pp.K; pc += kc {
			kcur := min(kc, pp.K-pc)
			beta := float32(1)
			if pc == 0 {
				beta = pp.Beta
			}
			// A split piece's last block is shared with the goroutines
			// that have run out of pieces (they read its packed panel).
			shared := sh != nil && pc+kc >= pp.K && jc+nc >= j1
			if bv != nil && !shared {
				// B in place where the packer shows it.
				for ic := i0; ic < i1; ic += mc {
					pp.rowBlock(mk, buf, &plain, ic, min(mc, i1-ic), jc, ncur, pc, kcur, beta, false, nil, nil, bv)
				}
				continue
			}
			buf.b = grow(buf.b, nstrips*mk.nr*kcur)
			if pp.BPacker != nil {
				pp.BPacker.PackB(buf.b, pc+pp.kOff, kcur, jc, ncur)
			} else {
				plain.packB(buf.b, pc, kcur, jc, ncur, mk.nr)
			}
			if shared {
				sh.openPacked(pp, &plain, stream, mk, buf.b, i0, i1, jc, ncur, pc, kcur, tailUnit(mk, mc), beta)
				sh.run(buf)
				continue
			}
			// While each A block computes, fetch the next A block's
			// source and a share of the next B panel's, as far as
			// prefetchBudget allows, where the packers name them.
			sourced := as != nil || bs != nil
			var nextB [2]Region
			if pc+kc < pp.K {
				nextB = pp.sourceB(bs, pc+kc, min(kc, pp.K-pc-kc), jc, ncur)
			} else if jc+nc < j1 {
				nextB = pp.sourceB(bs, 0, min(kc, pp.K), jc+nc, min(nc, j1-jc-nc))
			}
			blocks := (i1 - i0 + mc - 1) / mc
			for t, ic := 0, i0; ic < i1; t, ic = t+1, ic+mc {
				mcur := min(mc, i1-ic)
				if !sourced {
					pp.rowBlock(mk, buf, &plain, ic, mcur, jc, ncur, pc, kcur, beta, stream, buf.b, nil, nil)
					continue
				}
				var next [4]Region
				switch {
				case ic+mc < i1:
					next[0], next[1] = pp.sourceA(as, ic+mc, min(mc, i1-ic-mc), pc, kcur)
				case pc+kc < pp.K:
					next[0], next[1] = pp.sourceA(as, i0, min(mc, i1-i0), pc+kc, min(kc, pp.K-pc-kc))
				case jc+nc < j1:
					next[0], next[1] = pp.sourceA(as, i0, min(mc, i1-i0), 0, min(kc, pp.K))
				}
				next[2], next[3] = rowsShare(nextB, t, blocks)
				pf := newSpreadPrefetchN(next, ((mcur+mk.mr-1)/mk.mr)*((ncur+mk.nr-1)/mk.nr))
				pp.rowBlock(mk, buf, &plain, ic, mcur, jc, ncur, pc, kcur, beta, stream, buf.b, &pf, nil)
			}
		}
	}
	if stream {
		storeFence() // C is read by other goroutines once Run returns
	}
}

// rowBlock computes rows [ic, ic+mcur) and columns [jc, jc+ncur) of C
// for the k block [pc, pc+kcur) from B packed in bp, packing A into buf
// (through the APacker, or plain, or reading its full strips in place).
func (pp *PackedProduct) rowBlock(mk microKernel, buf *buffers, plain *problem, ic, mcur, jc, ncur, pc, kcur int, beta float32, stream bool, bp []float32, pf *spreadPrefetch, bv BViewer) {
	mstrips := (mcur + mk.mr - 1) / mk.mr
	buf.a = grow(buf.a, mstrips*mk.mr*kcur)
	var arows []float32
	switch {
	case pp.APacker != nil:
		pp.APacker.PackA(buf.a, ic, mcur, pc+pp.kOff, kcur)
	case bv == nil && !pp.TransA && mk.rowA != nil && ncur <= rowACols && (mk.pair == nil || ncur < 2*mk.nr):
		// Few B strips use this A block (a late layer's filter times
		// its small batch of windows): the kernel reads the full
		// strips in place and only a last, partial one is packed, as
		// in the plain GEMM.
		arows = pp.A[ic*pp.LDA+pc:]
		if full := mcur / mk.mr * mk.mr; full < mcur {
			plain.packA(buf.a[full*kcur:], ic+full, mcur-full, pc, kcur, mk.mr)
		}
	default:
		plain.packA(buf.a, ic, mcur, pc, kcur, mk.mr)
	}
	if bv != nil {
		pp.macroViewB(mk, bv, buf, ic, mcur, jc, ncur, pc, kcur, beta)
		return
	}
	pp.macro(mk, ic, mcur, jc, ncur, kcur, buf.a, arows, bp, beta, stream, buf.tile[:], pf)
}

// viewBMaxRows is the most rows of A (of C) for which a product reads B
// in place (BViewer): each B value then feeds at most this many rows, and
// packing it took a fifth of a 1×1 convolution's time at 64 (ResNet-50's
// 56×56 input gradient 64 ← 256 and forward pass 256 → 64:
// BenchmarkResNet50OneByOne on two cores of the EPYC, 0.78-0.80 → 0.86 of
// the 2048³ GEMM; in the training step, three alternations, the input
// gradient 0.77-0.80 → 0.81-0.84).
const viewBMaxRows = 128

// viewBAhead is how many rows on the pair kernel prefetches B while its
// first row strip reads a block from memory.
const viewBAhead = 16

// viewer returns the BPacker as a BViewer when the product reads B in
// place: the CPU gains from it (viewBPays), the kernel has bIn, the packer
// shows B, A has at most viewBMaxRows rows, and C is not streamed (the
// streaming kernels read packed B).
func (pp *PackedProduct) viewer(mk microKernel, stream bool) BViewer {
	if !viewBPays || mk.bIn == nil || stream || pp.M > viewBMaxRows {
		return nil
	}
	bv, _ := pp.BPacker.(BViewer)
	return bv
}

// macroViewB is macro for a block whose B the packer shows in place (bv):
// each step of the kernel's bInCols columns that lies in one view runs
// mk.bIn on it over every row strip, the first strip prefetching the
// block ahead; a step that does not (it crosses an image, or is the
// panel's narrower last one) is packed into buf.b and runs through macro.
// A comes packed in buf.a.
func (pp *PackedProduct) macroViewB(mk microKernel, bv BViewer, buf *buffers, ic, mc, jc, nc, pc, kc int, beta float32) {
	mr, ww := mk.mr, mk.bInCols
	ap, tile := buf.a, buf.tile[:]
	for jr := 0; jr < nc; jr += ww {
		w := min(ww, nc-jr)
		var b []float32
		var ldb int
		ok := false
		if w == ww {
			b, ldb, ok = bv.ViewB(pc+pp.kOff, kc, jc+jr, w)
		}
		if !ok {
			buf.b = grow(buf.b, (w+mk.nr-1)/mk.nr*mk.nr*kc)
			pp.BPacker.PackB(buf.b, pc+pp.kOff, kc, jc+jr, w)
			pp.macro(mk, ic, mc, jc+jr, w, kc, ap, nil, buf.b, beta, false, tile, nil)
			continue
		}
		_, run := pp.cAt(0, jc+jr)
		// The first row strip fetches the rows ahead of those it reads
		// (fetching the next step's columns of each row instead ran
		// slower in ResNet-50's step); the others read the block from
		// cache.
		pf := viewBAhead * ldb
		for ir := 0; ir < mc; ir += mr {
			off, _ := pp.cAt(ic+ir, jc+jr)
			as := ap[ir*kc : ir*kc+mr*kc]
			if mc-ir >= mr && run >= ww {
				mk.bIn(kc, as, b, ldb, pp.C[off:], pp.LDC, 1, beta, pf)
			} else {
				mk.bIn(kc, as, b, ldb, tile, ww, 1, 0, pf)
				pp.storeTile(tile, ww, ic+ir, jc+jr, min(mr, mc-ir), ww, beta)
			}
			pf = 0
		}
	}
}

// streams reports whether blocked stores C's full tiles with the
// kernel's non-temporal stores: C is written once (beta 0, one k block of
// kc) from a short shared dimension (at most streamMaxK), it is far larger than the caches (at least streamMinBytes), and
// its rows (and column blocks) keep 64-byte alignment, so that each
// tile's rows are whole cache lines; macro still checks each tile's
// address. Such a result (a 1×1 convolution's output over the batch with
// a shared dimension of 64) is otherwise written through the cache: each
// line read from memory for ownership, then written back, twice the
// traffic, which at k = 64 the kernel's arithmetic does not hide.
func (pp *PackedProduct) streams(mk microKernel, kc int) bool {
	if !streamC || mk.pairNT == nil && mk.fnNT == nil {
		return false
	}
	if pp.Beta != 0 || pp.K > kc || pp.K > streamMaxK || pp.LDC%16 != 0 || pp.ColBlock > 0 && pp.ColStride%16 != 0 {
		return false
	}
	return pp.M*pp.N >= streamMinBytes/4
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
// packed panels kc deep, storing C = A·B + beta·C. When arows is not nil
// the full MR-row strips of A are read in place from it (rows LDA apart)
// and only a last, partial strip comes from ap. A tile whose columns stay
// in one column block of C is stored in place; an edge tile, or one that
// crosses blocks, goes through the scratch tile (at least MR×NR; MR×2NR
// for the pair kernel to run). With a pair kernel (and A packed), two
// full B strips whose columns are contiguous in C run together.
func (pp *PackedProduct) macro(mk microKernel, ic, mc, jc, nc, kc int, ap, arows, bp []float32, beta float32, stream bool, tile []float32, pf *spreadPrefetch) {
	mr, nr := mk.mr, mk.nr
	for jr := 0; jr < nc; {
		nb := min(nr, nc-jr)
		_, run := pp.cAt(0, jc+jr)
		if mk.pair != nil && arows == nil && jr+nr < nc && 2*mr*nr <= len(tile) {
			// Two strips, the second possibly the panel's last,
			// partial one (its lanes past nc, whatever the packer
			// left there, go to scratch columns that are not
			// stored).
			bs := bp[jr*kc : jr*kc+2*nr*kc]
			nb2 := min(2*nr, nc-jr)
			whole := run >= 2*nr && nb2 == 2*nr
			for ir := 0; ir < mc; ir += mr {
				pf.step()
				pf.step()
				if whole && mc-ir >= mr {
					off, _ := pp.cAt(ic+ir, jc+jr)
					if stream && mk.pairNT != nil && aligned64(pp.C[off:]) {
						mk.pairNT(kc, ap[ir*kc:ir*kc+mr*kc], bs, pp.C[off:], pp.LDC, 1)
						continue
					}
					mk.pair(kc, ap[ir*kc:ir*kc+mr*kc], bs, pp.C[off:], pp.LDC, 1, beta)
					continue
				}
				// A last, partial row strip, a last, partial
				// column strip (the stem's filter gradient, 147
				// columns), or columns that cross from one column
				// block of C to the next (a 1×1 convolution's images
				// of 196 or 49 positions): both tiles into scratch,
				// then the valid rows and columns stored run by run,
				// so that the pair kernel still computes them.
				mk.pair(kc, ap[ir*kc:ir*kc+mr*kc], bs, tile, 2*nr, 1, 0)
				pp.storeTile(tile, 2*nr, ic+ir, jc+jr, min(mr, mc-ir), nb2, beta)
			}
			jr += 2 * nr
			continue
		}
		bs := bp[jr*kc : jr*kc+nr*kc]
		for ir := 0; ir < mc; ir += mr {
			pf.step()
			pp.tile(mk, ic, ir, mc, jc, jr, nb, kc, ap, arows, bs, run, beta, stream, tile)
		}
		jr += nr
	}
}

// tile computes the tile of macro's block at rows ir.. and columns jr..
// (nb of them valid, run contiguous in C from jr) from the B strip bs.
func (pp *PackedProduct) tile(mk microKernel, ic, ir, mc, jc, jr, nb, kc int, ap, arows, bs []float32, run int, beta float32, stream bool, tile []float32) {
	mr, nr := mk.mr, mk.nr
	lda := pp.LDA
	mb := min(mr, mc-ir)
	inPlace := arows != nil && mb == mr
	if mb == mr && nb == nr && run >= nr {
		off, _ := pp.cAt(ic+ir, jc+jr)
		switch {
		case inPlace:
			mk.rowA(kc, arows[ir*lda:], lda, bs, pp.C[off:], pp.LDC, 1, beta)
		case stream && mk.fnNT != nil && aligned64(pp.C[off:]):
			mk.fnNT(kc, ap[ir*kc:ir*kc+mr*kc], bs, pp.C[off:], pp.LDC, 1)
		default:
			mk.fn(kc, ap[ir*kc:ir*kc+mr*kc], bs, pp.C[off:], pp.LDC, 1, beta)
		}
		return
	}
	halfTile := mk.half != nil && 2*nb <= nr
	switch {
	case inPlace && halfTile:
		mk.halfRowA(kc, arows[ir*lda:], lda, bs, tile, nr, 1, 0)
	case inPlace:
		mk.rowA(kc, arows[ir*lda:], lda, bs, tile, nr, 1, 0)
	case halfTile:
		mk.half(kc, ap[ir*kc:ir*kc+mr*kc], bs, tile, nr, 1, 0)
	default:
		mk.fn(kc, ap[ir*kc:ir*kc+mr*kc], bs, tile, nr, 1, 0)
	}
	pp.storeTile(tile, nr, ic+ir, jc+jr, mb, nb, beta)
}

// storeTile stores rows×cols of a scratch tile (rows ld apart) into C at
// (i, j), column run by column run (a run stays in one column block of
// C), then row by row: the block arithmetic is done once per run instead
// of once per row and run.
func (pp *PackedProduct) storeTile(tile []float32, ld, i, j, rows, cols int, beta float32) {
	for at := 0; at < cols; {
		off, n := pp.cAt(i, j+at)
		n = min(n, cols-at)
		storeRun(pp.C[off:], pp.LDC, tile[at:], ld, rows, n, beta)
		at += n
	}
}

// storeRun stores rows n-element runs of a tile (rows nr apart in t) into
// C (rows ldc apart from c[0]): c = t, or c = beta·c + t when beta is not
// 0. Runs of 4 (a convolution's 2×2 outputs) and of 8 are fixed-size
// copies.
func storeRun(c []float32, ldc int, t []float32, nr, rows, n int, beta float32) {
	for i := 0; i < rows; i++ {
		row := c[i*ldc : i*ldc+n]
		src := t[i*nr : i*nr+n]
		switch {
		case beta == 0 && n == 4:
			*(*[4]float32)(row) = *(*[4]float32)(src)
		case beta == 0:
			copy(row, src)
		case beta == 1 && n == 4:
			r, s := (*[4]float32)(row), (*[4]float32)(src)
			r[0] += s[0]
			r[1] += s[1]
			r[2] += s[2]
			r[3] += s[3]
		case beta == 1:
			for q := range row {
				row[q] += src[q]
			}
		default:
			for q := range row {
				row[q] = beta*row[q] + src[q]
			}
		}
	}
}

// gatherRowsFn copies the runs of GatherRows; assembly replaces it.
var gatherRowsFn = gatherRowsGo

// gatherRowsGo copies run q of width values from src[offs[q]:] to
// dst[q·ldd:], and reports false (having stopped there) at the first run
// that lies outside src.
func gatherRowsGo(dst []float32, ldd int, src []float32, offs []int, width int) bool {
	for q, off := range offs {
		if off < 0 || off > len(src)-width {
			return false
		}
		copy(dst[q*ldd:q*ldd+width], src[off:off+width])
	}
	return true
}

// GatherRows copies len(offs) runs of width values, run q from
// src[base+offs[q]:] to dst[q·ldd:]: the rows of a packed strip that an
// implicit PackB reads from an image, one run per window tap. Runs of 16
// and 8 are single vector moves where assembly is available. It panics,
// as slicing would, when a run lies outside src or dst (runs before the
// bad one may have been copied).
func GatherRows(dst []float32, ldd int, src []float32, base int, offs []int, width int) {
	if len(offs) == 0 || width <= 0 {
		return
	}
	if base < 0 || base > len(src)-width || ldd < width || (len(offs)-1)*ldd+width > len(dst) {
		panic("gemm: GatherRows run out of range")
	}
	if !gatherRowsFn(dst, ldd, src[base:], offs, width) {
		panic("gemm: GatherRows run out of range")
	}
}

// gatherTransposedFn is GatherTransposed's copy; assembly replaces it.
var gatherTransposedFn = gatherTransposedGo

// gatherTransposedGo writes dst[p·16 + j] = src[offs[j] + p] for p < n,
// j < 16, and reports false, having written nothing, when a run of n
// from an offset leaves src.
func gatherTransposedGo(dst, src []float32, offs []int, n int) bool {
	for _, off := range offs {
		if off < 0 || off > len(src)-n {
			return false
		}
	}
	for j, off := range offs {
		run := src[off : off+n]
		for p, v := range run {
			dst[p*16+j] = v
		}
	}
	return true
}

// GatherTransposed writes n rows of a 16-wide B strip from 16 runs of n
// values, dst[p·16 + j] = src[base + offs[j] + p]: a filter gradient's
// strip, whose columns are 16 window taps and whose rows are n window
// positions along an output row, gathered and transposed in one pass.
// offs must hold 16 offsets and n must be a positive multiple of 8 (eight
// positions are transposed at a time in assembly). It panics when a run
// lies outside src or dst.
func GatherTransposed(dst, src []float32, base int, offs []int, n int) {
	if len(offs) != 16 || n <= 0 || n%8 != 0 || base < 0 || base > len(src)-n || len(dst) < 16*n {
		panic("gemm: GatherTransposed arguments out of range")
	}
	if !gatherTransposedFn(dst, src[base:], offs, n) {
		panic("gemm: GatherTransposed run out of range")
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
	if cols < nr {
		// A strip's unused lanes cleared row by row (one short clear
		// each, not nr−cols strided stores per row of src).
		for q := 0; q < kc; q++ {
			clear(dst[q*nr+cols : q*nr+nr])
		}
	}
	for j := 0; j < cols; j++ {
		row := src[j*ld : j*ld+kc]
		for q, v := range row {
			dst[q*nr+j] = v
		}
	}
}

// PackPanelB writes strips whole NR-wide B strips, kc deep, from a
// row-major matrix whose rows are ld apart: strip s holds columns
// [s·NR, (s+1)·NR) of rows [0, kc), element (q, j) at dst[s·NR·kc + q·NR
// + j] = src[q·ld + s·NR + j] (the layout PackB produces). An implicit
// PackB whose B columns are contiguous in memory for a stretch (a 1×1
// convolution's window positions within one image plane) packs that
// stretch with it, row by row, as the plain GEMM packs B.
func PackPanelB(dst []float32, src []float32, ld, kc, strips int) {
	if strips <= 0 || kc <= 0 {
		return
	}
	nr := kernel.nr
	if nr == 16 {
		packPanel16Fn(dst, src, ld, kc, strips)
		return
	}
	packPanelRows(dst, src, ld, kc, 0, strips, nr)
}

// sourceA is what the A block at rows [i0, i0+mc), shared indices [p0,
// p0+kc) is packed from, when the APacker names it (s, not nil) and a
// region stays within prefetchBudget; nothing otherwise. A plain A is not
// fetched: in the products that run here it is a convolution's filter,
// already in cache (fetching it anyway ran slower in ResNet-50's step).
func (pp *PackedProduct) sourceA(s ASourcer, i0, mc, p0, kc int) (Region, Region) {
	if s == nil {
		return Region{}, Region{}
	}
	r := s.SourceA(i0, mc, p0+pp.kOff, kc)
	return budgeted(r[0]), budgeted(r[1])
}

// sourceB is sourceA for the B panel at shared indices [p0, p0+kc),
// columns [j0, j0+nc).
func (pp *PackedProduct) sourceB(s BSourcer, p0, kc, j0, nc int) [2]Region {
	if s == nil {
		return [2]Region{}
	}
	r := s.SourceB(p0+pp.kOff, kc, j0, nc)
	return [2]Region{budgeted(r[0]), budgeted(r[1])}
}

// budgeted is r, or nothing when it is empty or exceeds prefetchBudget.
func budgeted(r Region) Region {
	if r.Rows <= 0 || r.Width <= 0 || r.Rows*r.Width*4 > prefetchBudget {
		return Region{}
	}
	return r
}

// rowsShare is share t of parts of the rows of the two regions rs taken
// end to end: what one of parts blocks prefetches of a panel that all of
// them precede.
func rowsShare(rs [2]Region, t, parts int) (Region, Region) {
	total := rs[0].Rows + rs[1].Rows
	lo, hi := total*t/parts, total*(t+1)/parts
	var out [2]Region
	for i, r := range rs {
		a, b := max(lo, 0), min(hi, r.Rows)
		if a < b {
			out[i] = Region{Src: r.Src[a*r.LD:], LD: r.LD, Rows: b - a, Width: r.Width}
		}
		lo, hi = lo-r.Rows, hi-r.Rows
	}
	return out[0], out[1]
}
