package distrib

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync/atomic"
)

// The ring algorithms run as two goroutines per collective: one sends to
// rank+1, one receives from rank-1. Each works through a list of items (a
// chunk of a segment); an item may depend on an item of the other list
// (forward a chunk only once it has arrived and been reduced; overwrite a
// chunk only once it has been sent), so chunks of consecutive ring steps
// overlap and the link never waits for a whole segment.

// fitem is a chunk of a float32 buffer to send or receive.
type fitem struct {
	off, n int
	dep    int  // index of the item of the other list that must be done first, or -1
	reduce bool // receive: add into the buffer (else overwrite)
	final  bool // receive: the last contribution to these elements
}

type fplan struct {
	hdr          header
	buf          []float32
	sends, recvs []fitem
	bf16         bool    // bfloat16 on the wire
	divide       float32 // divide final elements by this (Mean); 0: no
	roundFinal   bool    // round final elements to bfloat16 (so the owner matches what the others receive)
}

// ringStep is one step of a ring algorithm: the segment sent and the
// segment received, and the steps (of the other list) they wait for.
type ringStep struct {
	sendSeg, recvSeg int
	sendDep, recvDep int // step index, or -1
	reduce, final    bool
}

func mod(a, n int) int {
	a %= n
	if a < 0 {
		a += n
	}
	return a
}

// balanced returns the bounds of segment j of n elements cut in parts
// pieces whose sizes differ by at most one.
func balanced(n, parts int) func(int) (int, int) {
	return func(j int) (int, int) {
		return int(int64(j) * int64(n) / int64(parts)), int(int64(j+1) * int64(n) / int64(parts))
	}
}

func blocks(m int) func(int) (int, int) {
	return func(j int) (int, int) { return j * m, (j + 1) * m }
}

// buildRing turns ring steps into chunked items. A dependency on step s of
// the other list means the same chunk of that step (the same segment).
func (g *Group) buildRing(bounds func(int) (int, int), steps []ringStep) (sends, recvs []fitem) {
	ce := g.chunkElems
	sendBase := make([]int, len(steps))
	recvBase := make([]int, len(steps))
	for s, st := range steps {
		sendBase[s] = len(sends)
		lo, hi := bounds(mod(st.sendSeg, g.size))
		for c, off := 0, lo; off < hi; c, off = c+1, off+ce {
			dep := -1
			if st.sendDep >= 0 {
				dep = recvBase[st.sendDep] + c
			}
			sends = append(sends, fitem{off: off, n: min(ce, hi-off), dep: dep})
		}
		recvBase[s] = len(recvs)
		lo, hi = bounds(mod(st.recvSeg, g.size))
		for c, off := 0, lo; off < hi; c, off = c+1, off+ce {
			dep := -1
			if st.recvDep >= 0 {
				dep = sendBase[st.recvDep] + c
			}
			recvs = append(recvs, fitem{off: off, n: min(ce, hi-off), dep: dep, reduce: st.reduce, final: st.final})
		}
	}
	return sends, recvs
}

// reduceScatterSteps: at step s rank r sends segment r-s-1 (its partial
// sum) and receives segment r-s-2, adding its own values; after N-1 steps
// it holds the complete segment r. Segment j is summed in the order
// x[j+1] + x[j+2] + ... + x[j], the same on every rank.
func (g *Group) reduceScatterSteps() []ringStep {
	n, r := g.size, g.rank
	steps := make([]ringStep, 0, 2*(n-1))
	for s := 0; s < n-1; s++ {
		steps = append(steps, ringStep{sendSeg: r - s - 1, recvSeg: r - s - 2, sendDep: s - 1, recvDep: -1, reduce: true, final: s == n-2})
	}
	return steps
}

// allGatherSteps: at step t rank r sends segment r-t and receives segment
// r-t-1. base is the index of the first step (after a reduce-scatter);
// afterRS says the received segments were sent during the reduce-scatter
// and must not be overwritten before.
func (g *Group) allGatherSteps(steps []ringStep, afterRS bool) []ringStep {
	n, r := g.size, g.rank
	base := len(steps)
	for t := 0; t < n-1; t++ {
		st := ringStep{sendSeg: r - t, recvSeg: r - t - 1, sendDep: base + t - 1, recvDep: -1}
		if !afterRS && t == 0 {
			st.sendDep = -1
		}
		if afterRS {
			st.recvDep = t // reduce-scatter step t sent segment r-t-1
		}
		steps = append(steps, st)
	}
	return steps
}

