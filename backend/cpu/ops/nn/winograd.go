package nn

import (
	"sync"
	"sync/atomic"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
)

// Winograd F(2×2, 3×3) for the float32 3×3 stride-1 convolutions (Lavin &
// Gray, "Fast Algorithms for Convolutional Neural Networks"): each 2×2
// block of outputs (a tile) is computed from the 4×4 patch of input under
// it as
//
//	Y = Aᵀ [ Σ_c (G g_{m,c} Gᵀ) ⊙ (Bᵀ d_c B) ] A
//
// with 16 multiplications per tile and channel pair instead of 36. Written
// as products, the 16 positions ξ of the transformed 4×4 patch are 16
// independent GEMMs M_ξ = U_ξ · V_ξ: U_ξ (output channels × input
// channels) holds position ξ of every transformed kernel, V_ξ (input
// channels × tiles) position ξ of every transformed input patch. The
// kernels are transformed once per call, straight into the micro-kernel's
// packed A layout; the tiles are processed in blocks (each worker one
// block at a time) whose transformed inputs are written straight into
// packed B strips and whose 16 products stay in L2 until the output
// transform reads them.
//
// The transforms (Bᵀ, G, Aᵀ as in the paper):
//
//	Bᵀ = [1 0 −1 0; 0 1 1 0; 0 −1 1 0; 0 1 0 −1]
//	G  = [1 0 0; ½ ½ ½; ½ −½ ½; 0 0 1]
//	Aᵀ = [1 1 1 0; 0 1 −1 −1]
//
// The input gradient of a stride-1 convolution is the correlation of dy
// with the flipped kernel, channels transposed. Since G·J = P·G (J
// reverses the three taps, P swaps rows 0 and 3 of the 4), the flipped
// kernel's transform is the kernel's with positions 0 and 3 swapped along
// both axes: the same U, read transposed and permuted.
//
// Rounding differs from the direct product (relative errors of a few
// float32 ulps of the terms' magnitude), and non-finite values spread
// further: a NaN or an infinity anywhere in a tile's input patch can make
// every output of the tile NaN (where the direct product gives some
// infinities or finite values), since the transforms add and subtract
// the patch's values.

// winoConv is the geometry of one Winograd correlation: an image batch
// (n, c, h, w) correlated with 3×3 kernels (m output channels) from begin
// pads pt, pl into (n, m, oh, ow); output (oy, ox) reads input rows
// oy−pt..oy−pt+2 and columns ox−pl..ox−pl+2, zero outside the image.
type winoConv struct {
	n, c, h, w int
	m, oh, ow  int
	pt, pl     int

	th, tw, tiles int // tiles per image column and row, in the batch
	hp, wp        int // zero-bordered planes holding every tile's patch
	mp            int // m rounded up to whole micro-kernel strips
	tb            int // tiles per block (whole B strips)
	blocks        int
	mr, nr        int
	// Distances between the 16 positions of the transformed kernels
	// (us), of a block's transformed inputs (vs) and of its products
	// (ps): each one cache line past the position's size, so that the
	// 16 streams written or read together do not share cache sets.
	us, vs, ps int
}

// winoMaxPad is the largest pad on any side the transform accepts.
const winoMaxPad = 2

// winoForwardConv returns the Winograd geometry of g's forward product,
// or false when the transform does not apply (window, strides,
// dilations, pads, or an empty shape the implicit path handles).
func (g *Conv2D) winoForwardConv() (winoConv, bool) {
	if !g.winoApplies() {
		return winoConv{}, false
	}
	return winoConvOf(g.N, g.C, g.H, g.W, g.M, g.OH, g.OW, g.PadTop, g.PadLeft)
}

// winoInputGradConv returns the Winograd geometry of g's input gradient:
// dy (n, M, OH, OW) correlated with the flipped, transposed kernel from
// begin pads 2−PadTop, 2−PadLeft into dx (n, C, H, W).
func (g *Conv2D) winoInputGradConv() (winoConv, bool) {
	if !g.winoApplies() {
		return winoConv{}, false
	}
	return winoConvOf(g.N, g.M, g.OH, g.OW, g.C, g.H, g.W, 2-g.PadTop, 2-g.PadLeft)
}

