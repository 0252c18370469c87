package nn

import (
	"sync"
	"sync/atomic"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
)

// The filter gradient of a 3×3 stride-1 convolution through the Winograd
// F(2×2, 3×3) transform.
//
// The forward transform computes each 2×2 output tile as
// Y = Aᵀ[(G·g·Gᵀ) ⊙ (Bᵀ·d·B)]A from the 4×4 input tile d, so the gradient
// of the 3×3 kernel g is
//
//	dg = Gᵀ·[Σ over tiles (A·dY·Aᵀ) ⊙ (Bᵀ·d·B)]·G
//
// For each of the 16 transform positions ξ the sum over tiles is a
// product dU_ξ[m][c] = Σ_t Ŷ_ξ[m][t]·V_ξ[c][t], whose shared dimension is
// every tile of the batch: 16 long-K products of M×C that together do
// 16/36 of the direct gradient's multiplications. The tiles are taken a
// block of tile rows at a time and a row r of the transforms at a time
// (positions ξ = 4r … 4r+3), transformed into V and Ŷ blocks that stay
// in cache and multiplied straight away. The 4 rows r share the cores
// (with more than 4 cores the tiles are also split, each part summing
// into its own dU), and dU is turned into the 3×3 gradient at the end.
//
// The transforms are done in two passes over the NCHW planes, a vertical
// one that combines two image (or output-gradient) rows of each tile row,
// vectorized along the row, and a horizontal one that combines the
// columns of 8 tiles at a time (see wgradPasses).
//
// Tiles follow the output: tile (n, i, j) covers output rows 2i, 2i+1 and
// columns 2j, 2j+1, and reads image rows 2i−PadTop … 2i−PadTop+3 (columns
// likewise); outputs past OH×OW and image positions outside H×W read as
// zero, so odd output sizes and any pads are exact.

// wgradTransforms is the number of transform positions of F(2×2, 3×3).
const wgradTransforms = 16

// wgradEligible reports whether the Winograd filter gradient computes g: a
// 3×3 kernel at unit strides and dilations.
func (g *Conv2D) wgradEligible() bool {
	return g.winograd3x3() && g.PadTop >= 0 && g.PadLeft >= 0 &&
		g.N > 0 && g.C > 0 && g.M > 0 && g.OH > 0 && g.OW > 0 && g.H > 0 && g.W > 0
}

// wgradUse reports whether FilterGrad takes the Winograd path for g under
// its policy.
func (g *Conv2D) wgradUse() bool {
	return g.wgradEligible() && winogradTakes(g.Winograd, g.wgradWins())
}

// wgradWins reports whether the transform was measured faster than the
// implicit GEMM for g's shape (CPU time on the 2-core AVX2 EPYC): ResNet-18
// at batch 32, 64 channels at 16×16 (2048 tiles), 128 at 8×8 (512), 256
// at 4×4 (128) and 512 at 2×2 (32 tiles) all win, 1.5 to 2×; so do 256 at
// 4×4 from 32 tiles and 16 channels at 32×32. Too few tiles (512 channels
// at 2×2 with 8), too few channels (8, or 3 in) or too little work (32
// channels at 6×6, 72 tiles) lose to the transforms' fixed costs.
func (g *Conv2D) wgradWins() bool {
	tiles := g.N * ((g.OH + 1) / 2) * ((g.OW + 1) / 2)
	return tiles >= 32 && g.C >= 16 && g.M >= 16 && g.C*g.M*tiles >= 1<<21
}

// wgradCallCount counts the filter gradients run through the transform.
var wgradCallCount atomic.Int64

// WinogradFilterGradCalls returns how many convolution filter gradients
// have run through the Winograd transform (tests check with it that a
// model's convolutions reached it).
func WinogradFilterGradCalls() int64 { return wgradCallCount.Load() }

// wgradCall is one Winograd filter gradient in flight: the geometry, the
// operands and each worker's buffers. Calls are pooled (wgradCalls), so
// that the buffers, which grow to the largest layer and stay, make a
// training step allocate nothing.
type wgradCall struct {
	g       Conv2D
	dy, x   []float32
	dw      []float32
	acc     bool
	th, tw  int       // tile rows and tiles per row of one output plane
	rows    int       // tile rows per block
	tb      int       // tile slots of a full block (a multiple of 8): the blocks' row stride
	wide    bool      // rows of a multiple of 8 tiles (else the tiles are gathered)
	idx     wgradCols // where the horizontal passes gather slot t's tile (when not wide)
	qrows   int       // tile rows of the batch (N·th)
	blocks  int
	parts   int         // parts of the blocks, each summed into its own dU
	rpi     int         // rows r of the transforms an item takes, block by block (1, 2 or 4)
	perPart int         // blocks per part
	du      [][]float32 // each part's dU, 16·M·C: du[p][ξ·M·C + m·C + c]
	phase   int
	w       []wgradWorker
	fn      func(worker, item int)
}

