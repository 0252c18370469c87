package gemm

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
)

// smallWork is the m*n*k below which packing does not pay for itself
// (measured with the AVX2 kernel: packing wins from about 12×12×12 up).
const smallWork = 16 * 16 * 8

// DirectLoops reports whether Sgemm (and its serial and epilogue forms)
// computes an m×n×k product (k ≥ 1) with its direct loops instead of the
// packed kernel, whose sums run in another order: a caller that cuts a
// product into blocks and wants the whole product's bits keeps every
// block on the packed kernel. Where the kernel is assembly (it has the
// thin path's half kernels), a single row takes it too once it is
// thinMinCols wide (the thin path when B is stored transposed, blocked
// otherwise): the direct loops are scalar and on one core, 5-6 GFLOP/s on
// a 1×3072×768 product against 8.6-14 on the kernels (BenchmarkOneRow),
// and the class token's per-head rows of ViT-B/16 (1×197×64, 1×64×197)
// ran 1.3-2.3× slower on them. The portable Go kernel is 2-3× slower than
// the direct loops on one row, so without assembly one row stays on them.
func DirectLoops(m, n, k int) bool {
	return m*n*k <= smallWork || n < 2 || m < 2 && (n < thinMinCols || !hasThinKernels(kernel))
}

// hasThinKernels reports whether mk has the thin path's kernels (the
// assembly kernels do; the portable one does not).
func hasThinKernels(mk microKernel) bool { return mk.halfRowA != nil && mk.half != nil }

// parallelWork is the m*n*k from which a product is split across goroutines.
const parallelWork = 128 * 128 * 64

// buffers are one worker's packing areas and its scratch tile for the
// edges of C (mr*nr <= 256), pooled so that a call allocates nothing.
type buffers struct {
	a, b []float32
	tile [16 * 16]float32
}

var bufferPool = keepPool{New: func() any { return new(buffers) }}

// partialPool holds the m×n partial products of a shared-dimension split.
var partialPool = keepPool{New: func() any { return new([]float32) }}

// keepPool is a free list like sync.Pool, except that what it holds
// survives garbage collections: a training step that runs the same GEMMs
// every time then allocates no packing buffers even when the collector
// ran in between (a sync.Pool is emptied by every second collection). It
// keeps at most keepMax items; more are left to the collector.
type keepPool struct {
	mu   sync.Mutex
	free []any
	New  func() any
}

// keepMax bounds a keepPool: enough for every worker of a few concurrent
// products.
const keepMax = 16

// Get returns a pooled item, or a new one.
func (p *keepPool) Get() any {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		v := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return v
	}
	p.mu.Unlock()
	return p.New()
}

// Put returns an item to the pool.
func (p *keepPool) Put(v any) {
	p.mu.Lock()
	if len(p.free) < keepMax {
		p.free = append(p.free, v)
	}
	p.mu.Unlock()
}

// grow returns s resized to n elements, reallocating when it is too small.
// New storage starts on a 64-byte boundary so that the packed strips the
// micro-kernel streams do not straddle cache lines more than they must.
func grow(s []float32, n int) []float32 {
	if cap(s) >= n {
		return s[:n]
	}
	const align = 64 / 4
	raw := make([]float32, n+align)
	off := int(uintptr(unsafe.Pointer(&raw[0]))%64) / 4
	if off != 0 {
		off = align - off
	}
	return raw[off : off+n : off+n]
}

// run computes the whole product with packing, in parallel when it is big.
//
// With w workers there are three ways to cut the work, each with its own
// overhead: splitting the rows of C makes every worker pack all of op(B)
// (k·n elements again per extra worker), splitting the columns makes every
// worker pack all of op(A) (m·k), and splitting the shared dimension costs
// a private m×n partial product per extra worker that is summed into C
// afterwards (about two passes over m·n). run picks the cheapest cut that
// still gives every worker a share, so skinny products such as
// 4096×128×128 (rows) or 256×256×4096 (shared dimension) keep both cores
// streaming their own panels.
func (p *problem) run() {
	mk := kernel
	workers := kern.Workers()
	p.runCut(mk, workers, chooseCut(mk, p.m, p.n, p.k, workers, true))
}

// runCut computes the whole product on workers goroutines, cut as c says.
func (p *problem) runCut(mk microKernel, workers int, c cut) {
	switch c {
	case cutK:
		p.splitK(mk, workers)
	case cutRows:
		p.splitBlocks(mk, false, workers)
	case cutCols:
		p.splitBlocks(mk, true, workers)
	default:
		p.blocked(mk, 0, p.m, 0, p.n)
	}
}

// A product's cut across workers (run).
type cut int

const (
	cutNone cut = iota // one goroutine: small, or too few tiles to split
	cutK
	cutRows
	cutCols
)