// winoApplies reports whether the transform computes g's forward product
// and input gradient: a 3×3 stride-1 window whose pads, begin and end,
// are 0..winoMaxPad on every side.
func (g *Conv2D) winoApplies() bool {
	if !g.winograd3x3() {
		return false
	}
	for _, p := range [4]int{g.PadTop, g.PadLeft, g.OH + 2 - g.H - g.PadTop, g.OW + 2 - g.W - g.PadLeft} {
		if p < 0 || p > winoMaxPad {
			return false
		}
	}
	return true
}

// winoConvOf lays out the tiles and blocks of a correlation.
func winoConvOf(n, c, h, w, m, oh, ow, pt, pl int) (winoConv, bool) {
	if n <= 0 || c <= 0 || h <= 0 || w <= 0 || m <= 0 || oh <= 0 || ow <= 0 {
		return winoConv{}, false
	}
	mr, nr := gemm.KernelShape()
	cv := winoConv{n: n, c: c, h: h, w: w, m: m, oh: oh, ow: ow, pt: pt, pl: pl, mr: mr, nr: nr}
	cv.th, cv.tw = (oh+1)/2, (ow+1)/2
	cv.tiles = n * cv.th * cv.tw
	cv.hp, cv.wp = 2*cv.th+2, 2*cv.tw+2
	cv.mp = (m + mr - 1) / mr * mr
	// A block's transformed inputs and products (16 positions of
	// c + mp values per tile) take about winoBlockFloats: they stay in
	// L2 between the transforms and the products.
	tb := winoBlockFloats / (16 * (c + cv.mp)) / nr * nr
	least := winoMinBlock(c, nr)
	tb = max(least, min(tb, winoMaxBlock))
	// Enough blocks for every worker to get a few.
	workers := kern.Workers()
	for tb > least && (cv.tiles+tb-1)/tb < 4*workers {
		tb -= nr
	}
	cv.tb = tb
	cv.us, cv.vs, cv.ps = cv.mp*c+winoSkew, c*tb+winoSkew, cv.mp*tb+winoSkew
	cv.blocks = (cv.tiles + tb - 1) / tb
	return cv, true
}

const (
	// winoSkew is the floats (a cache line) added to each position's
	// stride.
	winoSkew = 16
	// winoBlockFloats is the scratch of one block, in floats (384 KiB).
	winoBlockFloats = 96 << 10
	// winoMaxBlock caps a block's tiles.
	winoMaxBlock = 256
)

// winoMinBlock is the fewest tiles of a block over c channels: one B
// strip (nr tiles), or two where the GEMM has its AVX-512 pair kernel and
// the channels are one of its k blocks, so that gemm.PackedBlock runs the
// 16 products two strips at a time (each A strip read once for both).
// Above 128 channels the budget of winoBlockFloats leaves one strip, and
// the 16 products then ran the 6×16 kernel alone, reading each transformed
// kernel from L2 once per 16 tiles: ResNet-50's 128-channel 28×28 and
// 256-channel 14×14 layers at batch 8 took 10.1–10.5 and 9.5–11.1 ms per
// forward call on one core with one strip, 6.8–7.8 and 6.3–6.7 with two
// (BenchmarkWinogradResNet50, docs/large-models.md). With the AVX2 kernel
// alone a second strip gained nothing, and one is kept.
func winoMinBlock(c, nr int) int {
	if gemm.PackedBlockPairs(c) {
		return 2 * nr
	}
	return nr
}

// uSize is the size of the transformed kernels: 16 positions of mp × c.
func (cv *winoConv) uSize() int { return 16 * cv.us }

// workerSize is one worker's scratch: the block's transformed inputs (16
// positions of c × tb) and its products (16 positions of mp × tb).
func (cv *winoConv) workerSize() int { return 16*cv.vs + 16*cv.ps }