// wgradWorker is one worker's scratch.
type wgradWorker struct {
	ready  bool      // the buffers suit this call
	v, y   []float32 // 4 positions ξ = 4r+l of a block's transforms: v[l·C·tb + c·tb + t], y[l·M·tb + m·tb + t]
	sx, sy []float32 // a channel's row after the vertical pass
	zero   []float32 // a row of zeros (rows outside the image or dy)
	// The rows a vertical pass combines for each tile row of a block:
	// offsets from the channel's plane in the first image (−1: zeros).
	xa, xb, ya, yb []int
}

const (
	wgradPhaseBlocks = iota // items are transform rows of parts of the tiles
	wgradPhaseOutput        // items are output channels m
)

// wgradCalls is a free list of calls (not a sync.Pool, which the collector
// empties: the buffers are megabytes).
var wgradCalls struct {
	mu   sync.Mutex
	free []*wgradCall
}

func getWgradCall() *wgradCall {
	wgradCalls.mu.Lock()
	defer wgradCalls.mu.Unlock()
	if n := len(wgradCalls.free); n > 0 {
		c := wgradCalls.free[n-1]
		wgradCalls.free = wgradCalls.free[:n-1]
		return c
	}
	c := new(wgradCall)
	c.fn = c.run
	return c
}

func putWgradCall(c *wgradCall) {
	c.dy, c.x, c.dw = nil, nil, nil
	wgradCalls.mu.Lock()
	defer wgradCalls.mu.Unlock()
	if len(wgradCalls.free) < 4 {
		wgradCalls.free = append(wgradCalls.free, c)
	}
}

// wgradGrow returns s resized to n elements, reallocating when it is too
// small.
func wgradGrow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// wgradGrowInts is wgradGrow for ints.
func wgradGrowInts(s []int, n int) []int {
	if cap(s) < n {
		return make([]int, n)
	}
	return s[:n]
}

// wgradBlockTiles is the number of tiles a block aims at: the V and Ŷ
// blocks of one transform row (4 positions of C+M channels, float32)
// should fit the L2 cache (1 MiB here), and the products' shared dimension
// should be long enough to run the micro-kernel at full speed (64 to 256
// tiles measured alike on ResNet-18's layers).
func wgradBlockTiles(c, m int) int {
	const blockBytes = 1 << 20
	t := blockBytes / (4 * 4 * (c + m))
	return min(256, max(64, t))
}