// chooseCut is run's choice for an m×n×k product on workers goroutines;
// without splitK it does not cut the shared dimension.
func chooseCut(mk microKernel, m, n, k, workers int, splitK bool) cut {
	if m*n*k < parallelWork || workers < 2 {
		return cutNone
	}
	mTiles := (m + mk.mr - 1) / mk.mr
	nTiles := (n + mk.nr - 1) / mk.nr
	kBlocks := k / mk.kc // whole blocks: a k share below kc wastes the kernel's depth
	const never = int(^uint(0) >> 1)
	costM, costN, costK := never, never, never
	if mTiles >= workers {
		costM = (workers - 1) * k * n
	}
	if nTiles >= workers {
		costN = (workers - 1) * m * k
	}
	if kBlocks >= workers && splitK {
		costK = (workers - 1) * m * n * 2
	}
	switch {
	case costK < costM && costK < costN:
		return cutK
	case costM <= costN && costM != never:
		return cutRows
	case costN != never:
		return cutCols
	}
	return cutNone // fewer tiles than workers in both directions
}

// RowsExact reports whether Sgemm computes an m×n×k product as packed
// blocks (whole, or split by rows or columns: not the direct loops, not
// split along the shared dimension), whose every element is the same sum
// in the same order whichever rows a block holds: then SgemmRows gives its
// rows Sgemm's bits.
func RowsExact(m, n, k int) bool {
	if m <= 0 || n <= 0 || k <= 0 || DirectLoops(m, n, k) {
		return false
	}
	return chooseCut(kernel, m, n, k, kern.Workers(), true) != cutK
}

// SgemmRows computes rows [i0, i1) of the m×n product C = alpha·op(A)·op(B)
// + beta·C into c, which holds those rows only (row stride ldc): with
// RowsExact(m, n, k) each element has the bits Sgemm of the whole product
// gives it. The rows run as packed blocks whatever their number, split by
// rows or columns across the workers as run would, never along k. A
// weight's gradient made a block of rows at a time (the optimizer's
// product updates) uses it.
func SgemmRows(transA, transB bool, m, n, k, i0, i1 int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if i0 < 0 || i1 > m || i0 >= i1 || n <= 0 {
		return
	}
	if transA {
		a = a[i0:]
	} else {
		a = a[i0*lda:]
	}
	if k <= 0 {
		scaleC(i1-i0, n, beta, c, ldc)
		return
	}
	p := &problem{transA: transA, transB: transB, m: i1 - i0, n: n, k: k, alpha: alpha, beta: beta,
		a: a, lda: lda, b: b, ldb: ldb, c: c, ldc: ldc}
	mk := kernel
	workers := kern.Workers()
	p.runCut(mk, workers, chooseCut(mk, p.m, n, k, workers, false))
}

// maxSplit bounds the pieces of a row or column split (workers beyond it
// share pieces).
const maxSplit = 64

// blockTask is a row or column split of one product in flight: piece w
// computes rows (or columns) [bounds[w], bounds[w+1]) of C. Tasks are
// pooled and run on kern's persistent workers (kern.RunTask), so a split
// product starts no goroutine and allocates nothing.
type blockTask struct {
	p      problem
	mk     microKernel
	cols   bool
	pieces int
	bounds [maxSplit + 1]int
	shares tailShares
}

var blockTaskPool = keepPool{New: func() any { return new(blockTask) }}

// Chunk runs pieces [lo, hi), then helps the others finish.
func (t *blockTask) Chunk(lo, hi int) {
	for w := lo; w < hi; w++ {
		if t.cols {
			t.p.blockedShare(t.mk, 0, t.p.m, t.bounds[w], t.bounds[w+1], &t.shares[w])
		} else {
			t.p.blockedShare(t.mk, t.bounds[w], t.bounds[w+1], 0, t.p.n, &t.shares[w])
		}
	}
	t.shares.help(t.pieces)
}

// splitBlocks computes C in workers pieces of whole tiles, over the
// columns (cols) or the rows, one piece per worker.
func (p *problem) splitBlocks(mk microKernel, cols bool, workers int) {
	t := blockTaskPool.Get().(*blockTask)
	t.p, t.mk, t.cols = *p, mk, cols
	size, unit := p.m, mk.mr
	if cols {
		size, unit = p.n, mk.nr
	}
	t.pieces = splitRangeInto(t.bounds[:], size, unit, min(workers, maxSplit))
	t.shares.reset(t.pieces)
	kern.RunTask("gemm", t.pieces, t.pieces, t)
	t.p = problem{} // drop the operands
	blockTaskPool.Put(t)
}