// winoUse reports whether policy p sends a convolution of geometry cv
// (a forward product or an input gradient: the same boundaries for both)
// through the transform.
func winoUse(p WinogradPolicy, cv *winoConv) bool { return winogradTakes(p, winoAuto(cv)) }

// winoAuto is WinogradAuto's choice: the transform where it measured
// faster than the implicit GEMM (BenchmarkWinogradResNet18 and
// BenchmarkWinogradShapes, on one core and on two of a 2-core AVX2
// machine, batch 32): ResNet-18's 3×3 layers at 64×64 from 16×16 down to
// 4×4, 128 tiles and more (1.5-2× the implicit GEMM on one core, 1.4-1.8×
// on two), and 512 channels at 4×4 (1.3-2×).
//
// The transformed kernels (16 values per channel pair, 64·c·m bytes)
// are written and read once per call, and every block of tiles reads all
// of them: with few tiles they cost as much as the products save. Below
// winoAutoTiles tiles it is not taken: ResNet-18's 512-channel 2×2 layer
// (32 tiles) runs at 1.4× the implicit GEMM on one core but 0.8× on two,
// and its input gradient, whose kernel transform reads w across its
// rows, at 0.5-0.9×; 256 channels at 2×2 break even on two cores. Nor
// below 8 channels in or out (not measured).
//
// Nor where edge tiles waste too much of the transform: it must save at
// least a third of the direct product's multiplications (9 per output,
// against 16 per tile of up to 4 outputs), which rules out outputs of one
// row or column and of 3×3.
//
// And it must save half: ResNet-50's 512-channel 7×7 layer at batch 8
// (42% saved, edge tiles of one row and column) ran at 104 GFLOP/s
// forward and 87 for the input gradient through it against 128 and 129
// through the implicit GEMM on one core of an AVX-512 Xeon. The AVX2
// kernel once kept it (on that Xeon, 1.3-1.5× slower than its AVX-512
// kernel, the transform still won forward, 105 against 93), but on the
// Zen 4 EPYC, whose AVX2 GEMM runs at its AVX-512 rate, the input
// gradient through the transform ran at 0.57-0.63 of the 2048³ GEMM in
// ResNet-50's step against 0.85-0.88 through the implicit GEMM, the
// forward pass at 0.80-0.91 against 0.86-0.89 (ONNXTRAIN_NO_AVX512=1,
// two alternations, 6 December 2026). Its 14×14, 28×28 and 56×56 layers
// (56% saved) gain 1.5, 1.3 and 1.1× with either kernel
// (BenchmarkWinogradResNet50, docs/large-models.md).
func winoAuto(cv *winoConv) bool {
	if cv.c < 8 || cv.m < 8 || cv.tiles < winoAutoTiles {
		return false
	}
	return 9*cv.oh*cv.ow >= 2*16*cv.th*cv.tw
}

// winoAutoTiles is the fewest tiles WinogradAuto takes the transform for.
const winoAutoTiles = 64

// winoCalls counts the products run through the transform.
var winoCalls atomic.Int64

// WinogradCalls returns how many forward products and input gradients
// have run through the Winograd transform since the process started:
// tests check with it that a model's convolutions reach the transform.
func WinogradCalls() int64 { return winoCalls.Load() }

// winoForward computes g's forward product through the transform when g
// qualifies and the policy chooses it, and reports whether it did.
func (g *Conv2D) winoForward(x, w, y []float32, accumulate bool) bool {
	cv, ok := g.winoForwardConv()
	if !ok || !winoUse(g.Winograd, &cv) {
		return false
	}
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	winoCalls.Add(1)
	winoRun(&cv, x, w, y, beta, false)
	return true
}

// winoInputGrad computes g's input gradient through the transform when g
// qualifies and the policy chooses it, and reports whether it did.
func (g *Conv2D) winoInputGrad(dy, w, dx []float32) bool {
	cv, ok := g.winoInputGradConv()
	if !ok || !winoUse(g.Winograd, &cv) {
		return false
	}
	winoCalls.Add(1)
	winoRun(&cv, dy, w, dx, 0, true)
	return true
}

