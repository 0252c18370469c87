package distrib

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// Group is a process group: WorldSize processes that run the same sequence
// of collectives. Each rank sends to rank+1 and receives from rank-1 (mod
// WorldSize) on two TCP connections, and keeps its rendezvous connection to
// rank 0 open as a control channel.
//
// A Group runs one collective at a time; calls from several goroutines are
// serialised, and every rank must issue the same collectives in the same
// order. After a failed collective (timeout, lost rank, mismatch, cancelled
// context) the group is broken: every later collective returns the same
// error, on every rank. A length mismatch caught by Debug does not break it.
type Group struct {
	cfg        Config
	rank, size int
	timeout    time.Duration
	chunkElems int
	log        logrus.FieldLogger

	next, prev net.Conn // ring links: send to rank+1, receive from rank-1
	ctl        *control
	gates      []*gate   // this rank's listeners, kept for the life of the group
	tr         transport // when set, the collectives run on it (MPI) instead of the ring

	mu  sync.Mutex // held for the whole of a collective
	seq uint64

	// What the control channel reports about this rank.
	started, finished atomic.Uint64
	curOp             atomic.Pointer[string]
	curStep           atomic.Int64
	cur               atomic.Pointer[call]

	verdictOnce sync.Once
	verdictCh   chan struct{}
	verdict     atomic.Pointer[RankError]
	closed      atomic.Bool

	// Scratch, used under mu.
	recvF32  []float32
	sendU16  []uint16
	recvU16  []uint16
	work     []float32
	barrierB [1]float32
}

// Rank is this process's rank, from 0.
func (g *Group) Rank() int { return g.rank }

// WorldSize is the number of processes in the group.
func (g *Group) WorldSize() int { return g.size }

// LocalRank is the rank among the processes of this machine, as configured.
func (g *Group) LocalRank() int { return g.cfg.LocalRank }

// Timeout is the bound on each collective.
func (g *Group) Timeout() time.Duration { return g.timeout }

func newGroup(cfg Config) *Group {
	log := cfg.Logger
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		l.SetLevel(logrus.PanicLevel)
		log = l
	}
	g := &Group{
		cfg:        cfg,
		rank:       cfg.Rank,
		size:       cfg.WorldSize,
		timeout:    cfg.timeout(),
		chunkElems: cfg.chunkBytes() / 4,
		log:        log.WithField("rank", cfg.Rank),
		verdictCh:  make(chan struct{}),
	}
	none := ""
	g.curOp.Store(&none)
	return g
}