// splitK cuts the shared dimension into one slice per worker (at multiples
// of the kernel's kc, so each slice runs whole blocks). Worker 0 applies
// beta and accumulates into C; the others compute their partial products
// into private buffers, which are then added to C, split by rows. The
// work runs from a pooled kSplitTask, so the split allocates nothing.
func (p *problem) splitK(mk microKernel, workers int) {
	t := kSplitTaskPool.Get().(*kSplitTask)
	t.p, t.mk = *p, mk
	parts := splitRangeInto(t.bounds[:], p.k, mk.kc, min(workers, maxSplit))
	for w := 1; w < parts; w++ {
		t.held[w] = partialPool.Get().(*[]float32)
		*t.held[w] = grow(*t.held[w], p.m*p.n)
	}
	t.parts = parts
	t.sum = false
	t.shares.reset(parts)
	parallelFor(parts, t)
	t.rowParts = splitRangeInto(t.rows[:], p.m, 1, parts)
	t.sum = true
	parallelFor(t.rowParts, t)
	for w := 1; w < parts; w++ {
		partialPool.Put(t.held[w])
		t.held[w] = nil
	}
	t.p = problem{} // drop the operands
	kSplitTaskPool.Put(t)
}

// kSplitTask is one shared-dimension split in flight: first (sum false)
// piece w computes the product over bounds[w]..bounds[w+1] of the shared
// dimension, into C for w = 0 and into *held[w] otherwise; then (sum true)
// piece w adds the partial products into rows rows[w]..rows[w+1] of C and
// applies the epilogue.
type kSplitTask struct {
	p        problem
	mk       microKernel
	parts    int
	rowParts int
	sum      bool
	bounds   [maxSplit + 1]int
	rows     [maxSplit + 1]int
	held     [maxSplit]*[]float32
	shares   tailShares
}

var kSplitTaskPool = keepPool{New: func() any { return new(kSplitTask) }}

// at runs piece w of the current phase.
func (t *kSplitTask) at(w int) {
	p := &t.p
	if !t.sum {
		sub := p.kSlice(t.bounds[w], t.bounds[w+1])
		sub.ep = Epilogue{} // applied once the partial products are summed
		if w > 0 {
			sub.c, sub.ldc, sub.beta, sub.cRow = *t.held[w], p.n, 0, nil
		}
		sub.blockedShare(t.mk, 0, p.m, 0, p.n, &t.shares[w])
		return
	}
	for i := t.rows[w]; i < t.rows[w+1]; i++ {
		dst := p.c[i*p.ldc : i*p.ldc+p.n]
		for _, h := range t.held[1:t.parts] {
			src := (*h)[i*p.n : i*p.n+p.n]
			for j, v := range src {
				dst[j] += v
			}
		}
	}
	p.ep.apply(p.c, p.ldc, t.rows[w], t.rows[w+1], 0, p.n)
}

// helpTails shares the tails of the partial products still running once
// a goroutine has claimed its last slice (forTask, tailShare).
func (t *kSplitTask) helpTails() {
	if !t.sum {
		t.shares.help(t.parts)
	}
}

// kSlice returns the sub-problem over shared-dimension indices [k0, k1).
func (p *problem) kSlice(k0, k1 int) problem {
	sub := *p
	sub.k = k1 - k0
	if p.transA {
		sub.a = p.a[k0*p.lda:]
	} else {
		sub.a = p.a[k0:]
	}
	if p.transB {
		sub.b = p.b[k0:]
	} else {
		sub.b = p.b[k0*p.ldb:]
	}
	return sub
}

// splitRangeInto cuts [0, size) into at most parts pieces whose boundaries
// are multiples of unit, writing the boundaries into bounds (which must hold
// min(parts, pieces)+1 of them); it returns the piece count.
func splitRangeInto(bounds []int, size, unit, parts int) int {
	units := (size + unit - 1) / unit
	if parts > units {
		parts = units
	}
	for w := 0; w <= parts; w++ {
		bounds[w] = min(size, (units*w/parts)*unit)
	}
	return parts
}

// indexed is work over indices 0..count-1 for parallelFor; a pooled task
// struct implements it, so a fan-out allocates no closure.
type indexed interface {
	at(i int)
}

// parallelFor runs fn.at(0..count-1) on up to GOMAXPROCS workers of kern's
// persistent pool (kern.RunTask), the calling goroutine being one of
// them. Indices are handed out one at a time as workers free up, so a
// core taken by another process delays one index, not a fixed half.
func parallelFor(count int, fn indexed) {
	workers := min(kern.Workers(), count, maxSplit)
	if workers <= 1 {
		for i := 0; i < count; i++ {
			fn.at(i)
		}
		return
	}
	t := forTaskPool.Get().(*forTask)
	t.next.Store(0)
	t.count, t.fn = int64(count), fn
	kern.RunTask("gemm", workers, workers, t)
	t.fn = nil
	forTaskPool.Put(t)
}