// winoTask is one Winograd call in flight, pooled so that the fan-out
// allocates nothing. Phase winoPhasePrepare transforms the kernels (the
// first kernelItems items) and copies the image into
// zero-bordered planes (the other items: winoPadPlanes planes each);
// phase winoPhaseTiles runs the blocks of tiles.
type winoTask struct {
	cv      winoConv
	x, w, y []float32
	u, xp   []float32
	buf     []float32
	beta    float32
	grad    bool
	phase   int
	items   int
	next    atomic.Int64
	// Per worker, tb each: the padded-image offset of each tile's
	// patch (channel 0), the output offset of its top-left output
	// (channel 0), and its output rows and columns inside the image.
	inOff, outOff []int
	outRows       []int8
	outCols       []int8
}

const (
	winoPhasePrepare = iota
	winoPhaseTiles
)

// winoPadPlanes is how many planes one padding item copies.
const winoPadPlanes = 16

var winoTaskPool = sync.Pool{New: func() any { return new(winoTask) }}

// winoRun computes y = correlation (or y = beta·y + correlation) of x with
// the kernels w: (m, c, 3, 3) as given (forward) or, with grad, the
// transposed flipped kernels of w laid out (c, m, 3, 3) for the
// convolution whose input gradient this is.
func winoRun(cv *winoConv, x, w, y []float32, beta float32, grad bool) {
	workers := kern.Workers()
	per := cv.workerSize()
	us, xs := cv.uSize(), cv.n*cv.c*cv.hp*cv.wp
	buf := scratch[float32](us + xs + workers*per)
	defer release(buf)

	t := winoTaskPool.Get().(*winoTask)
	t.cv, t.x, t.w, t.y, t.beta, t.grad = *cv, x, w, y, beta, grad
	t.u, t.xp, t.buf = buf[:us], buf[us:us+xs], buf[us+xs:]
	n := workers * cv.tb
	t.inOff, t.outOff = kern.Grow(t.inOff, n), kern.Grow(t.outOff, n)
	if cap(t.outRows) < n {
		t.outRows, t.outCols = make([]int8, n), make([]int8, n)
	}
	t.outRows, t.outCols = t.outRows[:n], t.outCols[:n]

	pads := (cv.n*cv.c + winoPadPlanes - 1) / winoPadPlanes
	prep := t.kernelItems() + pads
	t.run(winoPhasePrepare, prep, nnWorkers(prep, 32*cv.mr*cv.c))
	t.run(winoPhaseTiles, cv.blocks, min(workers, cv.blocks))

	t.x, t.w, t.y, t.u, t.xp, t.buf = nil, nil, nil, nil, nil, nil
	winoTaskPool.Put(t)
}

// run runs items of a phase on workers chunks, items handed out as
// workers free up.
func (t *winoTask) run(phase, items, workers int) {
	t.phase, t.items = phase, items
	t.next.Store(0)
	if workers <= 1 {
		t.Chunk(0, 1)
		return
	}
	kern.RunTask("nn", workers, workers, t)
}

// Chunk runs workers [lo, hi) of the current phase.
func (t *winoTask) Chunk(lo, hi int) {
	kernels := t.kernelItems()
	for wk := lo; wk < hi; wk++ {
		for {
			i := int(t.next.Add(1) - 1)
			if i >= t.items {
				break
			}
			switch {
			case t.phase == winoPhaseTiles:
				t.block(wk, i)
			case i < kernels:
				t.kernels(i)
			default:
				t.pad(i - kernels)
			}
		}
	}
}

