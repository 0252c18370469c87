package distrib

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const controlWriteTimeout = 10 * time.Second

// peerConn is one control connection (rank 0 holds one per other rank;
// every other rank holds one to rank 0).
type peerConn struct {
	rank     int
	conn     net.Conn
	dataAddr string
	settings []Setting // what the rank said must agree (rank 0's view)
	wmu      sync.Mutex
}

func (p *peerConn) send(typ byte, v any) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return writeFrame(p.conn, typ, v, time.Now().Add(controlWriteTimeout))
}

// control is the control channel. Rank 0 watches every other rank's
// connection (a process that dies closes it), and when a collective fails
// anywhere it gathers the evidence (which ranks are gone, which do not
// answer a probe, which have not reached the collective) and sends every
// rank the same verdict.
type control struct {
	g *Group
	// probeWait is how long rank 0 waits for probe answers; grace is how
	// long another rank waits for rank 0's verdict after reporting.
	probeWait, grace time.Duration

	master     *peerConn // ranks > 0
	masterLeft atomic.Bool

	peers     []*peerConn // rank 0, indexed by rank
	mu        sync.Mutex
	dead      []bool
	deadWhy   []string
	left      []bool
	round     *probeRound
	nextProbe uint64
	arbMu     sync.Mutex
	// abortSent is closed once rank 0 has written its verdict to every
	// rank, so that it does not close or exit before the others heard it.
	abortSent chan struct{}
}

type probeRound struct {
	id      uint64
	replies map[int]probeReplyMsg
	wake    chan struct{}
}

func newControl(g *Group) *control {
	pw := g.timeout / 4
	pw = max(pw, 100*time.Millisecond)
	pw = min(pw, 2*time.Second)
	return &control{
		g:         g,
		probeWait: pw,
		grace:     2*pw + 250*time.Millisecond,
		abortSent: make(chan struct{}),
		dead:      make([]bool, g.size),
		deadWhy:   make([]string, g.size),
		left:      make([]bool, g.size),
	}
}

func (c *control) start() {
	if c.master != nil {
		go c.readMaster()
		return
	}
	for _, p := range c.peers[1:] {
		go c.readPeer(p)
	}
}

func lostDetail(err error) string { return "its connection " + connLoss(err) }

// connLoss says how a connection ended: "closed (the process exited or
// was killed)", or "broke (error)".
func connLoss(err error) string {
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "closed (the process exited or was killed)"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		return "was reset (the process exited or was killed)"
	}
	return fmt.Sprintf("broke (%v)", err)
}

// readMaster runs on ranks > 0.
func (c *control) readMaster() {
	g := c.g
	for {
		typ, body, err := readFrame(c.master.conn)
		if err != nil {
			if g.closed.Load() || c.masterLeft.Load() {
				return
			}
			g.setVerdict(g.lostVerdict(0, lostDetail(err)))
			return
		}
		switch typ {
		case msgAbort:
			var a abortMsg
			if err := json.Unmarshal(body, &a); err != nil {
				g.setVerdict(g.lostVerdict(0, fmt.Sprintf("it sent a malformed message (%v)", err)))
				return
			}
			g.setVerdict(&RankError{Rank: a.Rank, Op: a.Op, Seq: a.Seq, Step: a.Step, Kind: kindError(a.Kind), Msg: a.Msg})
		case msgProbe:
			var p probeMsg
			if json.Unmarshal(body, &p) == nil {
				_ = c.master.send(msgProbeReply, g.probeState(p.ID))
			}
		case msgBye:
			c.masterLeft.Store(true)
		}
	}
}

