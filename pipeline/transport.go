package pipeline

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/onnxtrain/onnxtrain/distrib"
	"github.com/onnxtrain/onnxtrain/graph"
)

// MsgKey names one message of a pipeline: the step, what it carries
// (SendAct: the activations entering Stage; SendGrad: the gradient of
// Stage's inputs), and the micro-batch.
type MsgKey struct {
	Step  int64
	Kind  Kind
	Micro int
	Stage int
}

// MsgKey is the key, in step step, of the tensor a send or receive moves:
// a send and the receive that takes it have the same key (the send's
// kind, SendAct or SendGrad, the micro-batch and the stage). Traces
// (Runner.Trace) match a receive to its send with it.
func (a Action) MsgKey(step int64) MsgKey {
	k := a.Kind
	switch k {
	case RecvAct:
		k = SendAct
	case RecvGrad:
		k = SendGrad
	}
	return MsgKey{Step: step, Kind: k, Micro: a.Micro, Stage: a.Stage}
}

// Transport moves activations and their gradients between the ranks of a
// pipeline that run in separate processes.
type Transport interface {
	// Send delivers tensors to rank peer; it does not wait for the
	// matching Recv.
	Send(ctx context.Context, peer int, k MsgKey, tensors map[string]*graph.Tensor) error
	// Recv waits for the message k from rank peer, until ctx ends or the
	// peer is gone.
	Recv(ctx context.Context, peer int, k MsgKey) (map[string]*graph.Tensor, error)
	Close() error
}

// ErrPeerLost is wrapped by errors about a rank whose connection broke
// (its process died or closed the pipeline).
var ErrPeerLost = errors.New("pipeline: peer lost")

// TCPTransport is a Transport over one TCP connection per pair of ranks,
// set up through a distrib process group (which exchanges the listening
// addresses).
type TCPTransport struct {
	rank    int
	timeout time.Duration
	conns   map[int]*peerLink

	mu    sync.Mutex
	boxes map[boxKey]chan map[string]*graph.Tensor

	// free holds float32 buffers given back (Recycle), by length, for
	// the next received tensors of that size.
	freeMu sync.Mutex
	free   map[int][][]float32
}

// minRecycled is the smallest float32 tensor Recycle keeps (elements).
const minRecycled = 1 << 12

// Recycle gives the transport back the float32 buffers of tensors a Recv
// returned, once the caller is done with them: the next received tensors
// of the same size are read into them instead of new memory. (The ZeRO
// exchanges receive the same gradient and parameter sizes every step;
// without this each step's received bytes are garbage the collector lets
// pile up to the size of the live heap.) Small tensors are left alone.
func (t *TCPTransport) Recycle(tensors map[string]*graph.Tensor) {
	t.freeMu.Lock()
	defer t.freeMu.Unlock()
	if t.free == nil {
		t.free = map[int][][]float32{}
	}
	for _, x := range tensors {
		if d, ok := x.Data.([]float32); ok && len(d) >= minRecycled {
			t.free[len(d)] = append(t.free[len(d)], d)
		}
	}
}

// takeFloat32s returns a recycled buffer of n values, or nil.
func (t *TCPTransport) takeFloat32s(n int) []float32 {
	if n < minRecycled {
		return nil
	}
	t.freeMu.Lock()
	defer t.freeMu.Unlock()
	l := t.free[n]
	if len(l) == 0 {
		return nil
	}
	d := l[len(l)-1]
	t.free[n] = l[:len(l)-1]
	return d
}

type boxKey struct {
	peer int
	k    MsgKey
}

type peerLink struct {
	peer int
	conn net.Conn
	wmu  sync.Mutex
	w    *bufio.Writer
	dead chan struct{} // closed when the link breaks
	err  error         // why, set before dead is closed
}

