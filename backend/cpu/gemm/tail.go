package gemm

import (
	"runtime"
	"sync/atomic"
)

// The shared tail of a split product.
//
// A product split over the cores (splitBlocks, splitK) gives each core an
// equal piece, and the call lasts as long as its slowest piece. On a
// 2-vCPU guest the two cores do not run equal work at equal speed: in a
// ViT-B/16 training step the pieces of a split product ended on average
// 0.2-0.8 ms apart (about 4% of each product), one core or the other
// later at random, so that one core idled for ~70 ms of every 2 s step.
// Smaller static pieces would not help (each piece packs its own A or B
// panel, and the lag is not known in advance), so each piece instead
// shares its last k block: the rows of that block are claimed in units of
// a few micro-kernel strips from one counter, by the piece's own
// goroutine and by any other piece's goroutine that has run out of work.
// The packed B panel of the block is the owner's; a thief packs its own
// A rows. Each tile of C is computed by the same kernel calls from the
// same packed values whoever claims it, so the result is bit for bit the
// unshared one.

// Share states.
const (
	shareIdle    = iota // not started (or a previous call's)
	shareRunning        // its owner runs the blocks before the tail
	shareOpen           // the tail's rows are being claimed
	shareDone           // nothing left to claim
)

// tailShare is one piece's last k block, open to other goroutines.
type tailShare struct {
	state atomic.Int32
	// next is the first row not yet claimed.
	next atomic.Int64
	// active counts the other goroutines inside work: the owner waits
	// for none before it releases the packed panel.
	active atomic.Int32
	// Set by the owner before the share opens (copies of its problem or
	// packed product: a pointer would make every caller's escape to the
	// heap). packed tells which one the tail's units run through.
	p                       problem
	pp                      PackedProduct
	packed, stream          bool
	mk                      microKernel
	bp                      []float32
	end, jc, ncur, pc, kcur int
	unit                    int
	beta                    float32
}

// tailSteals counts the units computed by a goroutine other than their
// piece's owner (tests check that stealing happens).
var tailSteals atomic.Int64

// tailOpenHook, when set (by tests), is called by each piece's owner
// once its tail is open, before it claims a unit.
var tailOpenHook func()

// tailUnit is the rows of a claim: a quarter of the block height mc, in
// whole strips. The claims re-read the owner's packed B panel from L2/L3
// once per unit, which at a few strips per unit is a small fraction of
// the unit's arithmetic.
func tailUnit(mk microKernel, mc int) int {
	return max(mk.mr, (mc/4+mk.mr-1)/mk.mr*mk.mr)
}

// start marks the share running (its owner's goroutine holds it); a nil
// share (a product not split) is none.
func (sh *tailShare) start() {
	if sh == nil {
		return
	}
	sh.active.Store(0)
	sh.state.Store(shareRunning)
}

// open publishes the tail: rows [i0, i1) of columns [jc, jc+ncur) of C in
// the k block [pc, pc+kcur), with B packed in bp.
func (sh *tailShare) open(p *problem, mk microKernel, bp []float32, i0, i1, jc, ncur, pc, kcur, unit int, beta float32) {
	sh.p, sh.packed, sh.stream = *p, false, false
	sh.publish(mk, bp, i0, i1, jc, ncur, pc, kcur, unit, beta)
}

// openPacked is open for a PackedProduct's tail (plain is the problem
// its blocked packs plain operands with).
func (sh *tailShare) openPacked(pp *PackedProduct, plain *problem, stream bool, mk microKernel, bp []float32, i0, i1, jc, ncur, pc, kcur, unit int, beta float32) {
	sh.pp, sh.p, sh.packed, sh.stream = *pp, *plain, true, stream
	sh.publish(mk, bp, i0, i1, jc, ncur, pc, kcur, unit, beta)
}