func (g *Group) allReducePlan(c *call, data []float32, op ReduceOp, bf16 bool) *fplan {
	p := &fplan{hdr: c.header(opAllReduce, len(data), -1, bf16), buf: data, bf16: bf16, roundFinal: bf16}
	if op == Mean {
		p.divide = float32(g.size)
	}
	p.sends, p.recvs = g.buildRing(balanced(len(data), g.size), g.allGatherSteps(g.reduceScatterSteps(), true))
	return p
}

func (g *Group) reduceScatterPlan(c *call, data []float32, op ReduceOp, bf16 bool) *fplan {
	p := &fplan{hdr: c.header(opReduceScatter, len(data), -1, bf16), buf: data, bf16: bf16}
	if op == Mean {
		p.divide = float32(g.size)
	}
	p.sends, p.recvs = g.buildRing(blocks(len(data)/g.size), g.reduceScatterSteps())
	return p
}

func (g *Group) allGatherPlan(c *call, data []float32, m int) *fplan {
	p := &fplan{hdr: c.header(opAllGather, m, -1, false), buf: data}
	p.sends, p.recvs = g.buildRing(blocks(m), g.allGatherSteps(nil, false))
	return p
}

// broadcastPlan: a pipelined chain root → root+1 → ... → root-1.
func (g *Group) broadcastPlan(c *call, data []float32, root int) *fplan {
	p := &fplan{hdr: c.header(opBroadcast, len(data), root, false), buf: data}
	pos := mod(g.rank-root-1, g.size) // root is last
	for i, off := 0, 0; off < len(data); i, off = i+1, off+g.chunkElems {
		it := fitem{off: off, n: min(g.chunkElems, len(data)-off), dep: -1}
		if g.rank == root {
			p.sends = append(p.sends, it)
			continue
		}
		p.recvs = append(p.recvs, it)
		if pos < g.size-2 {
			it.dep = i
			p.sends = append(p.sends, it)
		}
	}
	return p
}

// progress counts the items one side has finished; the other side waits
// on it.
type progress struct {
	n    atomic.Int64
	wake chan struct{}
}

func newProgress() *progress { return &progress{wake: make(chan struct{}, 1)} }

func (p *progress) add() {
	p.n.Add(1)
	notify(p.wake)
}

// wait returns once need items are done, or false when the call fails.
func (p *progress) wait(need int64, abort <-chan struct{}) bool {
	for p.n.Load() < need {
		select {
		case <-p.wake:
		case <-abort:
			return false
		}
	}
	return true
}

// linkWriter sends the collective's header together with its first
// payload (one writev).
type linkWriter struct {
	conn    net.Conn
	pending []byte
}

func (w *linkWriter) write(parts ...[]byte) error {
	if w.pending == nil && len(parts) == 1 {
		_, err := w.conn.Write(parts[0])
		return err
	}
	bufs := make(net.Buffers, 0, len(parts)+1)
	if w.pending != nil {
		bufs = append(bufs, w.pending)
		w.pending = nil
	}
	bufs = append(bufs, parts...)
	_, err := bufs.WriteTo(w.conn)
	return err
}

func (w *linkWriter) flush() error {
	if w.pending == nil {
		return nil
	}
	_, err := w.conn.Write(w.pending)
	w.pending = nil
	return err
}

func (g *Group) nextRank() int { return (g.rank + 1) % g.size }
func (g *Group) prevRank() int { return (g.rank + g.size - 1) % g.size }

// ioFailure describes a failed read from rank-1 or write to rank+1.
func (g *Group) ioFailure(err error, recv bool) *localFailure {
	peer := g.nextRank()
	if recv {
		peer = g.prevRank()
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		if recv {
			return &localFailure{suspect: peer, kind: kindTimeout, detail: fmt.Sprintf("no data from rank %d", peer)}
		}
		return &localFailure{suspect: peer, kind: kindTimeout, detail: fmt.Sprintf("rank %d took no data", peer)}
	default:
		return &localFailure{suspect: peer, kind: kindPeerLost, detail: fmt.Sprintf("its connection to rank %d %s", g.rank, connLoss(err))}
	}
}