// NewTCPTransport connects this rank of g to every other rank: it listens
// on host (":0" picks the port; "" means 127.0.0.1), exchanges addresses
// with an AllGatherObject of g, and dials the higher ranks. Every link
// starts with the job's challenge-response over g's secret (distrib's
// handshake); a connection that fails it is refused and logged, and the
// listener waits on for the real peers. timeout bounds the setup and each
// send.
func NewTCPTransport(ctx context.Context, g *distrib.Group, host string, timeout time.Duration) (*TCPTransport, error) {
	if host == "" {
		host = "127.0.0.1"
	}
	if timeout <= 0 {
		timeout = g.Timeout()
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("pipeline: rank %d: listening for pipeline peers: %w", g.Rank(), err)
	}
	defer l.Close()
	t := &TCPTransport{rank: g.Rank(), timeout: timeout, conns: map[int]*peerLink{}, boxes: map[boxKey]chan map[string]*graph.Tensor{}}
	deadline := time.Now().Add(timeout)
	// Accept the lower ranks (from now on: strangers knocking early are
	// refused here) while dialling the higher ones.
	type accepted struct {
		peer int
		conn net.Conn
		err  error
	}
	lower := g.Rank()
	acc := make(chan accepted, lower+1)
	go func() {
		if tl, ok := l.(*net.TCPListener); ok {
			tl.SetDeadline(deadline)
		}
		for n := 0; n < lower; {
			c, err := l.Accept()
			if err != nil {
				acc <- accepted{err: err}
				return
			}
			// Every link starts with the job's challenge-response (as
			// distrib's connections do): a stranger is refused and logged,
			// and the listener goes on waiting for the real peers.
			hs := time.Now().Add(g.HandshakeTimeout())
			if hs.After(deadline) {
				hs = deadline
			}
			if err := distrib.ServerHandshake(c, g.Secret(), hs); err != nil {
				refuseLink(g, c, err)
				continue
			}
			var hello [4]byte
			c.SetReadDeadline(deadline)
			if _, err := io.ReadFull(c, hello[:]); err != nil {
				c.Close()
				acc <- accepted{err: err}
				return
			}
			c.SetReadDeadline(time.Time{})
			n++
			acc <- accepted{peer: int(binary.LittleEndian.Uint32(hello[:])), conn: c}
		}
	}()
	if listenHook != nil {
		listenHook(g.Rank(), l.Addr().String())
	}
	addrs, err := g.AllGatherObject(ctx, []byte(l.Addr().String()))
	if err != nil {
		return nil, fmt.Errorf("pipeline: rank %d: exchanging pipeline addresses: %w", g.Rank(), err)
	}
	fail := func(err error) (*TCPTransport, error) {
		t.Close()
		return nil, fmt.Errorf("pipeline: rank %d: connecting pipeline peers: %w", g.Rank(), err)
	}
	for q := g.Rank() + 1; q < g.WorldSize(); q++ {
		d := net.Dialer{Deadline: deadline}
		c, err := d.DialContext(ctx, "tcp", string(addrs[q]))
		if err != nil {
			return fail(fmt.Errorf("rank %d at %s: %w", q, addrs[q], err))
		}
		if err := distrib.ClientHandshake(c, g.Secret(), deadline); err != nil {
			c.Close()
			return fail(fmt.Errorf("rank %d at %s: %w", q, addrs[q], err))
		}
		var hello [4]byte
		binary.LittleEndian.PutUint32(hello[:], uint32(g.Rank()))
		if _, err := c.Write(hello[:]); err != nil {
			c.Close()
			return fail(fmt.Errorf("rank %d: %w", q, err))
		}
		t.add(q, c)
	}
	for i := 0; i < lower; i++ {
		a := <-acc
		if a.err != nil {
			return fail(a.err)
		}
		if a.peer < 0 || a.peer >= lower || t.conns[a.peer] != nil {
			a.conn.Close()
			return fail(fmt.Errorf("unexpected hello from rank %d", a.peer))
		}
		t.add(a.peer, a.conn)
	}
	return t, nil
}

// listenHook, when set (by tests), learns each rank's pipeline listener
// address before the peers are told it.
var listenHook func(rank int, addr string)

// refuseLink closes a connection that failed the handshake and logs who
// it came from and why.
func refuseLink(g *distrib.Group, c net.Conn, err error) {
	c.Close()
	addr := c.RemoteAddr().String()
	logrus.WithFields(logrus.Fields{"rank": g.Rank(), "from": addr, "port": "pipeline listener"}).
		Warnf("pipeline: refused a connection from %s on the pipeline listener: %v", addr, err)
}

func (t *TCPTransport) add(peer int, c net.Conn) {
	pl := &peerLink{peer: peer, conn: c, w: bufio.NewWriterSize(c, 1<<16), dead: make(chan struct{})}
	t.conns[peer] = pl
	go t.read(pl)
}