func (sh *tailShare) publish(mk microKernel, bp []float32, i0, i1, jc, ncur, pc, kcur, unit int, beta float32) {
	sh.mk, sh.bp = mk, bp
	sh.end, sh.jc, sh.ncur, sh.pc, sh.kcur, sh.unit, sh.beta = i1, jc, ncur, pc, kcur, unit, beta
	sh.next.Store(int64(i0))
	sh.state.Store(shareOpen)
}

// run is the owner's side of an open share: its units, claimed beside
// the other goroutines', then close.
func (sh *tailShare) run(buf *buffers) {
	if tailOpenHook != nil {
		tailOpenHook()
	}
	sh.work(buf)
	sh.close()
}

// work claims and computes units until none are left, packing A into buf.
func (sh *tailShare) work(buf *buffers) int {
	p, mk, u := &sh.p, sh.mk, sh.unit
	done := 0
	for {
		ic := int(sh.next.Add(int64(u))) - u
		if ic >= sh.end {
			return done
		}
		mcur := min(u, sh.end-ic)
		if sh.packed {
			sh.pp.rowBlock(mk, buf, p, ic, mcur, sh.jc, sh.ncur, sh.pc, sh.kcur, sh.beta, sh.stream, sh.bp, nil, nil)
			done++
			continue
		}
		var next [2]Region
		if ic+u < sh.end {
			next[0] = p.aRegion(ic+u, min(u, sh.end-ic-u), sh.pc, sh.kcur)
		}
		p.rowBlock(mk, buf, sh.bp, ic, mcur, sh.jc, sh.ncur, sh.pc, sh.kcur, sh.beta, next)
		done++
	}
}

// close ends the share: once no other goroutine is inside work, the
// owner may release the panel and the problem.
func (sh *tailShare) close() {
	sh.state.Store(shareDone)
	for i := 0; sh.active.Load() > 0; i++ {
		if i&63 == 63 {
			runtime.Gosched()
		}
	}
	sh.p, sh.pp, sh.bp = problem{}, PackedProduct{}, nil // drop the operands
}

// finish marks a share done whose piece never opened it (an empty piece).
func (sh *tailShare) finish() {
	if sh != nil && sh.state.Load() == shareRunning {
		sh.state.Store(shareDone)
	}
}

// tailShares are the shares of a split product's pieces, piece w's at
// index w.
type tailShares [maxSplit]tailShare

// reset readies the shares of n pieces for a new product.
func (s *tailShares) reset(n int) {
	for w := range s[:n] {
		s[w].state.Store(shareIdle)
	}
}

// help helps the other pieces of a split product of n pieces once this
// goroutine's are done (their shares are then done, and passed over): a
// piece still running is waited for (this core has nothing else to do)
// until it opens its tail, and an open tail's units are claimed as its
// owner claims them. A piece not started is left alone: the caller of the
// split runs it once its own chunk ends, or another goroutine does.
func (s *tailShares) help(n int) {
	var buf *buffers
	for w := range s[:n] {
		sh := &s[w]
		for i := 0; ; i++ {
			st := sh.state.Load()
			if st == shareRunning {
				if i&63 == 63 {
					runtime.Gosched()
				}
				continue
			}
			if st == shareOpen {
				// Counted before the state is read again: the owner
				// marks the share done before it reads active, so
				// either it waits for this goroutine or this
				// goroutine sees it done and leaves the panel alone.
				sh.active.Add(1)
				if sh.state.Load() == shareOpen {
					if buf == nil {
						buf = bufferPool.Get().(*buffers)
					}
					if n := sh.work(buf); n > 0 {
						tailSteals.Add(int64(n))
					}
					if sh.stream {
						// The units' non-temporal stores, ordered
						// before the owner (and then Run's caller)
						// reads C, as the owner's blocked orders its own.
						storeFence()
					}
				}
				sh.active.Add(-1)
			}
			break
		}
	}
	if buf != nil {
		bufferPool.Put(buf)
	}
}