// checkHeader reads rank-1's header and compares it with this rank's.
func (g *Group) checkHeader(c *call, want header) bool {
	var hb [headerSize]byte
	if _, err := io.ReadFull(g.prev, hb[:]); err != nil {
		c.fail(g.ioFailure(err, true))
		return false
	}
	got, err := decodeHeader(hb[:])
	if err != nil {
		c.fail(&localFailure{suspect: g.prevRank(), kind: kindMismatch, detail: fmt.Sprintf("rank %d: %v", g.prevRank(), err)})
		return false
	}
	if got != want {
		c.fail(&localFailure{suspect: g.prevRank(), kind: kindMismatch,
			detail: fmt.Sprintf("rank %d is in %s but rank %d is in %s", g.prevRank(), got.describe(), g.rank, want.describe())})
		return false
	}
	return true
}

// pieceElems bounds a read before its reduction, so the received bytes are
// still in cache when they are added.
const pieceElems = 16 << 10

func (g *Group) ensureScratch() {
	if g.sendU16 == nil {
		g.sendU16 = make([]uint16, g.chunkElems)
		g.recvU16 = make([]uint16, min(g.chunkElems, pieceElems))
		g.recvF32 = make([]float32, min(g.chunkElems, pieceElems))
	}
}

// ringItems is one collective's traffic on the ring: items to send to
// rank+1 and items to receive from rank-1, where an item may wait for an
// item of the other list (see fplan and bplan).
type ringItems interface {
	header() header
	counts() (sends, recvs int)
	// sendDep and recvDep return the index of the item of the other list
	// that must be done first, or -1.
	sendDep(i int) int
	recvDep(i int) int
	send(g *Group, w *linkWriter, i int) error
	// recv returns nil, or what failed.
	recv(g *Group, i int) *localFailure
}

// runRing runs a collective's items: sending in a goroutine, receiving in
// this one. The header goes out with the first payload; the receiver
// checks rank-1's header before anything else.
func (g *Group) runRing(c *call, p ringItems) {
	sent, recvd := newProgress(), newProgress()
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.sendItems(c, p, sent, recvd)
	}()
	g.recvItems(c, p, sent, recvd)
	<-done
}

func (g *Group) sendItems(c *call, p ringItems, sent, recvd *progress) {
	var hb [headerSize]byte
	p.header().encode(hb[:])
	w := linkWriter{conn: g.next, pending: hb[:]}
	n, _ := p.counts()
	for i := range n {
		if d := p.sendDep(i); d >= 0 && !recvd.wait(int64(d)+1, c.abortCh) {
			return
		}
		if err := p.send(g, &w, i); err != nil {
			c.fail(g.ioFailure(err, false))
			return
		}
		sent.add()
	}
	if err := w.flush(); err != nil {
		c.fail(g.ioFailure(err, false))
	}
}

func (g *Group) recvItems(c *call, p ringItems, sent, recvd *progress) {
	if !g.checkHeader(c, p.header()) {
		return
	}
	_, n := p.counts()
	for i := range n {
		if d := p.recvDep(i); d >= 0 && !sent.wait(int64(d)+1, c.abortCh) {
			return
		}
		if f := p.recv(g, i); f != nil {
			c.fail(f)
			return
		}
		recvd.add()
	}
}

func (g *Group) runFloat(c *call, p *fplan) {
	g.ensureScratch()
	g.runRing(c, p)
}

func (p *fplan) header() header     { return p.hdr }
func (p *fplan) counts() (int, int) { return len(p.sends), len(p.recvs) }
func (p *fplan) sendDep(i int) int  { return p.sends[i].dep }
func (p *fplan) recvDep(i int) int  { return p.recvs[i].dep }
func (p *fplan) send(g *Group, w *linkWriter, i int) error {
	it := p.sends[i]
	src := p.buf[it.off : it.off+it.n]
	if p.bf16 {
		s := g.sendU16[:it.n]
		toBF16(s, src)
		return w.write(u16bytes(s))
	}
	return w.write(f32bytes(src))
}

func (p *fplan) recv(g *Group, i int) *localFailure {
	it := p.recvs[i]
	dst := p.buf[it.off : it.off+it.n]
	if err := g.recvChunk(dst, it.reduce, p.bf16); err != nil {
		return g.ioFailure(err, true)
	}
	if it.final {
		if p.divide != 0 {
			divideBy(dst, p.divide)
		}
		if p.roundFinal {
			roundBF16(dst)
		}
	}
	return nil
}