// winogradFilterGrad computes dw = ∂L/∂w of the convolution g (which
// wgradEligible accepts) from its output gradient dy and input x, or adds
// it to dw when accumulate is set.
func (g *Conv2D) winogradFilterGrad(dy, x, dw []float32, accumulate bool) {
	_ = dy[g.N*g.M*g.OH*g.OW-1]
	_ = x[g.N*g.C*g.H*g.W-1]
	_ = dw[g.M*g.C*9-1]
	wgradCallCount.Add(1)
	c := getWgradCall()
	defer putWgradCall(c)
	c.g, c.dy, c.x, c.dw, c.acc = *g, dy, x, dw, accumulate
	c.th, c.tw = (g.OH+1)/2, (g.OW+1)/2
	c.qrows = g.N * c.th
	c.rows = max(1, min(c.qrows, wgradBlockTiles(g.C, g.M)/c.tw))
	c.wide = c.tw%8 == 0
	c.tb = (c.rows*c.tw + 7) &^ 7
	if !c.wide {
		// Slot t holds tile t%tw of the block's tile row t/tw, which
		// starts at column 2·(t%tw) of that row's segment; the slots
		// past the block's tiles read the zero columns past its last
		// segment.
		seg := 2*c.tw + 2
		if cap(c.idx.at) < c.tb {
			c.idx.at = make([]int32, c.tb)
		}
		c.idx.at = c.idx.at[:c.tb]
		for t := range c.idx.at {
			col := c.rows * seg
			if t < c.rows*c.tw {
				col = t/c.tw*seg + 2*(t%c.tw)
			}
			c.idx.set(t, col)
		}
	}
	c.blocks = (c.qrows + c.rows - 1) / c.rows
	// The work items are the 4 rows r of the transforms (positions
	// 4r … 4r+3), each over all tiles, so that up to 4 workers share
	// the products without partial sums; more workers also split the
	// tiles into parts, each part summing into its own dU.
	workers := kern.Workers()
	c.parts = min(c.blocks, max(1, (workers+3)/4))
	c.perPart = (c.blocks + c.parts - 1) / c.parts
	c.parts = (c.blocks + c.perPart - 1) / c.perPart
	if cap(c.du) < c.parts {
		c.du = append(c.du[:cap(c.du)], make([][]float32, c.parts-cap(c.du))...)
	}
	c.du = c.du[:c.parts]
	for p := range c.du {
		c.du[p] = wgradGrow(c.du[p], wgradTransforms*g.M*g.C)
	}
	// With fewer than 4 workers an item takes 2 or 4 rows r, each block's
	// in turn while its rows of x and dy are in cache (one item a row r
	// read x and dy from memory once a row: four times in all), where
	// the item's positions of dU stay small (wgradItemFloats). Each
	// position still sums its blocks in order within one item: the same
	// bits with any number of workers.
	c.rpi = 1
	if c.parts == 1 {
		for c.rpi < 4/max(1, workers) && 4*2*c.rpi*g.M*g.C <= wgradItemFloats {
			c.rpi *= 2
		}
	}
	items := 4 * c.parts / c.rpi
	workers = min(workers, items)
	if cap(c.w) < workers {
		c.w = append(c.w[:cap(c.w)], make([]wgradWorker, workers-cap(c.w))...)
	}
	c.w = c.w[:workers]
	for i := range c.w {
		c.w[i].ready = false
	}
	c.phase = wgradPhaseBlocks
	ParallelItems(items, workers, false, c.fn)
	c.phase = wgradPhaseOutput
	ParallelItems(g.M, nnWorkers(g.M, g.C*16*c.parts), false, c.fn)
}

// run is ParallelItems' item function for both phases: an output channel
// m, or the blocks of part item/4 for the transform row item%4. Each dU
// row block belongs to one item, which sums it over its blocks in order,
// so the result does not depend on scheduling.
func (c *wgradCall) run(worker, item int) {
	if c.phase == wgradPhaseOutput {
		c.output(item)
		return
	}
	per := 4 / c.rpi
	p, r0 := item/per, item%per*c.rpi
	w := &c.w[worker]
	b0 := p * c.perPart
	for b := b0; b < min(b0+c.perPart, c.blocks); b++ {
		for r := r0; r < r0+c.rpi; r++ {
			c.block(w, b, r, c.du[p], b == b0)
		}
	}
}

// wgradGroups says where the horizontal passes find the groups of 8
// tiles that they transform at once with shuffles, in the combined rows
// that the vertical passes wrote (each tile row of a block a segment of
// 2·tw+2 columns, tile j of segment s starting at column s·(2·tw+2) + 2j):
// nsg runs sgstride columns apart of gps groups 16 columns apart, each
// group taking its first 4 tiles from its start and its last 4 from boff
// columns on (8: 8 consecutive tiles). Rows of other lengths are
// gathered instead (wgradCall.idx).
type wgradGroups struct {
	nsg, gps, sgstride, boff int
}

func (gr wgradGroups) count() int { return gr.nsg * gr.gps }

// groups returns the groups of a block of rows tile rows of a multiple of
// 8 tiles each (c.wide).
func (c *wgradCall) groups(rows int) wgradGroups {
	return wgradGroups{nsg: rows, gps: c.tw / 8, sgstride: 2*c.tw + 2, boff: 8}
}

// wgradOp is how a vertical pass combines its two rows a and b.
type wgradOp int

const (
	wgradAdd  wgradOp = iota // a + b
	wgradSub                 // a − b
	wgradCopy                // a
	wgradNeg                 // −b
)

// wgradVert is one row of a vertical transform: rows a and b of the tile
// (0 … 3 of the image tile, 0 … 1 of the output-gradient tile) combined
// by op.
type wgradVert struct {
	a, b int
	op   wgradOp
}

// The rows of Bᵀ (d0−d2, d1+d2, d2−d1, d1−d3) and of A (y0, y0+y1,
// y0−y1, −y1).
var (
	wgradBT = [4]wgradVert{{0, 2, wgradSub}, {1, 2, wgradAdd}, {2, 1, wgradSub}, {1, 3, wgradSub}}
	wgradA  = [4]wgradVert{{0, 0, wgradCopy}, {0, 1, wgradAdd}, {0, 1, wgradSub}, {1, 1, wgradNeg}}
)