// read delivers the peer's messages until the connection breaks.
func (t *TCPTransport) read(pl *peerLink) {
	r := bufio.NewReaderSize(pl.conn, 1<<16)
	for {
		k, msg, err := decodeMessage(r, t.takeFloat32s)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				err = fmt.Errorf("%w: rank %d closed the connection (its process ended or failed)", ErrPeerLost, pl.peer)
			} else {
				err = fmt.Errorf("%w: rank %d closed the connection (%v)", ErrPeerLost, pl.peer, err)
			}
			pl.err = err
			close(pl.dead)
			return
		}
		t.box(pl.peer, k) <- msg
	}
}

func (t *TCPTransport) box(peer int, k MsgKey) chan map[string]*graph.Tensor {
	t.mu.Lock()
	defer t.mu.Unlock()
	bk := boxKey{peer, k}
	ch, ok := t.boxes[bk]
	if !ok {
		ch = make(chan map[string]*graph.Tensor, 1)
		t.boxes[bk] = ch
	}
	return ch
}

// sendError names the peer a failed send was for, as a failed receive
// names it: a dead peer shows up on whichever side notices first.
func sendError(self, peer int, err error) error {
	return fmt.Errorf("%w: rank %d closed the connection or stopped reading while rank %d was sending to it (%v)", ErrPeerLost, peer, self, err)
}

// Send implements Transport.
func (t *TCPTransport) Send(ctx context.Context, peer int, k MsgKey, tensors map[string]*graph.Tensor) error {
	pl := t.conns[peer]
	if pl == nil {
		return fmt.Errorf("pipeline: rank %d has no connection to rank %d", t.rank, peer)
	}
	pl.wmu.Lock()
	defer pl.wmu.Unlock()
	pl.conn.SetWriteDeadline(time.Now().Add(t.timeout))
	if err := encodeMessage(pl.w, k, tensors); err != nil {
		return sendError(t.rank, peer, err)
	}
	if err := pl.w.Flush(); err != nil {
		return sendError(t.rank, peer, err)
	}
	return nil
}

// Recv implements Transport.
func (t *TCPTransport) Recv(ctx context.Context, peer int, k MsgKey) (map[string]*graph.Tensor, error) {
	pl := t.conns[peer]
	if pl == nil {
		return nil, fmt.Errorf("pipeline: rank %d has no connection to rank %d", t.rank, peer)
	}
	ch := t.box(peer, k)
	select {
	case msg := <-ch:
		t.mu.Lock()
		delete(t.boxes, boxKey{peer, k})
		t.mu.Unlock()
		return msg, nil
	case <-pl.dead:
		// a message that arrived before the break still counts
		select {
		case msg := <-ch:
			return msg, nil
		default:
		}
		return nil, pl.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close closes every connection.
func (t *TCPTransport) Close() error {
	for _, pl := range t.conns {
		pl.conn.Close()
	}
	return nil
}

const messageMagic = 0x31504c50 // "PLP1"

// encodeMessage writes a message: magic, key, tensor count, then each
// tensor's name, dtype, shape and little-endian data, names sorted.
func encodeMessage(w io.Writer, k MsgKey, tensors map[string]*graph.Tensor) error {
	var hdr [4 + 8 + 1 + 4 + 4 + 4]byte
	binary.LittleEndian.PutUint32(hdr[0:], messageMagic)
	binary.LittleEndian.PutUint64(hdr[4:], uint64(k.Step))
	hdr[12] = byte(k.Kind)
	binary.LittleEndian.PutUint32(hdr[13:], uint32(k.Micro))
	binary.LittleEndian.PutUint32(hdr[17:], uint32(k.Stage))
	binary.LittleEndian.PutUint32(hdr[21:], uint32(len(tensors)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := encodeTensor(w, n, tensors[n]); err != nil {
			return err
		}
	}
	return nil
}

func encodeTensor(w io.Writer, name string, t *graph.Tensor) error {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(name)))
	b = append(b, name...)
	b = binary.LittleEndian.AppendUint32(b, uint32(t.DType))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(t.Shape)))
	for _, d := range t.Shape {
		b = binary.LittleEndian.AppendUint64(b, uint64(d))
	}
	switch s := t.Data.(type) {
	case []float32:
		// in chunks through a small buffer: no copy of the tensor's bytes
		// (a gradient or a parameter can be hundreds of MB)
		if _, err := w.Write(b); err != nil {
			return err
		}
		return writeFloat32s(w, s)
	case []float64:
		for _, v := range s {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
	case []int64:
		for _, v := range s {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	case []int32:
		for _, v := range s {
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		}
	case []bool:
		for _, v := range s {
			b = append(b, btoByte(v))
		}
	default:
		return fmt.Errorf("tensor %q: %v cannot be sent between stages yet", name, t.DType)
	}
	_, err := w.Write(b)
	return err
}

func btoByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

const maxMessageTensors = 1 << 16

// decodeMessage reads one message; alloc, when not nil, may give the
// storage of a float32 tensor of n values (nil: a new one).
func decodeMessage(r io.Reader, alloc func(n int) []float32) (MsgKey, map[string]*graph.Tensor, error) {
	var hdr [25]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return MsgKey{}, nil, err
	}
	if binary.LittleEndian.Uint32(hdr[0:]) != messageMagic {
		return MsgKey{}, nil, fmt.Errorf("bad message header")
	}
	k := MsgKey{Step: int64(binary.LittleEndian.Uint64(hdr[4:])), Kind: Kind(hdr[12]),
		Micro: int(int32(binary.LittleEndian.Uint32(hdr[13:]))), Stage: int(int32(binary.LittleEndian.Uint32(hdr[17:])))}
	n := binary.LittleEndian.Uint32(hdr[21:])
	if n > maxMessageTensors {
		return k, nil, fmt.Errorf("message of %d tensors", n)
	}
	out := make(map[string]*graph.Tensor, n)
	for i := uint32(0); i < n; i++ {
		name, t, err := decodeTensor(r, alloc)
		if err != nil {
			return k, nil, err
		}
		out[name] = t
	}
	return k, out, nil
}