// pad copies planes [it·winoPadPlanes, …) of x into the zero-bordered
// planes of xp (hp × wp, the image at row pt, column pl), which hold
// every tile's whole patch.
func (t *winoTask) pad(it int) {
	cv := &t.cv
	plane := cv.hp * cv.wp
	for p := it * winoPadPlanes; p < min((it+1)*winoPadPlanes, cv.n*cv.c); p++ {
		dst := t.xp[p*plane : (p+1)*plane]
		src := t.x[p*cv.h*cv.w : (p+1)*cv.h*cv.w]
		clear(dst[:cv.pt*cv.wp])
		// The pads are at most winoMaxPad wide and the rows short:
		// zeroed in place rather than through clear's call.
		for r := 0; r < cv.h; r++ {
			row := dst[(cv.pt+r)*cv.wp : (cv.pt+r+1)*cv.wp]
			for i := range cv.pl {
				row[i] = 0
			}
			copy(row[cv.pl:cv.pl+cv.w], src[r*cv.w:(r+1)*cv.w])
			for i := cv.pl + cv.w; i < len(row); i++ {
				row[i] = 0
			}
		}
		clear(dst[(cv.pt+cv.h)*cv.wp:])
	}
}

// winoKernelTransform writes G·g·Gᵀ of the 3×3 kernel g (row-major) into
// u (4×4, row-major).
func winoKernelTransform(g *[9]float32, u *[16]float32) {
	// Rows: t = G·g (4×3).
	var t [12]float32
	for j := 0; j < 3; j++ {
		g0, g1, g2 := g[j], g[3+j], g[6+j]
		s := 0.5 * (g0 + g2)
		t[j] = g0
		t[3+j] = s + 0.5*g1
		t[6+j] = s - 0.5*g1
		t[9+j] = g2
	}
	for i := 0; i < 4; i++ {
		t0, t1, t2 := t[3*i], t[3*i+1], t[3*i+2]
		s := 0.5 * (t0 + t2)
		u[4*i] = t0
		u[4*i+1] = s + 0.5*t1
		u[4*i+2] = s - 0.5*t1
		u[4*i+3] = t2
	}
}

// winoFlip maps a transformed position of the kernel to the same position
// of the flipped kernel's transform (rows and columns 0 and 3 swapped).
var winoFlip = [4]int{3, 1, 2, 0}

// kernelItems is how many work items transform the kernels: one A strip
// each for the forward product, whose strips read contiguous rows of w;
// for an input gradient, whose strips would each read a few values from
// every output channel's row of w, winoGradChunk shared indices (output
// channels) each, over every strip.
func (t *winoTask) kernelItems() int {
	if t.grad {
		return (t.cv.c + winoGradChunk - 1) / winoGradChunk
	}
	return t.cv.mp / t.cv.mr
}

// winoGradChunk is the output channels one kernel item of an input
// gradient transforms (for every strip).
const winoGradChunk = 8

// kernels runs kernel item it (see kernelItems).
func (t *winoTask) kernels(it int) {
	if !t.grad {
		t.kernelStrip(it, 0, t.cv.c)
		return
	}
	q0, q1 := it*winoGradChunk, min((it+1)*winoGradChunk, t.cv.c)
	for s := 0; s < t.cv.mp/t.cv.mr; s++ {
		t.kernelStrip(s, q0, q1)
	}
}