func (g *Group) recvChunk(dst []float32, reduce, bf16 bool) error {
	if !reduce && !bf16 {
		_, err := io.ReadFull(g.prev, f32bytes(dst))
		return err
	}
	for len(dst) > 0 {
		k := min(len(dst), pieceElems)
		d := dst[:k]
		if bf16 {
			s := g.recvU16[:k]
			if _, err := io.ReadFull(g.prev, u16bytes(s)); err != nil {
				return err
			}
			if reduce {
				addBF16(d, s)
			} else {
				fromBF16(d, s)
			}
		} else {
			s := g.recvF32[:k]
			if _, err := io.ReadFull(g.prev, f32bytes(s)); err != nil {
				return err
			}
			addTo(d, s)
		}
		dst = dst[k:]
	}
	return nil
}

// maxObjectBytes bounds one object of the byte collectives.
const maxObjectBytes = 1 << 36

// bitem is a whole byte block to send or receive.
type bitem struct{ block, dep int }

type bplan struct {
	hdr          header
	blocks       [][]byte
	sends, recvs []bitem
}

func (g *Group) runBytes(c *call, p *bplan) { g.runRing(c, p) }

func (p *bplan) header() header     { return p.hdr }
func (p *bplan) counts() (int, int) { return len(p.sends), len(p.recvs) }
func (p *bplan) sendDep(i int) int  { return p.sends[i].dep }
func (p *bplan) recvDep(i int) int  { return p.recvs[i].dep }

// send writes a block as its length (8 bytes, little endian) and bytes.
func (p *bplan) send(_ *Group, w *linkWriter, i int) error {
	b := p.blocks[p.sends[i].block]
	var lb [8]byte
	binary.LittleEndian.PutUint64(lb[:], uint64(len(b)))
	return w.write(lb[:], b)
}

func (p *bplan) recv(g *Group, i int) *localFailure {
	var lb [8]byte
	if _, err := io.ReadFull(g.prev, lb[:]); err != nil {
		return g.ioFailure(err, true)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n > maxObjectBytes || n > math.MaxInt {
		return &localFailure{suspect: g.prevRank(), kind: kindMismatch,
			detail: fmt.Sprintf("rank %d announced an object of %d bytes (more than %d): the ranks are out of step", g.prevRank(), n, uint64(maxObjectBytes))}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(g.prev, b); err != nil {
		return g.ioFailure(err, true)
	}
	p.blocks[p.recvs[i].block] = b
	return nil
}

// allGatherBytes: at step t rank r forwards block r-t and receives block
// r-t-1.
func (g *Group) allGatherBytes(c *call, hdr header, obj []byte) [][]byte {
	n, r := g.size, g.rank
	p := &bplan{hdr: hdr, blocks: make([][]byte, n)}
	p.blocks[r] = obj
	for t := 0; t < n-1; t++ {
		p.sends = append(p.sends, bitem{block: mod(r-t, n), dep: t - 1})
		p.recvs = append(p.recvs, bitem{block: mod(r-t-1, n), dep: -1})
	}
	g.runBytes(c, p)
	p.blocks[r] = append([]byte(nil), obj...)
	return p.blocks
}

// gatherBytes: a chain root+1 → ... → root-1 → root; each rank forwards
// what it received and adds its own block.
func (g *Group) gatherBytes(c *call, obj []byte, root int) [][]byte {
	n, r := g.size, g.rank
	p := &bplan{hdr: c.header(opGatherObject, 0, root, false), blocks: make([][]byte, n)}
	pos := mod(r-root-1, n) // root is last
	for i := 0; i < pos; i++ {
		p.recvs = append(p.recvs, bitem{block: mod(root+1+i, n), dep: -1})
		if r != root {
			p.sends = append(p.sends, bitem{block: mod(root+1+i, n), dep: i})
		}
	}
	if r != root {
		p.blocks[r] = obj
		p.sends = append(p.sends, bitem{block: r, dep: -1})
	}
	g.runBytes(c, p)
	if r != root {
		return nil
	}
	p.blocks[r] = append([]byte(nil), obj...)
	return p.blocks
}

// broadcastBytes: a chain root → root+1 → ... → root-1.
func (g *Group) broadcastBytes(c *call, obj []byte, root int) []byte {
	p := &bplan{hdr: c.header(opBroadcastObject, 0, root, false), blocks: make([][]byte, 1)}
	if g.rank == root {
		p.blocks[0] = obj
		p.sends = []bitem{{block: 0, dep: -1}}
	} else {
		p.recvs = []bitem{{block: 0, dep: -1}}
		if mod(g.rank-root-1, g.size) < g.size-2 {
			p.sends = []bitem{{block: 0, dep: 0}}
		}
	}
	g.runBytes(c, p)
	return p.blocks[0]
}