// readPeer runs on rank 0, one per other rank.
func (c *control) readPeer(p *peerConn) {
	for {
		typ, body, err := readFrame(p.conn)
		if err != nil {
			c.peerGone(p.rank, err)
			return
		}
		switch typ {
		case msgReport:
			var r reportMsg
			if json.Unmarshal(body, &r) == nil {
				go c.arbitrate(p.rank, r)
			}
		case msgProbeReply:
			var r probeReplyMsg
			if json.Unmarshal(body, &r) == nil {
				c.mu.Lock()
				if c.round != nil && c.round.id == r.ID {
					c.round.replies[p.rank] = r
					notify(c.round.wake)
				}
				c.mu.Unlock()
			}
		case msgBye:
			c.mu.Lock()
			c.left[p.rank] = true
			c.mu.Unlock()
		}
	}
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (c *control) peerGone(rank int, err error) {
	if c.g.closed.Load() {
		return
	}
	c.mu.Lock()
	if c.left[rank] {
		c.mu.Unlock()
		return
	}
	c.dead[rank] = true
	c.deadWhy[rank] = lostDetail(err)
	if c.round != nil {
		notify(c.round.wake)
	}
	c.mu.Unlock()
	c.decide(c.g.lostVerdict(rank, lostDetail(err)))
}

// decide makes v the group's verdict, unless there is one already, and
// tells every rank still there.
func (c *control) decide(v *RankError) {
	if !c.g.setVerdict(v) {
		return
	}
	msg := abortMsg{Rank: v.Rank, Kind: kindOf(v.Kind), Op: v.Op, Seq: v.Seq, Step: v.Step, Msg: v.Msg}
	c.mu.Lock()
	var targets []*peerConn
	for r := 1; r < c.g.size; r++ {
		if !c.dead[r] && !c.left[r] {
			targets = append(targets, c.peers[r])
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range targets {
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.send(msgAbort, msg) }()
	}
	wg.Wait()
	close(c.abortSent)
}

// waitAbortSent waits (on rank 0, when there is a verdict) until every rank
// was sent it.
func (c *control) waitAbortSent() {
	if c.master != nil || c.g.verdict.Load() == nil {
		return
	}
	t := time.NewTimer(controlWriteTimeout)
	defer t.Stop()
	select {
	case <-c.abortSent:
	case <-t.C:
	}
}

func kindOf(err error) int {
	for k := kindTimeout; k <= kindClosed; k++ {
		if kindError(k) == err {
			return k
		}
	}
	return 0
}

// report hands a local failure to rank 0 (or, on rank 0, judges it).
func (c *control) report(from int, rep reportMsg) {
	if c.master == nil {
		c.arbitrate(from, rep)
		return
	}
	_ = c.master.send(msgReport, rep)
}

func (c *control) arbitrate(from int, rep reportMsg) {
	c.arbMu.Lock()
	defer c.arbMu.Unlock()
	if c.g.verdict.Load() != nil {
		return
	}
	if v := c.judge(from, rep); v != nil {
		c.decide(v)
	}
}

// judge turns a report into the verdict. It returns nil when a verdict was
// reached meanwhile (a rank died while rank 0 probed).
func (c *control) judge(from int, rep reportMsg) *RankError {
	g := c.g
	desc := opDesc(rep.Op, rep.Step, rep.Seq)
	mk := func(rank, kind int, format string, args ...any) *RankError {
		return &RankError{Rank: rank, Op: rep.Op, Seq: rep.Seq, Step: rep.Step, Kind: kindError(kind), Msg: fmt.Sprintf(format, args...)}
	}
	switch rep.Kind {
	case kindMismatch:
		return mk(rep.Suspect, kindMismatch, "%s: collectives differ across ranks: %s", desc, rep.Detail)
	case kindAborted:
		return mk(rep.Suspect, kindAborted, "rank %d gave up %s: %s", rep.Suspect, desc, rep.Detail)
	case kindInvalid:
		return mk(rep.Suspect, kindInvalid, "rank %d: %s: %s", rep.Suspect, desc, rep.Detail)
	case kindClosed:
		return mk(rep.Suspect, kindClosed, "rank %d closed its process group during %s", rep.Suspect, desc)
	}

	states, silent := c.probeAll()
	if g.verdict.Load() != nil {
		return nil
	}
	c.mu.Lock()
	left := append([]bool(nil), c.left...)
	dead := append([]bool(nil), c.dead...)
	deadWhy := append([]string(nil), c.deadWhy...)
	c.mu.Unlock()
	for r, d := range dead {
		if d {
			return mk(r, kindPeerLost, "rank %d was lost during %s: %s", r, desc, deadWhy[r])
		}
	}
	for r, gone := range left {
		if gone {
			return mk(r, kindClosed, "rank %d closed its process group before %s", r, desc)
		}
	}
	if len(silent) > 0 {
		return mk(silent[0], kindTimeout, "rank %d did not answer within %s during %s", silent[0], g.timeout, desc)
	}
	for r := 0; r < g.size; r++ {
		st, ok := states[r]
		if !ok || st.Started >= rep.Seq {
			continue
		}
		where := "it has not reached that collective"
		if st.Started > st.Finished {
			where = fmt.Sprintf("it is still in %s", opDesc(st.Op, -1, st.Started))
		}
		return mk(r, kindTimeout, "rank %d did not answer within %s during %s: %s", r, g.timeout, desc, where)
	}
	if rep.Kind == kindTimeout {
		return mk(rep.Suspect, kindTimeout, "rank %d did not answer within %s during %s (every rank is alive and in that collective; rank %d waited on rank %d: %s)",
			rep.Suspect, g.timeout, desc, from, rep.Suspect, rep.Detail)
	}
	return mk(rep.Suspect, kindPeerLost, "rank %d was lost during %s: %s (seen by rank %d)", rep.Suspect, desc, rep.Detail, from)
}

// probeAll asks every rank still there where it is, and waits up to
// probeWait for the answers. silent lists the ranks that did not answer and
// are not known dead.
func (c *control) probeAll() (states map[int]probeReplyMsg, silent []int) {
	g := c.g
	c.mu.Lock()
	c.nextProbe++
	round := &probeRound{id: c.nextProbe, replies: map[int]probeReplyMsg{}, wake: make(chan struct{}, 1)}
	c.round = round
	var targets []int
	for r := 1; r < g.size; r++ {
		if !c.dead[r] && !c.left[r] {
			targets = append(targets, r)
		}
	}
	c.mu.Unlock()
	for _, r := range targets {
		p := c.peers[r]
		go func() { _ = p.send(msgProbe, probeMsg{ID: round.id}) }()
	}
	timer := time.NewTimer(c.probeWait)
	defer timer.Stop()
	for {
		c.mu.Lock()
		done := true
		for _, r := range targets {
			if _, ok := round.replies[r]; !ok && !c.dead[r] {
				done = false
			}
		}
		c.mu.Unlock()
		if done {
			break
		}
		select {
		case <-round.wake:
			continue
		case <-timer.C:
		}
		break
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.round = nil
	states = map[int]probeReplyMsg{0: g.probeState(round.id)}
	for _, r := range targets {
		if st, ok := round.replies[r]; ok {
			states[r] = st
		} else if !c.dead[r] {
			silent = append(silent, r)
		}
	}
	return states, silent
}

// bye tells the others that this rank leaves on purpose.
func (c *control) bye() {
	c.waitAbortSent()
	if c.master != nil {
		_ = c.master.send(msgBye, struct{}{})
		return
	}
	c.mu.Lock()
	var targets []*peerConn
	for r := 1; r < c.g.size; r++ {
		if c.peers != nil && c.peers[r] != nil && !c.dead[r] && !c.left[r] {
			targets = append(targets, c.peers[r])
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range targets {
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.send(msgBye, struct{}{}) }()
	}
	wg.Wait()
}

func (c *control) closeAll() {
	if c.master != nil {
		c.master.conn.Close()
	}
	for _, p := range c.peers {
		if p != nil {
			p.conn.Close()
		}
	}
}