// forTask is one parallelFor call in flight; every chunk claims indices
// from next until none are left.
type forTask struct {
	next  atomic.Int64
	count int64
	fn    indexed
}

var forTaskPool = keepPool{New: func() any { return new(forTask) }}

// Chunk claims and runs indices until every one has been claimed.
func (t *forTask) Chunk(lo, hi int) {
	for {
		i := t.next.Add(1) - 1
		if i >= t.count {
			break
		}
		t.fn.at(int(i))
	}
	if h, ok := t.fn.(tailHelper); ok {
		h.helpTails()
	}
}

// tailHelper is an indexed task whose pieces share their tails
// (tailShare): a goroutine with no piece left to claim helps the others
// finish theirs.
type tailHelper interface{ helpTails() }

// blockSize splits size into the fewest blocks of at most max elements and
// returns the block length that makes them even, rounded up to a multiple
// of unit (so 300 with max 256 runs as 152+148 rather than 256+44).
func blockSize(size, max, unit int) int {
	if size <= max {
		return max
	}
	blocks := (size + max - 1) / max
	per := (size + blocks - 1) / blocks
	return min(max, (per+unit-1)/unit*unit)
}

// blocked computes rows [i0, i1) and columns [j0, j1) of C with packed
// panels and the micro-kernel mk, applying beta on the first k block.
func (p *problem) blocked(mk microKernel, i0, i1, j0, j1 int) {
	p.blockedShare(mk, i0, i1, j0, j1, nil)
}

// blockedShare is blocked for one piece of a split product. With sh not
// nil, the piece's last k block of its last column block is shared
// (tailShare): its rows are claimed in small units, by this goroutine and
// by the goroutines of the other pieces that have finished their own
// (tailShares.help), so that the pieces end together even when one core
// runs slower than the other.
func (p *problem) blockedShare(mk microKernel, i0, i1, j0, j1 int, sh *tailShare) {
	sh.start()
	defer sh.finish()
	buf := bufferPool.Get().(*buffers)
	defer bufferPool.Put(buf)
	if p.thinOK(mk, i0, i1, j0, j1) {
		p.thin(mk, buf, i0, i1, j0, j1)
		return
	}
	kc := blockSize(p.k, mk.kc, 1)
	mc := aBlockRows(mk, i1-i0, min(kc, p.k))
	for jc := j0; jc < j1; jc += mk.nc {
		ncur := min(mk.nc, j1-jc)
		nstrips := (ncur + mk.nr - 1) / mk.nr
		for pc := 0; pc < p.k; pc += kc {
			kcur := min(kc, p.k-pc)
			beta := float32(1)
			if pc == 0 {
				beta = p.beta
			}
			buf.b = grow(buf.b, nstrips*mk.nr*kcur)
			p.packB(buf.b, pc, kcur, jc, ncur, mk.nr)
			if sh != nil && pc+kc >= p.k && jc+mk.nc >= j1 {
				sh.open(p, mk, buf.b, i0, i1, jc, ncur, pc, kcur, tailUnit(mk, mc), beta)
				sh.run(buf)
				continue
			}
			for ic := i0; ic < i1; ic += mc {
				mcur := min(mc, i1-ic)
				// While this block computes, fetch what the next
				// packing steps read: the next A block, or after the
				// last one the next k slice of B and the first A block
				// of that slice, as far as the budget allows.
				var next [2]Region
				switch {
				case ic+mc < i1:
					next[0] = p.aRegion(ic+mc, min(mc, i1-ic-mc), pc, kcur)
				case pc+kc >= p.k && jc+mk.nc >= j1:
					// The product's last block: fetch the next
					// product's operands, if the caller named them.
					next = p.after
				case pc+kc < p.k:
					knext := min(kc, p.k-pc-kc)
					budget, used := prefetchBudget/4, 0
					for _, r := range [2]Region{p.bRegion(pc+kc, knext, jc, ncur), p.aRegion(i0, min(mc, i1-i0), pc+kc, knext)} {
						if r.Rows*r.Width <= budget {
							budget -= r.Rows * r.Width
							next[used] = r
							used++
						}
					}
				}
				p.rowBlock(mk, buf, buf.b, ic, mcur, jc, ncur, pc, kcur, beta, next)
			}
		}
	}
}