// Init joins the process group cfg describes. Rank 0 listens on
// cfg.MasterPort (or uses cfg.Listener); every other rank connects to it,
// retrying until it answers, and registers the address of its own peer
// listener; rank 0 sends every rank the address table; each rank then
// connects to rank+1 and accepts rank-1, and Init returns once every rank is
// linked. The whole rendezvous is bounded by cfg.Timeout and ctx. A world of
// one needs no network.
func Init(ctx context.Context, cfg Config) (*Group, error) {
	if err := cfg.validate(); err != nil {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return nil, err
	}
	g := newGroup(cfg)
	if cfg.WorldSize == 1 {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return g, nil
	}
	if len(cfg.Secret) == 0 {
		noSecretWarning.Do(func() {
			g.log.Warnf("distrib: no job secret is set (%s or %s): this job accepts any process that reaches its ports; "+
				"give every rank the same secret (onnxtrain launch makes one for a single-node job)", SecretVar, SecretFileVar)
		})
	}
	limit := g.timeout
	if cfg.Rank != 0 {
		// Rank 0 gives up first and says why; the others wait a little
		// longer so that they hear it.
		limit += min(max(g.timeout/4, 200*time.Millisecond), 5*time.Second)
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var err error
	if cfg.Rank == 0 {
		err = g.initMaster(ctx)
	} else {
		err = g.initWorker(ctx)
	}
	if err != nil {
		g.closeConns()
		return nil, err
	}
	g.ctl.start()
	g.log.WithFields(logrus.Fields{"world_size": g.size}).Debug("distrib: process group ready")
	return g, nil
}

// noSecretWarning makes the warning about a job without a secret appear
// once per process.
var noSecretWarning sync.Once

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// listenData opens this rank's peer listener.
func (g *Group) listenData() (net.Listener, error) {
	host := g.cfg.ListenHost
	if host == "" && isLoopback(g.cfg.MasterAddr) {
		host = "127.0.0.1"
		if ip := net.ParseIP(g.cfg.MasterAddr); ip != nil {
			host = ip.String()
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("distrib: rank %d: opening the peer listener on %q: %w", g.rank, host, err)
	}
	g.log.WithField("addr", l.Addr().String()).Debug("distrib: peer port open")
	return l, nil
}

// advertise is the address the others use to reach l. via is the address
// this rank reached the master from (nil on rank 0).
func (g *Group) advertise(l net.Listener, via net.Addr) string {
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	switch {
	case g.cfg.ListenHost != "":
		return net.JoinHostPort(g.cfg.ListenHost, port)
	case isLoopback(g.cfg.MasterAddr):
		return net.JoinHostPort(l.Addr().(*net.TCPAddr).IP.String(), port)
	case via != nil:
		return net.JoinHostPort(via.(*net.TCPAddr).IP.String(), port)
	default:
		return net.JoinHostPort(g.cfg.MasterAddr, port)
	}
}

func (g *Group) masterHostPort() string {
	return net.JoinHostPort(g.cfg.MasterAddr, strconv.Itoa(g.cfg.MasterPort))
}

// dialRetry dials addr until it answers or ctx ends.
func dialRetry(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	wait := 20 * time.Millisecond
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := d.DialContext(attempt, "tcp", addr)
		cancel()
		if err == nil {
			tuneConn(c)
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		if wait < 500*time.Millisecond {
			wait *= 2
		}
	}
}

func tuneConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetKeepAlive(true)
	}
}

// closeOnDone closes c when ctx ends, to interrupt blocking calls; the
// returned function undoes it.
func closeOnDone(ctx context.Context, c io.Closer) func() bool {
	return context.AfterFunc(ctx, func() { c.Close() })
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

func (g *Group) initWorker(ctx context.Context) error {
	dl, err := g.listenData()
	if err != nil {
		return err
	}
	dg, arrivals := g.openPeerGate(dl)
	master := g.masterHostPort()
	conn, err := dialRetry(ctx, master)
	if err != nil {
		return fmt.Errorf("distrib: rank %d could not reach rank 0 at %s within %s: %w", g.rank, master, g.timeout, err)
	}
	g.ctl = newControl(g)
	g.ctl.master = &peerConn{rank: 0, conn: conn}
	stop := closeOnDone(ctx, conn)
	defer stop()
	fail := func(what string, err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("distrib: rank %d: rendezvous with rank 0 at %s: no %s within %s", g.rank, master, what, g.timeout)
		}
		var rej *rejectedError
		if errors.As(err, &rej) {
			if rej.settings {
				return &SettingsError{Rank: g.rank, Detail: rej.reason}
			}
			return fmt.Errorf("distrib: rank %d: rank 0 at %s refused the rendezvous: %s", g.rank, master, rej.reason)
		}
		return fmt.Errorf("distrib: rank %d: rendezvous with rank 0 at %s: %s: %w", g.rank, master, what, err)
	}
	if err := ClientHandshake(conn, g.cfg.Secret, deadlineOf(ctx)); err != nil {
		if ctx.Err() != nil {
			return fail("handshake", err)
		}
		return fmt.Errorf("distrib: rank %d: the handshake with rank 0 at %s failed: %w", g.rank, master, err)
	}
	hello := helloMsg{Magic: protocolMagic, Version: protocolVersion, Rank: g.rank, WorldSize: g.size,
		DataAddr: g.advertise(dl, conn.LocalAddr()), Debug: g.cfg.Debug, Settings: g.cfg.Settings}
	if err := writeFrame(conn, msgHello, hello, deadlineOf(ctx)); err != nil {
		return fail("registration", err)
	}
	_ = conn.SetReadDeadline(deadlineOf(ctx))
	var w welcomeMsg
	if err := readFrameAs(conn, msgWelcome, &w); err != nil {
		return fail("address table", err)
	}
	if len(w.Addrs) != g.size {
		return fmt.Errorf("distrib: rank %d: rank 0 sent %d addresses for a world of %d", g.rank, len(w.Addrs), g.size)
	}
	g.log.WithField("addrs", w.Addrs).Debug("distrib: address table")
	linkErr := g.link(ctx, dg, arrivals, w.Addrs, w.Session)
	ready := readyMsg{}
	if linkErr != nil {
		ready.Err = linkErr.Error()
	}
	if err := writeFrame(conn, msgReady, ready, deadlineOf(ctx)); err != nil && linkErr == nil {
		return fail("link report", err)
	}
	if linkErr != nil {
		return linkErr
	}
	var gm goMsg
	if err := readFrameAs(conn, msgGo, &gm); err != nil {
		return fail("start signal", err)
	}
	if gm.Err != "" {
		return fmt.Errorf("distrib: rank %d: the group could not form: %s", g.rank, gm.Err)
	}
	_ = conn.SetDeadline(time.Time{})
	return nil
}

