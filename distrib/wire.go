package distrib

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"net"
	"time"
	"unsafe"
)

// protocolVersion changes whenever the bytes on the wire change.
const protocolVersion = 2

const protocolMagic = "onnxtrain-distrib"

// Control messages travel between each rank and rank 0 on the rendezvous
// connection, framed as type (1 byte), length (4 bytes, big endian), JSON.
const (
	msgHello      byte = iota + 1 // rank → 0: join
	msgWelcome                    // 0 → rank: address table
	msgReject                     // 0 → rank: join refused / rendezvous failed
	msgReady                      // rank → 0: ring links made (or failed)
	msgGo                         // 0 → rank: every rank is linked (or one failed)
	msgReport                     // rank → 0: a collective failed here
	msgAbort                      // 0 → rank: the group's verdict
	msgProbe                      // 0 → rank: where are you?
	msgProbeReply                 // rank → 0: here
	msgBye                        // either way: closing cleanly
)

const maxControlFrame = 64 << 20

type helloMsg struct {
	Magic     string
	Version   int
	Rank      int
	WorldSize int
	DataAddr  string
	Debug     bool
	// Settings are what every rank must agree on (Config.Settings).
	Settings []Setting `json:",omitempty"`
}

type welcomeMsg struct {
	Session uint64
	Addrs   []string
}

type rejectMsg struct {
	Reason string
	// Settings says the ranks' settings differ; Reason names them.
	Settings bool `json:",omitempty"`
}

type readyMsg struct{ Err string }

type goMsg struct{ Err string }

type reportMsg struct {
	Op      string
	Seq     uint64
	Step    int64
	Suspect int
	Kind    int
	Detail  string
}

type abortMsg struct {
	Rank int
	Kind int
	Op   string
	Seq  uint64
	Step int64
	Msg  string
}

type probeMsg struct{ ID uint64 }

type probeReplyMsg struct {
	ID       uint64
	Started  uint64
	Finished uint64
	Op       string
}

func writeFrame(c net.Conn, typ byte, v any, deadline time.Time) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 5+len(body))
	buf[0] = typ
	binary.BigEndian.PutUint32(buf[1:5], uint32(len(body)))
	copy(buf[5:], body)
	if err := c.SetWriteDeadline(deadline); err != nil {
		return err
	}
	_, err = c.Write(buf)
	return err
}

func readFrame(r io.Reader) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n > maxControlFrame {
		return 0, nil, fmt.Errorf("control message of %d bytes (type %d) is larger than %d: not an onnxtrain peer?", n, head[0], maxControlFrame)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return head[0], body, nil
}

// readFrameAs reads one frame that must be of type want (or msgReject, whose
// reason becomes the error).
func readFrameAs(r io.Reader, want byte, v any) error {
	typ, body, err := readFrame(r)
	if err != nil {
		return err
	}
	if typ == msgReject && want != msgReject {
		var rej rejectMsg
		if err := json.Unmarshal(body, &rej); err != nil {
			return fmt.Errorf("malformed rejection: %w", err)
		}
		return &rejectedError{reason: rej.Reason, settings: rej.Settings}
	}
	if typ != want {
		return fmt.Errorf("got control message type %d, want %d: not an onnxtrain peer of the same version?", typ, want)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("malformed control message type %d: %w", typ, err)
	}
	return nil
}

type rejectedError struct {
	reason   string
	settings bool
}

func (e *rejectedError) Error() string { return e.reason }

// Ring links open with a fixed 16-byte greeting: magic, rank, session.
const linkMagic = 0x4f4e5854 // "ONXT"

func encodeLinkHello(rank int, session uint64) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint32(b[0:], linkMagic)
	binary.BigEndian.PutUint32(b[4:], uint32(rank))
	binary.BigEndian.PutUint64(b[8:], session)
	return b
}

func decodeLinkHello(b []byte) (rank int, session uint64, ok bool) {
	if len(b) != 16 || binary.BigEndian.Uint32(b[0:]) != linkMagic {
		return 0, 0, false
	}
	return int(binary.BigEndian.Uint32(b[4:])), binary.BigEndian.Uint64(b[8:]), true
}

// Every collective starts with a 32-byte header on every ring link, so that
// a rank that is in a different collective is caught at once. Payloads are
// raw float32 (or bfloat16) in the machine's byte order; the magic, also in
// the machine's order, catches peers of the other order.
const headerSize = 32

// Collective codes in headers.
const (
	opAllReduce uint16 = iota + 1
	opReduceScatter
	opAllGather
	opBroadcast
	opBarrier
	opAllGatherObject
	opGatherObject
	opBroadcastObject
	opDebugCheck
)

var opNames = map[uint16]string{
	opAllReduce:       "AllReduce",
	opReduceScatter:   "ReduceScatter",
	opAllGather:       "AllGather",
	opBroadcast:       "Broadcast",
	opBarrier:         "Barrier",
	opAllGatherObject: "AllGatherObject",
	opGatherObject:    "GatherObject",
	opBroadcastObject: "BroadcastObject",
	opDebugCheck:      "debug length check",
}

const flagBF16 uint16 = 1

type header struct {
	op    uint16
	flags uint16
	seq   uint64
	n     uint64 // elements (float collectives), 0 for objects
	root  uint32
}

func (h header) encode(b []byte) {
	binary.NativeEndian.PutUint32(b[0:], linkMagic)
	binary.NativeEndian.PutUint16(b[4:], h.op)
	binary.NativeEndian.PutUint16(b[6:], h.flags)
	binary.NativeEndian.PutUint64(b[8:], h.seq)
	binary.NativeEndian.PutUint64(b[16:], h.n)
	binary.NativeEndian.PutUint32(b[24:], h.root)
	binary.NativeEndian.PutUint32(b[28:], 0)
}

func decodeHeader(b []byte) (header, error) {
	m := binary.NativeEndian.Uint32(b[0:])
	if m != linkMagic {
		if m == bits.ReverseBytes32(linkMagic) {
			return header{}, fmt.Errorf("the peer's byte order differs from this machine's")
		}
		return header{}, fmt.Errorf("corrupt collective header (magic %#x)", m)
	}
	return header{
		op:    binary.NativeEndian.Uint16(b[4:]),
		flags: binary.NativeEndian.Uint16(b[6:]),
		seq:   binary.NativeEndian.Uint64(b[8:]),
		n:     binary.NativeEndian.Uint64(b[16:]),
		root:  binary.NativeEndian.Uint32(b[24:]),
	}, nil
}

// describe says what a header announces, for mismatch messages.
func (h header) describe() string {
	name := opNames[h.op]
	if name == "" {
		name = fmt.Sprintf("unknown collective %d", h.op)
	}
	s := fmt.Sprintf("%s (collective %d", name, h.seq)
	switch h.op {
	case opAllReduce, opReduceScatter, opAllGather, opBroadcast:
		s += fmt.Sprintf(", %d elements", h.n)
	}
	switch h.op {
	case opBroadcast, opGatherObject, opBroadcastObject:
		s += fmt.Sprintf(", root %d", h.root)
	}
	if h.flags&flagBF16 != 0 {
		s += ", bf16"
	}
	return s + ")"
}

func f32bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4)
}

func u16bytes(u []uint16) []byte {
	if len(u) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&u[0])), len(u)*2)
}