// rowBlock computes rows [ic, ic+mcur) and columns [jc, jc+ncur) of C
// for the k block [pc, pc+kcur) from B packed in bp, packing A into buf
// (or reading its full strips in place), and applies the epilogue when
// the k block is the last; next is prefetched while it computes.
func (p *problem) rowBlock(mk microKernel, buf *buffers, bp []float32, ic, mcur, jc, ncur, pc, kcur int, beta float32, next [2]Region) {
	mstrips := (mcur + mk.mr - 1) / mk.mr
	if pc == 0 && p.cRow != nil && beta != 0 {
		fillRows(p.c, p.ldc, ic, ic+mcur, jc, jc+ncur, p.cRow)
	}
	buf.a = grow(buf.a, mstrips*mk.mr*kcur)
	// A's full strips read in place: by the pair kernel when every
	// column step is a pair, and at most two of them, A row-major (rs =
	// lda, ks = 1) or, where pairATransposed says so, transposed (rs = 1,
	// ks = lda); by the single-strip kernel when few B strips use a
	// row-major A block. Only the last, partial strip is packed.
	pairA := mk.pair != nil && mk.pairA != nil && ncur <= pairAMaxCols && ncur%(2*mk.nr) == 0 &&
		(!p.transA || pairATransposed)
	var arows []float32
	rs, ks := p.lda, 1
	if pairA && p.transA {
		rs, ks = 1, p.lda
		arows = p.a[pc*p.lda+ic:]
	} else if pairA || !p.transA && mk.rowA != nil && ncur <= rowACols && (mk.pair == nil || ncur < 2*mk.nr) {
		arows = p.a[ic*p.lda+pc:]
	}
	if arows != nil {
		if full := mcur / mk.mr * mk.mr; full < mcur {
			p.packA(buf.a[full*kcur:], ic+full, mcur-full, pc, kcur, mk.mr)
		}
	} else {
		p.packA(buf.a, ic, mcur, pc, kcur, mk.mr)
	}
	if pairA {
		macroKernelA(mk, mcur, ncur, kcur, buf.a, arows, rs, ks, bp, p.c[ic*p.ldc+jc:], p.ldc, p.alpha, beta, buf.tile[:], next)
	} else {
		macroKernel(mk, mcur, ncur, kcur, buf.a, arows, p.lda, bp, p.c[ic*p.ldc+jc:], p.ldc, p.alpha, beta, buf.tile[:], next)
	}
	if p.ep.active() && pc+kcur >= p.k {
		p.ep.apply(p.c, p.ldc, ic, ic+mcur, jc, jc+ncur) // the block is final
	}
}

// aBlockRows is the height of blocked's A blocks for rows rows of C and
// a k block kc deep: the kernel's mc, evened out (blockSize), except that
// rows whose packed A fits in oneBlockABytes make one block (attention's
// 197-row heads ran 3-5% faster packed whole than as 102 + 95 rows).
func aBlockRows(mk microKernel, rows, kc int) int {
	if rows > mk.mc && rows*kc*4 <= oneBlockABytes {
		return (rows + mk.mr - 1) / mk.mr * mk.mr
	}
	return blockSize(rows, mk.mc, mk.mr)
}

// pairAMaxCols is the widest column block whose A block (row-major or
// transposed) the pair kernel reads in place (pairA) instead of packing: with one or two
// strip pairs A is read at most twice, the second time from cache, and
// the copy that packing makes of it first (attention's P and dS, 155 KiB
// a head, from memory) cost more than the kernel's reads of six rows in
// place, which the hardware prefetchers follow while the FMAs run
// (BenchmarkAttentionWallViT at -cpu 1: P·V 0.77 → 0.85-0.87 of the 2048³
// GEMM, dS·K 0.75 → 0.83-0.86; the transposed Pᵀ·dO and dSᵀ·Q in the
// ViT-B/16 step, two alternations of bench --op-profile on 6 December
// 2026: 0.86-0.87 → 0.92-0.94 and 0.76-0.83 → 0.83-0.90).
const pairAMaxCols = 64

// oneBlockABytes is the largest packed A block that blocked keeps whole
// when its rows exceed the kernel's mc: an eighth of this host's 2 MiB
// L2, so that the B strips and C tiles stay in cache beside it. One
// block of a 197-row head (155 KiB at k = 197, 50 KiB at k = 64) is
// packed in one sequential pass and swept once per B strip pair, where
// two blocks of 102 and 95 rows paid the packing's start and the sweeps'
// loop twice (BenchmarkAttentionWallViT at -cpu 1: P·V, dV, dQ, dK 0.73
// → 0.76 of the 2048³ GEMM, QKᵀ 0.70 → 0.72, dO·Vᵀ unchanged).
var oneBlockABytes = 256 << 10 // a variable: tests turn it off to compare

// rowACols is the widest column block for which blocked reads a row-major
// A in place (the kernel's rowA) instead of packing it: packing A costs
// about as much per element as a few B strips' worth of products, so it
// only pays when the block is reused by many strips (the 65×65×32
// attention scores ran 15% faster unpacked on the 2-core EPYC). With a
// pair kernel, packing wins as soon as two strips can pair up (on the
// AVX-512 EPYC, 4096×128×128 ran at 367 GFLOP/s packed and paired
// against 205 in place), so rowA is then kept for single-strip blocks.
const rowACols = 128