func (g *Group) initMaster(ctx context.Context) error {
	rl := g.cfg.Listener
	if rl == nil {
		host := ""
		if isLoopback(g.cfg.MasterAddr) {
			host = g.cfg.MasterAddr
		}
		var err error
		rl, err = net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(g.cfg.MasterPort)))
		if err != nil {
			return fmt.Errorf("distrib: rank 0: listening for the rendezvous on port %d: %w", g.cfg.MasterPort, err)
		}
	}
	rlAddr := rl.Addr().String()
	dl, err := g.listenData()
	if err != nil {
		rl.Close()
		return err
	}
	g.ctl = newControl(g)
	dg, arrivals := g.openPeerGate(dl)
	peers, err := g.acceptRanks(ctx, rl)
	if err != nil {
		return fmt.Errorf("distrib: rank 0: rendezvous on %s: %w", rlAddr, err)
	}
	g.ctl.peers = peers
	if err := g.checkSettings(peers); err != nil {
		return err
	}
	var sb [8]byte
	if _, err := rand.Read(sb[:]); err != nil {
		return fmt.Errorf("distrib: rank 0: %w", err)
	}
	session := binary.BigEndian.Uint64(sb[:])
	addrs := make([]string, g.size)
	addrs[0] = g.advertise(dl, nil)
	for r := 1; r < g.size; r++ {
		addrs[r] = peers[r].dataAddr
	}
	g.log.WithField("addrs", addrs).Debug("distrib: address table")
	for r := 1; r < g.size; r++ {
		if err := writeFrame(peers[r].conn, msgWelcome, welcomeMsg{Session: session, Addrs: addrs}, deadlineOf(ctx)); err != nil {
			return fmt.Errorf("distrib: rank 0: sending the address table to rank %d: %w", r, err)
		}
	}
	linkErr := g.link(ctx, dg, arrivals, addrs, session)

	// Every rank reports whether it linked; all start, or all fail.
	problems := make([]string, g.size)
	if linkErr != nil {
		problems[0] = linkErr.Error()
	}
	var wg sync.WaitGroup
	for r := 1; r < g.size; r++ {
		wg.Add(1)
		go func(p *peerConn) {
			defer wg.Done()
			stop := closeOnDone(ctx, p.conn)
			defer stop()
			_ = p.conn.SetReadDeadline(deadlineOf(ctx))
			var rm readyMsg
			if err := readFrameAs(p.conn, msgReady, &rm); err != nil {
				problems[p.rank] = fmt.Sprintf("rank %d did not report its links within %s (%v)", p.rank, g.timeout, err)
				return
			}
			problems[p.rank] = rm.Err
		}(peers[r])
	}
	wg.Wait()
	var failed []string
	for _, p := range problems {
		if p != "" {
			failed = append(failed, p)
		}
	}
	gm := goMsg{Err: strings.Join(failed, "; ")}
	for r := 1; r < g.size; r++ {
		_ = writeFrame(peers[r].conn, msgGo, gm, time.Now().Add(controlWriteTimeout))
		_ = peers[r].conn.SetDeadline(time.Time{})
	}
	if gm.Err != "" {
		return fmt.Errorf("distrib: rank 0: the group could not form: %s", gm.Err)
	}
	return nil
}