// kernelStrip transforms shared indices [q0, q1) of A strip s of the
// kernels: rows s·mr.. of U (output channels of the correlation), into
// U[ξ][s] (packed A, k-major). Rows past m are zero.
func (t *winoTask) kernelStrip(s, q0, q1 int) {
	cv := &t.cv
	mr, k := cv.mr, cv.c
	us := cv.us // one position
	rows := min(mr, cv.m-s*mr)
	if winoAVX2 && mr == 6 {
		var pos [16]int
		for a := 0; a < 4; a++ {
			for b := 0; b < 4; b++ {
				if t.grad {
					pos[4*a+b] = (4*winoFlip[a] + winoFlip[b]) * us
				} else {
					pos[4*a+b] = (4*a + b) * us
				}
			}
		}
		dst := t.u[s*mr*k+q0*mr:]
		if t.grad {
			q0 += winoKernels(dst, &pos, t.w[q0*cv.m*9+s*mr*9:], 9, cv.m*9, rows, q1-q0)
		} else {
			q0 += winoKernels(dst, &pos, t.w[s*mr*k*9+q0*9:], k*9, 9, rows, q1-q0)
		}
	}
	var g [9]float32
	var u [16]float32
	for q := q0; q < q1; q++ {
		for i := 0; i < mr; i++ {
			at := s*mr*k + q*mr + i
			if i >= rows {
				for xi := 0; xi < 16; xi++ {
					t.u[xi*us+at] = 0
				}
				continue
			}
			r := s*mr + i
			if !t.grad {
				// Forward: U[ξ][r][q] = (G·w[r, q]·Gᵀ)[ξ].
				g = [9]float32(t.w[(r*k+q)*9 : (r*k+q)*9+9])
				winoKernelTransform(&g, &u)
				for xi := 0; xi < 16; xi++ {
					t.u[xi*us+at] = u[xi]
				}
				continue
			}
			// Input gradient: row r is an input channel of the
			// convolution, q one of its output channels (w is
			// (k, m, 3, 3)), and the kernel is flipped.
			g = [9]float32(t.w[(q*cv.m+r)*9 : (q*cv.m+r)*9+9])
			winoKernelTransform(&g, &u)
			for a := 0; a < 4; a++ {
				for b := 0; b < 4; b++ {
					t.u[(4*a+b)*us+at] = u[4*winoFlip[a]+winoFlip[b]]
				}
			}
		}
	}
}

// block runs block b of tiles on worker wk: input transform, the 16
// products, output transform.
func (t *winoTask) block(wk, b int) {
	cv := &t.cv
	t0 := b * cv.tb
	nt := min(cv.tb, cv.tiles-t0)
	ns := (nt + cv.nr - 1) / cv.nr
	per := cv.workerSize()
	ws := t.buf[wk*per : (wk+1)*per]
	vs, ps := cv.vs, cv.ps
	v, p := ws[:16*vs], ws[16*vs:]
	w0, w1 := wk*cv.tb, (wk+1)*cv.tb
	inOff, outOff := t.inOff[w0:w1], t.outOff[w0:w1]
	rows, cols := t.outRows[w0:w1], t.outCols[w0:w1]
	perImage := cv.th * cv.tw
	plane := cv.hp * cv.wp
	for j := 0; j < nt; j++ {
		n, r := (t0+j)/perImage, (t0+j)%perImage
		ty, tx := r/cv.tw, r%cv.tw
		inOff[j] = n*cv.c*plane + 2*ty*cv.wp + 2*tx
		outOff[j] = n*cv.m*cv.oh*cv.ow + 2*ty*cv.ow + 2*tx
		rows[j], cols[j] = int8(min(2, cv.oh-2*ty)), int8(min(2, cv.ow-2*tx))
	}
	t.inputBlock(v, inOff, nt, ns)
	for xi := 0; xi < 16; xi++ {
		gemm.PackedBlock(cv.mp/cv.mr, ns, cv.c, t.u[xi*cv.us:], v[xi*vs:], p[xi*ps:], cv.tb, 0)
	}
	t.outputBlock(p, outOff, rows, cols, nt)
}

// inputBlock writes the transformed input patches of the block's nt tiles
// (patch offsets off) into v: position ξ at v[ξ·vs:], as ns packed B
// strips of nr tiles over every channel (tiles past nt zero).
func (t *winoTask) inputBlock(v []float32, off []int, nt, ns int) {
	cv := &t.cv
	nr, c := cv.nr, cv.c
	vs := cv.vs
	plane, wp := cv.hp*cv.wp, cv.wp
	var d [16]float32
	for s := 0; s < ns; s++ {
		if winoAVX2 && nr == 16 && (s+1)*nr <= nt {
			// The whole strip in one pass over the channels.
			winoInput(v[s*nr*c:], vs, t.xp, off[s*nr:(s+1)*nr], plane, wp, c, nr)
			continue
		}
		for j0 := 0; j0 < nr; j0 += 8 {
			g0 := s*nr + j0
			if winoAVX2 && nr%8 == 0 && g0+8 <= nt {
				winoInput(v[s*nr*c+j0:], vs, t.xp, off[g0:g0+8], plane, wp, c, nr)
				continue
			}
			for j := j0; j < min(j0+8, nr); j++ {
				tile := s*nr + j
				for ch := 0; ch < c; ch++ {
					at := s*nr*c + ch*nr + j
					if tile >= nt {
						for xi := 0; xi < 16; xi++ {
							v[xi*vs+at] = 0
						}
						continue
					}
					o := off[tile] + ch*plane
					x := t.xp
					*(*[4]float32)(d[0:4]) = *(*[4]float32)(x[o : o+4])
					*(*[4]float32)(d[4:8]) = *(*[4]float32)(x[o+wp : o+wp+4])
					*(*[4]float32)(d[8:12]) = *(*[4]float32)(x[o+2*wp : o+2*wp+4])
					*(*[4]float32)(d[12:16]) = *(*[4]float32)(x[o+3*wp : o+3*wp+4])
					winoInputTransform(&d, v[at:], vs)
				}
			}
		}
	}
}