// block transforms the tile rows of block b by row r of the transforms
// and adds the products of the positions ξ = 4r … 4r+3 into du (or
// stores them, when first is set): the vertical pass combines two rows
// of each tile row of a channel into one row sx (sy) of segments, the
// horizontal pass turns it into those 4 positions of the block's tiles,
// and the 4 products follow. A quarter of the positions at a time keeps
// the V and Ŷ blocks in cache with long shared dimensions.
//
// Each tile row of a block is a segment of 2·tw+2 columns of sx and sy,
// tile j of segment s starting at column s·(2·tw+2) + 2j; the columns of
// a segment outside the image (pads) stay zero.
func (c *wgradCall) block(w *wgradWorker, b, r int, du []float32, first bool) {
	g := &c.g
	C, M, tw, tb := g.C, g.M, c.tw, c.tb
	seg := 2*tw + 2
	ls := (c.rows+1)*seg + 24
	if !w.ready {
		w.v = wgradGrow(w.v, 4*C*tb)
		w.y = wgradGrow(w.y, 4*M*tb)
		w.sx = wgradGrow(w.sx, ls)
		w.sy = wgradGrow(w.sy, ls)
		w.zero = wgradGrow(w.zero, max(g.W, g.OW))
		w.xa, w.xb = wgradGrowInts(w.xa, c.rows), wgradGrowInts(w.xb, c.rows)
		w.ya, w.yb = wgradGrowInts(w.ya, c.rows), wgradGrowInts(w.yb, c.rows)
		clear(w.sx)
		clear(w.sy)
		clear(w.zero)
		w.ready = true
	}
	q0 := b * c.rows
	q1 := min(q0+c.rows, c.qrows)
	rows := q1 - q0
	// The products' shared dimension: the block's tiles, and when they
	// are gathered, the zero tiles up to a multiple of 8.
	nt := (rows*tw + 7) &^ 7
	groups := c.groups(rows)
	if rows < c.rows {
		// A short last block: the slots past its tiles must gather
		// zeros from sy, whatever earlier blocks left there.
		clear(w.sy[rows*seg:])
	}
	plane, oplane := g.H*g.W, g.OH*g.OW
	nw := min(g.W, seg-g.PadLeft) // image columns a segment holds
	beta := float32(1)
	if first {
		beta = 0
	}
	vx, vy := wgradBT[r], wgradA[r]
	for q := q0; q < q1; q++ {
		n, i := q/c.th, q%c.th
		ih := 2*i - g.PadTop
		w.xa[q-q0], w.xb[q-q0] = -1, -1
		if a := ih + vx.a; a >= 0 && a < g.H {
			w.xa[q-q0] = n*C*plane + a*g.W
		}
		if b := ih + vx.b; b >= 0 && b < g.H {
			w.xb[q-q0] = n*C*plane + b*g.W
		}
		w.ya[q-q0], w.yb[q-q0] = -1, -1
		if a := 2*i + vy.a; a < g.OH {
			w.ya[q-q0] = n*M*oplane + a*g.OW
		}
		if b := 2*i + vy.b; b < g.OH {
			w.yb[q-q0] = n*M*oplane + b*g.OW
		}
	}
	xa, xb, ya, yb := w.xa[:rows], w.xb[:rows], w.ya[:rows], w.yb[:rows]
	for ch := 0; ch < C; ch++ {
		if nw > 0 {
			wgradPass.vert(vx.op, w.sx[g.PadLeft:], seg, c.x[ch*plane:], w.zero, xa, xb, nw)
		}
		if c.wide {
			wgradPass.horzX(w.v[ch*tb:], C*tb, w.sx, groups)
		} else {
			wgradPass.horzXIdx(w.v[ch*tb:], C*tb, w.sx, c.idx.prefix(nt))
		}
	}
	for m := 0; m < M; m++ {
		wgradPass.vert(vy.op, w.sy, seg, c.dy[m*oplane:], w.zero, ya, yb, g.OW)
		if c.wide {
			wgradPass.horzY(w.y[m*tb:], M*tb, w.sy, groups)
		} else {
			wgradPass.horzYIdx(w.y[m*tb:], M*tb, w.sy, c.idx.prefix(nt))
		}
	}
	for l := 0; l < 4; l++ {
		xi := 4*r + l
		gemm.SgemmSerial(false, true, M, C, nt, 1, w.y[l*M*tb:], tb, w.v[l*C*tb:], tb,
			beta, du[xi*M*C:], C)
	}
}