// prefetchBudget caps the bytes prefetched during one block, so that the
// next packing sources (which end up in L2) do not flood it with lines
// that the current panels need: a 1 MiB B panel is left to the hardware.
const prefetchBudget = 512 << 10

// aRegion is the part of the stored A that packA reads for rows
// [i0, i0+mc) and shared indices [p0, p0+kc) of op(A).
func (p *problem) aRegion(i0, mc, p0, kc int) Region {
	if p.transA {
		return Region{Src: p.a[p0*p.lda+i0:], LD: p.lda, Rows: kc, Width: mc}
	}
	return Region{Src: p.a[i0*p.lda+p0:], LD: p.lda, Rows: mc, Width: kc}
}

// bRegion is the part of the stored B that packB reads for shared indices
// [p0, p0+kc) and columns [j0, j0+nc) of op(B).
func (p *problem) bRegion(p0, kc, j0, nc int) Region {
	if p.transB {
		return Region{Src: p.b[j0*p.ldb+p0:], LD: p.ldb, Rows: nc, Width: kc}
	}
	return Region{Src: p.b[p0*p.ldb+j0:], LD: p.ldb, Rows: kc, Width: nc}
}

// prefetchRowsFn prefetches rows of a Region; a no-op without assembly.
var prefetchRowsFn = func(src []float32, ld, rows, width int) {}

// PrefetchRows asks for the cache lines of the first width elements of
// rows rows of src, ld elements apart, to be brought towards L2
// (PREFETCHT1), and returns at once; a no-op without the assembly. For a
// kernel that knows which lines its next piece of work reads or
// overwrites, so that their transfers overlap the current piece's
// arithmetic. src must hold the rows (the call panics otherwise, as an
// index would).
func PrefetchRows(src []float32, ld, rows, width int) {
	if rows <= 0 || width <= 0 {
		return
	}
	_ = src[(rows-1)*ld+width-1]
	prefetchRowsFn(src, ld, rows, width)
}

// spreadPrefetch prefetches the rows of the next regions (up to four), taken end
// to end, spread evenly over a block's tiles: the macro-kernels call step
// once before each tile.
type spreadPrefetch struct {
	next                [4]Region
	rows, perTile, done int
}

func newSpreadPrefetch(next [2]Region, tiles int) spreadPrefetch {
	return newSpreadPrefetchN([4]Region{next[0], next[1]}, tiles)
}

// newSpreadPrefetchN is newSpreadPrefetch for up to four regions.
func newSpreadPrefetchN(next [4]Region, tiles int) spreadPrefetch {
	rows := next[0].Rows + next[1].Rows + next[2].Rows + next[3].Rows
	return spreadPrefetch{next: next, rows: rows, perTile: (rows + tiles - 1) / max(tiles, 1)}
}

// step prefetches the next tile's share of the rows (nothing on a nil p).
func (p *spreadPrefetch) step() {
	if p == nil || p.done >= p.rows {
		return
	}
	rows := min(p.perTile, p.rows-p.done)
	for r, left := p.done, rows; left > 0; {
		gi, gr := 0, r
		for gr >= p.next[gi].Rows {
			gr -= p.next[gi].Rows
			gi++
		}
		g := p.next[gi]
		n := min(left, g.Rows-gr)
		prefetchRowsFn(g.Src[gr*g.LD:], g.LD, n, g.Width)
		r += n
		left -= n
	}
	p.done += rows
}