// winoInputTransform writes Bᵀ·d·B (d a 4×4 patch, row-major) to
// v[0], v[stride], …, v[15·stride].
func winoInputTransform(d *[16]float32, v []float32, stride int) {
	// Columns first: r = Bᵀ·d (combine rows).
	var r [16]float32
	for k := 0; k < 4; k++ {
		d0, d1, d2, d3 := d[k], d[4+k], d[8+k], d[12+k]
		r[k] = d0 - d2
		r[4+k] = d1 + d2
		r[8+k] = d2 - d1
		r[12+k] = d1 - d3
	}
	_ = v[15*stride]
	for i := 0; i < 4; i++ {
		r0, r1, r2, r3 := r[4*i], r[4*i+1], r[4*i+2], r[4*i+3]
		v[(4*i)*stride] = r0 - r2
		v[(4*i+1)*stride] = r1 + r2
		v[(4*i+2)*stride] = r2 - r1
		v[(4*i+3)*stride] = r1 - r3
	}
}

// outputBlock turns the products of the block's nt tiles (position ξ at
// p[ξ·ps:], row m, column tile) into the outputs at off (rows and cols
// of each inside the image): y = Aᵀ·M·A, or y = beta·y + Aᵀ·M·A.
func (t *winoTask) outputBlock(p []float32, off []int, rows, cols []int8, nt int) {
	cv := &t.cv
	ps := cv.ps
	oplane := cv.oh * cv.ow
	ow := cv.ow
	beta := t.beta
	y := t.y
	for j0 := 0; j0 < nt; j0 += 8 {
		if winoAVX2 && j0+8 <= nt && (beta == 0 || beta == 1) {
			full := true
			for j := j0; j < j0+8; j++ {
				full = full && rows[j] == 2 && cols[j] == 2
			}
			if full {
				winoOutput8(y, off[j0:j0+8], p[j0:], ps, cv.tb, oplane, ow, cv.m, beta == 1, off[min(j0+8, nt):min(j0+16, nt)])
				continue
			}
		}
		for j := j0; j < min(j0+8, nt); j++ {
			for m := 0; m < cv.m; m++ {
				var q [16]float32
				pm := p[m*cv.tb+j:]
				for xi := 0; xi < 16; xi++ {
					q[xi] = pm[xi*ps]
				}
				// s = Aᵀ·M (2×4), then s·A (2×2).
				var s [8]float32
				for k := 0; k < 4; k++ {
					m0, m1, m2, m3 := q[k], q[4+k], q[8+k], q[12+k]
					s[k] = m0 + m1 + m2
					s[4+k] = m1 - m2 - m3
				}
				vals := [4]float32{s[0] + s[1] + s[2], s[1] - s[2] - s[3], s[4] + s[5] + s[6], s[5] - s[6] - s[7]}
				at := off[j] + m*oplane
				for a := 0; a < int(rows[j]); a++ {
					for b := 0; b < int(cols[j]); b++ {
						i := at + a*ow + b
						if beta == 0 {
							y[i] = vals[2*a+b]
						} else {
							y[i] = beta*y[i] + vals[2*a+b]
						}
					}
				}
			}
		}
	}
}