// wgradItemFloats bounds the positions of dU an item that takes several
// rows r of the transforms sums into (4 a row, M·C floats each): 512 KiB,
// a quarter of L2 (on two cores, 2 rows an item: ResNet-50's 64-channel
// layer 4–9% faster, its 128-channel one 0–3%; the 256-channel one, 2 MiB
// with 2 rows, 2–5% slower).
const wgradItemFloats = 128 << 10

// wgradPasses are the transform passes. wgradGoPasses are portable;
// amd64 replaces them with AVX2 loops (which order the tiles of each group
// of 8 differently, but the same way in both horizontal passes).
type wgradPasses struct {
	// vert writes s[q·seg + u] = x[ta[q]+u] op x[tb[q]+u] for tile
	// rows q < len(ta) and columns u < n, reading zero where an offset
	// is negative (zero holds n zeros).
	vert func(op wgradOp, s []float32, seg int, x, zero []float32, ta, tb []int, n int)
	// horzX and horzY transform the tiles of groups of the row s into
	// rows 0 … 3 of out (ld apart); horzXIdx and horzYIdx the tiles
	// starting at columns idx[t], slot t each.
	horzX    func(out []float32, ld int, s []float32, gr wgradGroups)
	horzY    func(out []float32, ld int, s []float32, gr wgradGroups)
	horzXIdx func(out []float32, ld int, s []float32, idx wgradCols)
	horzYIdx func(out []float32, ld int, s []float32, idx wgradCols)
	// output is the output transform, wgradOutputGo.
	output func(dw, u []float32, ld, n int, acc bool)
}

var wgradGoPasses = wgradPasses{
	vert:  wgradVertGo,
	horzX: wgradHorzXGo, horzY: wgradHorzYGo,
	horzXIdx: wgradHorzXIdxGo, horzYIdx: wgradHorzYIdxGo,
	output: wgradOutputGo,
}

// wgradPass holds the passes in use.
var wgradPass = wgradGoPasses

// wgradVertGo is the portable vertical pass.
func wgradVertGo(op wgradOp, s []float32, seg int, x, zero []float32, ta, tb []int, n int) {
	row := func(o int) []float32 {
		if o < 0 {
			return zero[:n]
		}
		return x[o : o+n]
	}
	for q, oa := range ta {
		d, ra, rb := s[q*seg:q*seg+n], row(oa), row(tb[q])
		switch op {
		case wgradAdd:
			for u := range d {
				d[u] = ra[u] + rb[u]
			}
		case wgradSub:
			for u := range d {
				d[u] = ra[u] - rb[u]
			}
		case wgradCopy:
			copy(d, ra)
		case wgradNeg:
			for u := range d {
				d[u] = -rb[u]
			}
		}
	}
}

// tileCols yields, in slot order, each tile's slot t (8 per group) and
// the column of the row its values start at.
func (gr wgradGroups) tileCols(yield func(t, col int) bool) {
	t := 0
	for sg := 0; sg < gr.nsg; sg++ {
		for g := 0; g < gr.gps; g++ {
			base := sg*gr.sgstride + 16*g
			for p := 0; p < 8; p++ {
				col := base + 2*p
				if p >= 4 {
					col = base + gr.boff + 2*(p-4)
				}
				if !yield(t, col) {
					return
				}
				t++
			}
		}
	}
}

// wgradHorzXGo applies B along the row s for the tiles of groups: tile j
// reads a, b, c, d = s[2j … 2j+3] and writes a−c, b+c, c−b, b−d to
// out[l·ld + t], l = 0 … 3, for the tile's slot t (8 per group, in order).
func wgradHorzXGo(out []float32, ld int, s []float32, gr wgradGroups) {
	for t, col := range gr.tileCols {
		wgradHorzXTile(out[t:], ld, s[col:col+4:col+4])
	}
}

// wgradHorzYGo applies Aᵀ along the row s for the tiles of groups: tile j
// reads a, b = s[2j], s[2j+1] and writes a, a+b, a−b, −b to
// out[l·ld + t], l = 0 … 3, for the tile's slot t.
func wgradHorzYGo(out []float32, ld int, s []float32, gr wgradGroups) {
	for t, col := range gr.tileCols {
		wgradHorzYTile(out[t:], ld, s[col:col+2:col+2])
	}
}