// macroKernel runs the micro-kernel over every tile of an mc×nc block of C
// from packed A (mc rows) and B (nc columns) panels kc deep, storing
// C = alpha*A·B + beta*C. When arows is not nil, the full mr-row strips of
// A are read in place from arows (row-major, lda apart) and only a last,
// partial strip comes from ap. With a pair kernel (and A packed), two
// adjacent full B strips run together, so that each A strip is loaded
// once for both. tile is scratch for edge tiles: at least mr×nr, and
// mr×2nr for the pair kernel to run. Between tiles it prefetches the rows of the next
// regions, spread evenly over the tiles, so that the next packing steps
// find their source in cache instead of waiting for memory.
func macroKernel(mk microKernel, mc, nc, kc int, ap, arows []float32, lda int, bp, c []float32, ldc int, alpha, beta float32, tile []float32, next [2]Region) {
	mr, nr := mk.mr, mk.nr
	pairs := 0
	if mk.pair != nil && arows == nil && 2*mr*nr <= len(tile) {
		pairs = nc / (2 * nr)
	}
	steps := pairs + (nc-pairs*2*nr+nr-1)/nr // column steps: pairs, then single strips
	pf := newSpreadPrefetch(next, ((mc+mr-1)/mr)*steps)
	for jr := 0; jr < nc; {
		width := nr
		if jr < pairs*2*nr {
			width = 2 * nr
		}
		nb := min(nr, nc-jr)
		bs := bp[jr*kc : jr*kc+width*kc]
		for ir := 0; ir < mc; ir += mr {
			pf.step()
			mb := min(mr, mc-ir)
			if width > nr {
				if mb == mr {
					mk.pair(kc, ap[ir*kc:ir*kc+mr*kc], bs, c[ir*ldc+jr:], ldc, alpha, beta)
					continue
				}
				// A last, partial row strip: both tiles into scratch
				// (beta 0 does not read it), then the valid rows
				// merged.
				mk.pair(kc, ap[ir*kc:ir*kc+mr*kc], bs, tile, 2*nr, alpha, 0)
				storeRun(c[ir*ldc+jr:], ldc, tile, 2*nr, mb, 2*nr, beta)
				continue
			}
			var as, ar []float32
			if arows != nil && mb == mr {
				ar = arows[ir*lda:]
			} else {
				as = ap[ir*kc : ir*kc+mr*kc]
			}
			if mb == mr && nb == nr {
				if ar != nil {
					mk.rowA(kc, ar, lda, bs, c[ir*ldc+jr:], ldc, alpha, beta)
				} else {
					mk.fn(kc, as, bs, c[ir*ldc+jr:], ldc, alpha, beta)
				}
				continue
			}
			edgeTile(mk, mb, nb, kc, as, ar, lda, bs, c[ir*ldc+jr:], ldc, alpha, beta, tile)
		}
		jr += width
	}
}

// macroKernelA is macroKernel for a block whose every column step is a
// pair of full B strips (nc a multiple of 2·nr) and whose full A strips
// the pair kernel reads in place (mk.pairA): strip ir's element (i, q) at
// ain[(ir+i)*rs + q*ks]. A last, partial row strip comes packed from ap
// (at ap[ir*kc:], as macroKernel's), computed into scratch and merged.
// The next regions are prefetched spread over the tiles as macroKernel
// does.
func macroKernelA(mk microKernel, mc, nc, kc int, ap, ain []float32, rs, ks int, bp, c []float32, ldc int, alpha, beta float32, tile []float32, next [2]Region) {
	mr, nr := mk.mr, mk.nr
	pf := newSpreadPrefetch(next, ((mc+mr-1)/mr)*(nc/(2*nr)))
	for jr := 0; jr < nc; jr += 2 * nr {
		bs := bp[jr*kc : jr*kc+2*nr*kc]
		for ir := 0; ir < mc; ir += mr {
			pf.step()
			if mb := min(mr, mc-ir); mb < mr {
				mk.pair(kc, ap[ir*kc:ir*kc+mr*kc], bs, tile, 2*nr, alpha, 0)
				storeRun(c[ir*ldc+jr:], ldc, tile, 2*nr, mb, 2*nr, beta)
				continue
			}
			mk.pairA(kc, ain[ir*rs:], rs, ks, bs, c[ir*ldc+jr:], ldc, alpha, beta)
		}
	}
}

// edgeTile computes an mb×nb tile of C (at c[0], rows ldc apart) that is
// not a full mr×nr one: the whole tile (or its left half when that covers
// the valid columns) goes into scratch (beta 0 does not read it) and the
// valid part is merged into C. A comes from the packed strip as or, when
// ar is not nil, in place from ar (rows lda apart).
func edgeTile(mk microKernel, mb, nb, kc int, as, ar []float32, lda int, bs, c []float32, ldc int, alpha, beta float32, tile []float32) {
	nr := mk.nr
	halfTile := mk.half != nil && 2*nb <= nr
	switch {
	case ar != nil && halfTile:
		mk.halfRowA(kc, ar, lda, bs, tile, nr, alpha, 0)
	case ar != nil:
		mk.rowA(kc, ar, lda, bs, tile, nr, alpha, 0)
	case halfTile:
		mk.half(kc, as, bs, tile, nr, alpha, 0)
	default:
		mk.fn(kc, as, bs, tile, nr, alpha, 0)
	}
	storeRun(c, ldc, tile, nr, mb, nb, beta)
}

// The packing fast paths for the 6×16 kernel's layouts. The portable
// versions below are replaced by assembly where available.
var (
	packRows6Fn   = packRows6Go
	packPanel6Fn  = packPanel6Go
	packPanel16Fn = packPanel16Go
	packCols16TFn = packCols16TGo
)

