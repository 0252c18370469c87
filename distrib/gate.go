package distrib

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// maxHandshakes bounds the connections a gate authenticates at once; more
// wait in the kernel's backlog.
const maxHandshakes = 128

// gate owns one of a rank's listeners (rank 0's rendezvous port, every
// rank's peer port) for the life of the group. Every connection it accepts
// must pass the handshake within the handshake timeout; one that does not
// is closed and logged with its address and the reason, and nothing else
// happens. A connection that passes goes to admit while the group forms;
// after that, to late, which refuses it too (the group is complete).
type gate struct {
	g    *Group
	l    net.Listener
	what string // "rendezvous port", "peer port"

	mu     sync.Mutex
	admit  func(net.Conn)
	noted  func(addr, reason string) // told of every refusal while set
	late   func(net.Conn)
	closed bool

	slots chan struct{}
	done  chan struct{}
}

// openGate starts accepting on l: connections that pass the handshake go
// to admit (and refusals are told to noted, when not nil) until
// closeAdmission, then to late.
func (g *Group) openGate(l net.Listener, what string, admit func(net.Conn), noted func(addr, reason string), late func(net.Conn)) *gate {
	gt := &gate{g: g, l: l, what: what, admit: admit, noted: noted, late: late,
		slots: make(chan struct{}, maxHandshakes), done: make(chan struct{})}
	g.gates = append(g.gates, gt)
	go gt.run()
	return gt
}

func (gt *gate) closeAdmission() {
	gt.mu.Lock()
	gt.admit, gt.noted = nil, nil
	gt.mu.Unlock()
}

// shut closes the listener; connections in their handshake end by their
// deadline.
func (gt *gate) shut() {
	gt.mu.Lock()
	already := gt.closed
	gt.closed = true
	gt.mu.Unlock()
	if !already {
		gt.l.Close()
	}
}

func (gt *gate) addr() net.Addr { return gt.l.Addr() }

func (gt *gate) run() {
	defer close(gt.done)
	for {
		c, err := gt.l.Accept()
		if err != nil {
			gt.mu.Lock()
			closed := gt.closed
			gt.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			gt.g.log.WithError(err).Warnf("distrib: accepting on the %s", gt.what)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		gt.slots <- struct{}{}
		go func() {
			defer func() { <-gt.slots }()
			gt.serve(c)
		}()
	}
}

func (gt *gate) serve(c net.Conn) {
	tuneConn(c)
	if err := ServerHandshake(c, gt.g.cfg.Secret, time.Now().Add(gt.g.handshakeTimeout())); err != nil {
		gt.refuse(c, err.Error())
		return
	}
	gt.mu.Lock()
	admit := gt.admit
	gt.mu.Unlock()
	if admit != nil {
		admit(c)
		return
	}
	gt.late(c)
}

// refuse closes c and logs why.
func (gt *gate) refuse(c net.Conn, reason string) {
	c.Close()
	addr := c.RemoteAddr().String()
	gt.g.log.WithFields(logrus.Fields{"from": addr, "port": gt.what}).
		Warnf("distrib: refused a connection from %s on the %s: %s", addr, gt.what, reason)
	gt.mu.Lock()
	noted := gt.noted
	gt.mu.Unlock()
	if noted != nil {
		noted(addr, reason)
	}
}

func (g *Group) handshakeTimeout() time.Duration {
	d := g.cfg.HandshakeTimeout
	if d <= 0 {
		d = DefaultHandshakeTimeout
	}
	return min(d, g.timeout)
}

// lateRendezvous answers a process that passed the handshake on the
// rendezvous port after the group formed: it holds the secret (a restarted
// rank, a second job with the same secret), so it is told why.
func (g *Group) lateRendezvous(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(g.handshakeTimeout()))
	var h helloMsg
	who := "a process"
	if err := readFrameAs(c, msgHello, &h); err == nil {
		who = fmt.Sprintf("a process claiming rank %d", h.Rank)
	}
	reason := fmt.Sprintf("the group of %d processes has formed already; %s cannot join it now", g.size, who)
	_ = writeFrame(c, msgReject, rejectMsg{Reason: reason}, time.Now().Add(controlWriteTimeout))
	c.Close()
	g.log.WithFields(logrus.Fields{"from": c.RemoteAddr().String(), "port": "rendezvous port"}).
		Warnf("distrib: refused a connection from %s on the rendezvous port: %s", c.RemoteAddr(), reason)
}

// linkArrival is a connection to the peer port that passed the handshake
// and sent its link greeting.
type linkArrival struct {
	c       net.Conn
	rank    int
	session uint64
	ok      bool // the greeting was well-formed
}

// openPeerGate opens the gate of this rank's peer port. Until the ring is
// linked, each connection that passes the handshake sends its link
// greeting, and goes to the returned queue for link to judge (the session
// is known only once rank 0's address table arrives).
func (g *Group) openPeerGate(dl net.Listener) (*gate, chan linkArrival) {
	q := make(chan linkArrival, maxHandshakes)
	var gt *gate
	admit := func(c net.Conn) {
		b := make([]byte, 16)
		_ = c.SetReadDeadline(time.Now().Add(g.handshakeTimeout()))
		if _, err := io.ReadFull(c, b); err != nil {
			gt.refuse(c, fmt.Sprintf("no link greeting after the handshake (%v)", err))
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		r, s, ok := decodeLinkHello(b)
		gt.mu.Lock()
		open, queued := gt.admit != nil, false
		if open {
			select {
			case q <- linkArrival{c: c, rank: r, session: s, ok: ok}:
				queued = true
			default:
			}
		}
		gt.mu.Unlock()
		switch {
		case !open:
			g.latePeer(c)
		case !queued:
			gt.refuse(c, "too many connections wait to be linked")
		}
	}
	gt = g.openGate(dl, "peer port", admit, nil, g.latePeer)
	return gt, q
}

// latePeer refuses a connection to the peer port after the ring is linked.
func (g *Group) latePeer(c net.Conn) {
	c.Close()
	g.log.WithFields(logrus.Fields{"from": c.RemoteAddr().String(), "port": "peer port"}).
		Warnf("distrib: refused a connection from %s on the peer port: the ring is linked already", c.RemoteAddr())
}

// Secret returns the job's secret the group authenticates with (nil when
// none was set), for other connections between the job's processes
// (pipeline links), which run ClientHandshake and ServerHandshake with it.
func (g *Group) Secret() []byte { return g.cfg.Secret }

// HandshakeTimeout is how long a listener of the group waits for a new
// connection to pass the handshake.
func (g *Group) HandshakeTimeout() time.Duration { return g.handshakeTimeout() }