// wgradCols are the columns the horizontal passes gather tiles from, with
// their least and largest value, kept as they are set: the assembly
// gathers read wherever the columns point, and its wrappers check the
// range once a call instead of every column (which took as long as the
// gather itself: 12% of ResNet-50's 64-channel filter gradient).
type wgradCols struct {
	at     []int32
	lo, hi int
}

// set makes column t col.
func (c *wgradCols) set(t, col int) {
	if t == 0 || col < c.lo {
		c.lo = col
	}
	if t == 0 || col > c.hi {
		c.hi = col
	}
	c.at[t] = int32(col)
	if int(c.at[t]) != col {
		c.lo = -1 // past int32: every wrapper refuses it
	}
}

// prefix is the first n columns (their range within c's).
func (c wgradCols) prefix(n int) wgradCols { return wgradCols{c.at[:n], c.lo, c.hi} }

// wgradHorzXIdxGo is wgradHorzXGo for the tiles that start at columns
// idx.at[t] of s, slot t each.
func wgradHorzXIdxGo(out []float32, ld int, s []float32, idx wgradCols) {
	for t, col := range idx.at {
		wgradHorzXTile(out[t:], ld, s[col:col+4:col+4])
	}
}

// wgradHorzYIdxGo is wgradHorzYGo for the tiles that start at columns
// idx.at[t] of s, slot t each.
func wgradHorzYIdxGo(out []float32, ld int, s []float32, idx wgradCols) {
	for t, col := range idx.at {
		wgradHorzYTile(out[t:], ld, s[col:col+2:col+2])
	}
}

// wgradHorzXTile writes q·B for one tile row q of 4 values to out[l·ld].
func wgradHorzXTile(out []float32, ld int, q []float32) {
	a, b, cc, d := q[0], q[1], q[2], q[3]
	out[0] = a - cc
	out[ld] = b + cc
	out[2*ld] = cc - b
	out[3*ld] = b - d
}

// wgradHorzYTile writes q·Aᵀ for one tile row q of 2 values to out[l·ld].
func wgradHorzYTile(out []float32, ld int, q []float32) {
	a, b := q[0], q[1]
	out[0] = a
	out[ld] = a + b
	out[2*ld] = a - b
	out[3*ld] = -b
}

// output sums the parts' dU for output channel m (into the first part's,
// in part order) and writes (or adds) dw[m] = Gᵀ·dU·G for
// every input channel.
func (c *wgradCall) output(m int) {
	g := &c.g
	C, M := g.C, g.M
	mc := M * C
	du := c.du[0]
	var rows [wgradTransforms][]float32
	for xi := range rows {
		rows[xi] = du[xi*mc+m*C : xi*mc+(m+1)*C]
		for p := 1; p < c.parts; p++ {
			add := c.du[p][xi*mc+m*C : xi*mc+(m+1)*C]
			dst := rows[xi][:len(add)]
			for q, v := range add {
				dst[q] += v
			}
		}
	}
	wgradPass.output(c.dw[m*C*9:(m+1)*C*9], du[m*C:], mc, C, c.acc)
}

// wgradOutputGo writes (or adds, when acc is set) dw[9j … 9j+8] =
// Gᵀ·U·G for channels j < n, whose position ξ is u[ξ·ld + j].
func wgradOutputGo(dw, u []float32, ld, n int, acc bool) {
	for j := 0; j < n; j++ {
		// Gᵀ·U: rows u0 + (u1+u2)/2, (u1−u2)/2, (u1+u2)/2 + u3.
		var t [3][4]float32
		for k := 0; k < 4; k++ {
			a, b, cc, d := u[k*ld+j], u[(4+k)*ld+j], u[(8+k)*ld+j], u[(12+k)*ld+j]
			h := 0.5 * (b + cc)
			t[0][k] = a + h
			t[1][k] = 0.5 * (b - cc)
			t[2][k] = h + d
		}
		o := (*[9]float32)(dw[9*j : 9*j+9])
		for r := 0; r < 3; r++ {
			a, b, cc, d := t[r][0], t[r][1], t[r][2], t[r][3]
			h := 0.5 * (b + cc)
			v0, v1, v2 := a+h, 0.5*(b-cc), h+d
			if acc {
				o[3*r] += v0
				o[3*r+1] += v1
				o[3*r+2] += v2
			} else {
				o[3*r], o[3*r+1], o[3*r+2] = v0, v1, v2
			}
		}
	}
}