// acceptRanks waits for every other rank to register on rl (rank 0's
// rendezvous port, whose gate it opens): each connection that passed the
// handshake sends its hello, which is checked and recorded.
func (g *Group) acceptRanks(ctx context.Context, rl net.Listener) ([]*peerConn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	peers := make([]*peerConn, g.size)
	var mu sync.Mutex
	joined := 1
	over := false
	all := make(chan struct{})
	var strays []string
	note := func(addr, reason string) {
		mu.Lock()
		defer mu.Unlock()
		if !over {
			strays = append(strays, fmt.Sprintf("%s: %s", addr, reason))
		}
	}
	admit := func(conn net.Conn) {
		addr := conn.RemoteAddr().String()
		stopConn := closeOnDone(ctx, conn)
		_ = conn.SetReadDeadline(deadlineOf(ctx))
		var h helloMsg
		err := readFrameAs(conn, msgHello, &h)
		if !stopConn() { // ctx ended meanwhile and closed conn
			return
		}
		if err != nil {
			conn.Close()
			g.log.WithField("from", addr).Warnf("distrib: refused a connection from %s on the rendezvous port: %v", addr, err)
			note(addr, err.Error())
			return
		}
		mu.Lock()
		defer mu.Unlock()
		reject := func(format string, args ...any) {
			reason := fmt.Sprintf(format, args...)
			if !over {
				strays = append(strays, fmt.Sprintf("%s: %s", addr, reason))
			}
			g.log.WithField("from", addr).Warnf("distrib: refused a connection from %s on the rendezvous port: %s", addr, reason)
			_ = writeFrame(conn, msgReject, rejectMsg{Reason: reason}, time.Now().Add(controlWriteTimeout))
			conn.Close()
		}
		switch {
		case over:
			reject("the rendezvous is over")
		case h.Magic != protocolMagic || h.Version != protocolVersion:
			reject("protocol %q version %d, rank 0 speaks %q version %d", h.Magic, h.Version, protocolMagic, protocolVersion)
		case h.WorldSize != g.size:
			reject("rank %d has world size %d but rank 0 has %d", h.Rank, h.WorldSize, g.size)
		case h.Rank <= 0 || h.Rank >= g.size:
			reject("rank %d is outside 1..%d", h.Rank, g.size-1)
		case peers[h.Rank] != nil:
			reject("rank %d already joined from %s", h.Rank, peers[h.Rank].conn.RemoteAddr())
		case h.Debug != g.cfg.Debug:
			reject("rank %d has Debug=%v but rank 0 has Debug=%v; every rank must agree", h.Rank, h.Debug, g.cfg.Debug)
		default:
			_ = conn.SetReadDeadline(time.Time{})
			peers[h.Rank] = &peerConn{rank: h.Rank, conn: conn, dataAddr: h.DataAddr, settings: h.Settings}
			joined++
			if joined == g.size {
				close(all)
			}
		}
	}
	gt := g.openGate(rl, "rendezvous port", admit, note, g.lateRendezvous)
	select {
	case <-all:
	case <-ctx.Done():
	}
	gt.closeAdmission()
	mu.Lock()
	defer mu.Unlock()
	over = true
	if joined == g.size {
		return peers, nil
	}
	cancel() // closes the connections still sending their hello
	var missing []string
	for r := 1; r < g.size; r++ {
		if peers[r] == nil {
			missing = append(missing, strconv.Itoa(r))
		}
	}
	msg := fmt.Sprintf("rank %s of %d did not join within %s", strings.Join(missing, ", "), g.size, g.timeout)
	if len(missing) > 1 {
		msg = "ranks" + msg[len("rank"):]
	}
	if len(strays) > 0 {
		sort.Strings(strays)
		msg += fmt.Sprintf(" (refused connections: %s)", strings.Join(strays, "; "))
	}
	for r := 1; r < g.size; r++ {
		if peers[r] != nil {
			_ = writeFrame(peers[r].conn, msgReject, rejectMsg{Reason: "rendezvous failed: " + msg}, time.Now().Add(controlWriteTimeout))
			peers[r].conn.Close()
		}
	}
	return nil, errors.New(msg)
}