func decodeTensor(r io.Reader, alloc func(n int) []float32) (string, *graph.Tensor, error) {
	var u4 [4]byte
	read4 := func() (uint32, error) {
		if _, err := io.ReadFull(r, u4[:]); err != nil {
			return 0, err
		}
		return binary.LittleEndian.Uint32(u4[:]), nil
	}
	nl, err := read4()
	if err != nil {
		return "", nil, err
	}
	if nl > 1<<16 {
		return "", nil, fmt.Errorf("tensor name of %d bytes", nl)
	}
	nb := make([]byte, nl)
	if _, err := io.ReadFull(r, nb); err != nil {
		return "", nil, err
	}
	dt, err := read4()
	if err != nil {
		return "", nil, err
	}
	rank, err := read4()
	if err != nil {
		return "", nil, err
	}
	if rank > 64 {
		return "", nil, fmt.Errorf("tensor %q of rank %d", nb, rank)
	}
	shape := make([]int, rank)
	db := make([]byte, 8*rank)
	if _, err := io.ReadFull(r, db); err != nil {
		return "", nil, err
	}
	for i := range shape {
		shape[i] = int(binary.LittleEndian.Uint64(db[8*i:]))
	}
	need, valid := tensorBytes(graph.DType(dt), shape)
	if !valid {
		return "", nil, fmt.Errorf("tensor %q: shape %v of %v has no size", nb, shape, graph.DType(dt))
	}
	if br, ok := r.(*bytesReader); ok {
		// A message in memory holds its tensors' bytes: a shape that
		// needs more is corrupt, refused before anything is allocated.
		if need > int64(len(br.b)-br.i) {
			return "", nil, fmt.Errorf("tensor %q: shape %v of %v needs more than the %d bytes left in the message", nb, shape, graph.DType(dt), len(br.b)-br.i)
		}
	} else if need > streamChunk {
		// From a connection, a large tensor's bytes are read first (in
		// chunks, as they arrive) and only then given a tensor: a corrupt
		// header that claims more than the peer sends costs no more memory
		// than the bytes that did arrive.
		chunks, err := readChunks(r, need)
		if err != nil {
			return "", nil, fmt.Errorf("tensor %q: shape %v of %v (%d bytes): %w", nb, shape, graph.DType(dt), need, err)
		}
		r = io.MultiReader(chunks...)
	}
	var t *graph.Tensor
	if graph.DType(dt) == graph.Float32 && alloc != nil {
		n := 1
		for _, d := range shape {
			if d < 0 || (d > 0 && n > math.MaxInt32/d) {
				n = -1 // NewTensor below names the bad shape
				break
			}
			n *= d
		}
		if buf := alloc(n); n >= 0 && buf != nil {
			t = graph.FromFloat32(buf, shape...)
		}
	}
	if t == nil {
		if t, err = graph.NewTensor(graph.DType(dt), shape); err != nil {
			return "", nil, fmt.Errorf("tensor %q: %w", nb, err)
		}
	}
	n := t.Size()
	switch s := t.Data.(type) {
	case []float32:
		if err := readFloat32s(r, s); err != nil {
			return "", nil, err
		}
	case []float64:
		b := make([]byte, 8*n)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", nil, err
		}
		for i := range s {
			s[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
	case []int64:
		b := make([]byte, 8*n)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", nil, err
		}
		for i := range s {
			s[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
	case []int32:
		b := make([]byte, 4*n)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", nil, err
		}
		for i := range s {
			s[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case []bool:
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", nil, err
		}
		for i := range s {
			s[i] = b[i] != 0
		}
	default:
		return "", nil, fmt.Errorf("tensor %q: dtype %v cannot be received", nb, t.DType)
	}
	return string(nb), t, nil
}

// EncodeTensors serialises named tensors (for gathering stage weights to
// one rank); DecodeTensors reads them back.
func EncodeTensors(tensors map[string]*graph.Tensor) ([]byte, error) {
	var b bytesBuffer
	if err := encodeMessage(&b, MsgKey{}, tensors); err != nil {
		return nil, err
	}
	return b.b, nil
}

// DecodeTensors reads what EncodeTensors wrote.
func DecodeTensors(b []byte) (map[string]*graph.Tensor, error) {
	_, out, err := decodeMessage(&bytesReader{b: b}, nil)
	return out, err
}

type bytesBuffer struct{ b []byte }

func (w *bytesBuffer) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// tensorBytes is the size of a tensor of dtype d and shape (0 for a dtype
// without a fixed size, which the decoder refuses by name), false when a
// dimension is negative or the size overflows.
func tensorBytes(d graph.DType, shape []int) (int64, bool) {
	size := int64(d.Size())
	if size <= 0 {
		return 0, true
	}
	n := size
	for _, x := range shape {
		if x < 0 || (x > 0 && n > math.MaxInt64/int64(x)) {
			return 0, false
		}
		n *= int64(x)
	}
	return n, true
}

// streamChunk is the largest tensor decodeTensor gives storage before its
// bytes have arrived from a connection, and the chunk size readChunks
// reads larger ones in (a variable for the tests).
var streamChunk int64 = 64 << 20

// readChunks reads n bytes from r in chunks of at most streamChunk, each
// allocated only once the previous one is full.
func readChunks(r io.Reader, n int64) ([]io.Reader, error) {
	var out []io.Reader
	for n > 0 {
		c := make([]byte, min(n, streamChunk))
		if _, err := io.ReadFull(r, c); err != nil {
			return nil, err
		}
		out = append(out, &bytesReader{b: c})
		n -= int64(len(c))
	}
	return out, nil
}

type bytesReader struct {
	b []byte
	i int
}

func (r *bytesReader) Read(p []byte) (int, error) {
	if r.i >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.i:])
	r.i += n
	return n, nil
}

