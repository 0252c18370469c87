package gemm

// Thin products: C has fewer rows than one micro-kernel strip (1 to
// mr-1) and B is stored n×k (transposed, as ONNX's Gemm and the exports'
// MatMul store a weight), as in a batch of a few samples through a dense
// layer, or ViT-B/16's class token through its last block (4×768
// against a 3072×768 weight; one row per head in its attention). blocked
// would pack all of B, transposing k·n values that each feed those few
// rows only: the transposing pack was 64-70% of such a product's time
// (and a single row ran the direct loops, scalar). The thin path
// computes the product swapped, Cᵀ = op(B)ᵀ·op(A)ᵀ: B's rows are read in
// place as the kernel's A (halfRowA, six rows a call), op(A)ᵀ is packed
// as one B strip per k block, and each tile is stored transposed. With
// the AVX-512 build on the Xeon, 4×3072×768 ran 1.19–1.26 → 0.61–0.65 ms
// on one core with B in cache and 1.10–1.23 → 0.74–0.76 ms on two from
// memory, 4×768×3072 0.84–1.00 → 0.47–0.51 ms from memory (BenchmarkThin).
//
// Every element is the same sum in the same order as blocked computes it
// (the kernels' products commute exactly, the k blocks are blocked's, and
// each tile goes through the partial strip's store, storeRun's rules), so
// the bits do not depend on the path (TestThinMatchesBlocked). B stored
// k×n keeps blocked: its pack is a plain copy, and the kernel that reads B
// in place (microKernel.bIn) was no faster from memory here (4×3072×768:
// 0.69-1.1 ms against 0.67-0.77 packed, by its prefetch distance).

// thinMinCols is the narrowest column range that takes a thin path: below
// it B is small and packing it costs little.
const thinMinCols = 64

// thinOK reports whether rows [i0, i1) and columns [j0, j1) of p take
// the thin path with mk.
func (p *problem) thinOK(mk microKernel, i0, i1, j0, j1 int) bool {
	rows := i1 - i0
	if rows < 1 || rows >= mk.mr || j1-j0 < thinMinCols || !thinPath {
		return false
	}
	return p.transB && hasThinKernels(mk) && rows <= mk.nr/2
}

// thinPath is off in tests that compare the thin path with blocked;
// thinHook, when not nil, is called by each thin call (tests count them).
var (
	thinPath = true
	thinHook func()
)

// thin computes rows [i0, i1) and columns [j0, j1) of C by the thin path
// (thinOK), applying the row of C (cRow) first, beta on the first k block
// and the epilogue after the last.
func (p *problem) thin(mk microKernel, buf *buffers, i0, i1, j0, j1 int) {
	if thinHook != nil {
		thinHook()
	}
	if p.cRow != nil && p.beta != 0 {
		fillRows(p.c, p.ldc, i0, i1, j0, j1, p.cRow)
	}
	p.thinSwapped(mk, buf, i0, i1, j0, j1)
	if p.ep.active() {
		p.ep.apply(p.c, p.ldc, i0, i1, j0, j1)
	}
}

// thinSwapped is thin's product: with q the swapped product
// (op(B)ᵀ·op(A)ᵀ, whose A is B as stored), op(A)ᵀ's rows [i0, i1) are
// packed as one B strip per k block, then for each six of B's rows (C's
// columns) the half kernel reads them in place over every k block and each
// tile is stored transposed into C; a last group of fewer rows is packed.
func (p *problem) thinSwapped(mk microKernel, buf *buffers, i0, i1, j0, j1 int) {
	mr, nr, rows := mk.mr, mk.nr, i1-i0
	q := problem{m: p.n, n: p.m, k: p.k, transB: !p.transA, a: p.b, lda: p.ldb, b: p.a, ldb: p.lda}
	kc := blockSize(p.k, mk.kc, 1)
	// op(A)ᵀ's strip of every k block, block pc at buf.b[pc*nr:].
	buf.b = grow(buf.b, nr*p.k)
	for pc := 0; pc < p.k; pc += kc {
		q.packB(buf.b[pc*nr:], pc, min(kc, p.k-pc), i0, rows, nr)
	}
	ldt := nr / 2 // the half kernel's tile: mr rows of its nr/2 columns
	tile := buf.tile[:mr*ldt]
	c := p.c[i0*p.ldc:]
	// The next product's operands (SgemmSerialNext), fetched over the
	// groups: a head's one-row products wait on memory, not on the FMAs.
	pf := newSpreadPrefetch(p.after, (j1-j0+mr-1)/mr)
	for j := j0; j < j1; j += mr {
		pf.step()
		n := min(mr, j1-j)
		if n < mr {
			buf.a = grow(buf.a, mr*kc)
		}
		for pc := 0; pc < p.k; pc += kc {
			kcur := min(kc, p.k-pc)
			bs := buf.b[pc*nr : (pc+kcur)*nr]
			if n == mr {
				mk.halfRowA(kcur, q.a[j*q.lda+pc:], q.lda, bs, tile, ldt, p.alpha, 0)
			} else {
				q.packA(buf.a, j, n, pc, kcur, mr)
				mk.half(kcur, buf.a, bs, tile, ldt, p.alpha, 0)
			}
			beta := float32(1)
			if pc == 0 {
				beta = p.beta
			}
			storeRunT(c[j:], p.ldc, tile, ldt, rows, n, beta)
		}
	}
}

// storeRunT is storeRun for a tile stored transposed: element (r, i) of
// the tile (rows ldt apart in t), for r < cols and i < rows, goes to
// row i, column r of C (rows ldc apart from c[0]), by storeRun's rules.
func storeRunT(c []float32, ldc int, t []float32, ldt, rows, cols int, beta float32) {
	for i := 0; i < rows; i++ {
		row := c[i*ldc : i*ldc+cols]
		switch beta {
		case 0:
			for r := range row {
				row[r] = t[r*ldt+i]
			}
		case 1:
			for r := range row {
				row[r] += t[r*ldt+i]
			}
		default:
			for r := range row {
				row[r] = beta*row[r] + t[r*ldt+i]
			}
		}
	}
}