// link connects to rank+1 and accepts rank-1 through dg (this rank's peer
// port). Both connections pass the handshake first; then the dialer sends
// its link greeting (rank and session).
func (g *Group) link(ctx context.Context, dg *gate, arrivals chan linkArrival, addrs []string, session uint64) error {
	nextRank, prevRank := (g.rank+1)%g.size, (g.rank+g.size-1)%g.size
	type dialed struct {
		c   net.Conn
		err error
	}
	dialDone := make(chan dialed, 1)
	go func() {
		c, err := dialRetry(ctx, addrs[nextRank])
		if err != nil {
			dialDone <- dialed{nil, fmt.Errorf("rank %d could not connect to rank %d at %s: %w", g.rank, nextRank, addrs[nextRank], err)}
			return
		}
		if err := ClientHandshake(c, g.cfg.Secret, deadlineOf(ctx)); err != nil {
			c.Close()
			dialDone <- dialed{nil, fmt.Errorf("rank %d: the handshake with rank %d at %s failed: %w", g.rank, nextRank, addrs[nextRank], err)}
			return
		}
		_ = c.SetWriteDeadline(deadlineOf(ctx))
		if _, err := c.Write(encodeLinkHello(g.rank, session)); err != nil {
			c.Close()
			dialDone <- dialed{nil, fmt.Errorf("rank %d could not greet rank %d at %s: %w", g.rank, nextRank, addrs[nextRank], err)}
			return
		}
		_ = c.SetWriteDeadline(time.Time{})
		dialDone <- dialed{c, nil}
	}()

	var acceptErr error
	for g.prev == nil && acceptErr == nil {
		select {
		case a := <-arrivals:
			switch {
			case !a.ok:
				dg.refuse(a.c, "its first message is not a ring link greeting")
			case a.session != session:
				dg.refuse(a.c, fmt.Sprintf("its link greeting (rank %d) belongs to another group (session %#x, this one is %#x): a process of an earlier start of the job?", a.rank, a.session, session))
			case a.rank != prevRank:
				dg.refuse(a.c, fmt.Sprintf("it claims rank %d, but rank %d links only with rank %d", a.rank, g.rank, prevRank))
			default:
				g.prev = a.c
			}
		case <-ctx.Done():
			acceptErr = fmt.Errorf("rank %d did not connect to rank %d within %s", prevRank, g.rank, g.timeout)
		}
	}
	dg.closeAdmission()
	for more := true; more; {
		select {
		case a := <-arrivals:
			dg.refuse(a.c, "the ring is linked already")
		default:
			more = false
		}
	}
	d := <-dialDone
	g.next = d.c
	if d.err != nil {
		return fmt.Errorf("distrib: %w", d.err)
	}
	if acceptErr != nil {
		return fmt.Errorf("distrib: %w", acceptErr)
	}
	return nil
}

// Close leaves the group. It is not a collective: call it once this rank's
// collectives are done (the others may still be finishing theirs). A rank
// that exits without Close looks lost to the others.
func (g *Group) Close() error {
	if !g.closed.CompareAndSwap(false, true) {
		return nil
	}
	if c := g.cur.Load(); c != nil {
		c.fail(&localFailure{suspect: g.rank, kind: kindClosed, detail: fmt.Sprintf("rank %d closed its process group", g.rank)})
	}
	if g.ctl != nil {
		g.ctl.bye()
	}
	g.closeConns()
	if g.tr != nil {
		g.mu.Lock() // let a collective in progress end first
		defer g.mu.Unlock()
		return g.tr.close(g.verdict.Load() != nil, g.timeout)
	}
	return nil
}

func (g *Group) closeConns() {
	for _, gt := range g.gates {
		gt.shut()
	}
	if g.next != nil {
		g.next.Close()
	}
	if g.prev != nil {
		g.prev.Close()
	}
	if g.ctl != nil {
		g.ctl.closeAll()
	}
}

// kill drops every connection without saying goodbye, as a crashed process
// would (tests).
func (g *Group) kill() {
	g.closed.Store(true)
	// A dead process closes everything at once; close the control channel
	// first so that this "dead" rank cannot answer a probe in between.
	if g.ctl != nil {
		g.ctl.closeAll()
	}
	g.closeConns()
}