// floatChunk is how many float32 values writeFloat32s and readFloat32s
// move through their buffer at a time.
const floatChunk = 1 << 14

// chunkBufs are writeFloat32s's and readFloat32s's buffers, shared so
// that sending or receiving a tensor allocates nothing.
var chunkBufs = sync.Pool{New: func() any { return new([4 * floatChunk]byte) }}

// writeFloat32s writes s little-endian, a chunk at a time.
func writeFloat32s(w io.Writer, s []float32) error {
	box := chunkBufs.Get().(*[4 * floatChunk]byte)
	defer chunkBufs.Put(box)
	buf := box[:]
	for len(s) > 0 {
		n := min(len(s), floatChunk)
		for i, v := range s[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
		if _, err := w.Write(buf[:4*n]); err != nil {
			return err
		}
		s = s[n:]
	}
	return nil
}

// readFloat32s fills s from little-endian bytes, a chunk at a time.
func readFloat32s(r io.Reader, s []float32) error {
	box := chunkBufs.Get().(*[4 * floatChunk]byte)
	defer chunkBufs.Put(box)
	buf := box[:]
	for len(s) > 0 {
		n := min(len(s), floatChunk)
		if _, err := io.ReadFull(r, buf[:4*n]); err != nil {
			return err
		}
		for i := range s[:n] {
			s[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
		}
		s = s[n:]
	}
	return nil
}