// packA packs rows [i0, i0+mc) and columns [p0, p0+kc) of op(A) into
// mr-high strips, each stored k-major; rows past mc are zero.
func (p *problem) packA(dst []float32, i0, mc, p0, kc, mr int) {
	is := 0
	if mr == 6 && p.transA {
		full := mc / 6
		packPanel6Fn(dst, p.a[p0*p.lda+i0:], p.lda, kc, full)
		is = full * 6
	}
	for ; is < mc; is += mr {
		strip := dst[is*kc : is*kc+mr*kc]
		rows := min(mr, mc-is)
		r := i0 + is
		switch {
		case rows == 6 && mr == 6 && !p.transA:
			packRows6Fn(strip, p.a[r*p.lda+p0:], p.lda, kc)
			continue
		case rows < mr:
			clear(strip)
		}
		for i := 0; i < rows; i++ {
			if p.transA {
				// A stored k×m: element (r+i, q) at a[q*lda+r+i].
				src := p.a[p0*p.lda+r+i:]
				for q := 0; q < kc; q++ {
					strip[q*mr+i] = src[q*p.lda]
				}
			} else {
				src := p.a[(r+i)*p.lda+p0 : (r+i)*p.lda+p0+kc]
				for q, v := range src {
					strip[q*mr+i] = v
				}
			}
		}
	}
}

// packRows6Go interleaves six rows of a row-major matrix (src[0:kc] and
// the five rows below it, ld apart) into dst[q*6+i].
func packRows6Go(dst, src []float32, ld, kc int) {
	r0 := src[0:kc]
	r1 := src[ld : ld+kc]
	r2 := src[2*ld : 2*ld+kc]
	r3 := src[3*ld : 3*ld+kc]
	r4 := src[4*ld : 4*ld+kc]
	r5 := src[5*ld : 5*ld+kc]
	dst = dst[:6*kc]
	for q := range r0 {
		d := (*[6]float32)(dst[6*q:])
		d[0], d[1], d[2], d[3], d[4], d[5] = r0[q], r1[q], r2[q], r3[q], r4[q], r5[q]
	}
}

// packPanel6Go copies a kc×(6·strips) block (rows ld apart) into 6-wide
// k-major strips: element (q, 6s+i) to dst[s*6*kc+q*6+i].
func packPanel6Go(dst, src []float32, ld, kc, strips int) {
	packPanelRows(dst, src, ld, kc, 0, strips, 6)
}

// packPanelRows copies rows [q0, kc) of a kc×(w·strips) block (rows ld
// apart) into w-wide k-major strips kc deep: element (q, w*s+j) to
// dst[s*w*kc+q*w+j].
func packPanelRows(dst, src []float32, ld, kc, q0, strips, w int) {
	for q := q0; q < kc; q++ {
		row := src[q*ld : q*ld+w*strips]
		for s := 0; s < strips; s++ {
			copy(dst[s*w*kc+w*q:s*w*kc+w*q+w], row[w*s:w*s+w])
		}
	}
}

// packB packs rows [p0, p0+kc) and columns [j0, j0+nc) of op(B) into
// nr-wide strips, each stored k-major; columns past nc are zero.
func (p *problem) packB(dst []float32, p0, kc, j0, nc, nr int) {
	js := 0
	if nr == 16 {
		full := nc / 16
		if p.transB {
			for s := 0; s < full; s++ {
				packCols16TFn(dst[s*16*kc:], p.b[(j0+16*s)*p.ldb+p0:], p.ldb, kc)
			}
		} else {
			packPanel16Fn(dst, p.b[p0*p.ldb+j0:], p.ldb, kc, full)
		}
		js = full * 16
	}
	for ; js < nc; js += nr {
		strip := dst[js*kc : js*kc+nr*kc]
		cols := min(nr, nc-js)
		if cols < nr {
			clear(strip)
		}
		if p.transB {
			// B stored n×k: element (q, col) at b[col*ldb+q].
			for j := 0; j < cols; j++ {
				src := p.b[(j0+js+j)*p.ldb+p0 : (j0+js+j)*p.ldb+p0+kc]
				for q, v := range src {
					strip[q*nr+j] = v
				}
			}
			continue
		}
		for q := 0; q < kc; q++ {
			src := p.b[(p0+q)*p.ldb+j0+js : (p0+q)*p.ldb+j0+js+cols]
			copy(strip[q*nr:q*nr+cols], src)
		}
	}
}

// packPanel16Go copies a kc×(16·strips) block (rows ld apart) into
// 16-wide k-major strips: element (q, 16s+j) to dst[s*16*kc+q*16+j].
func packPanel16Go(dst, src []float32, ld, kc, strips int) {
	packPanelRows(dst, src, ld, kc, 0, strips, 16)
}

// packCols16TGo packs 16 rows of a row-major n×k matrix (ld apart, kc
// long) as the 16 columns of a k-major strip: dst[q*16+j] = src[j*ld+q].
func packCols16TGo(dst, src []float32, ld, kc int) {
	dst = dst[:16*kc]
	for j := 0; j < 16; j++ {
		row := src[j*ld : j*ld+kc]
		for q, v := range row {
			dst[q*16+j] = v
		}
	}
}
