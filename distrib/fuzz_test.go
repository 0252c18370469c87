package distrib

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// byteConn is a connection whose peer sent b and reads nothing back.
type byteConn struct {
	r *bytes.Reader
	net.Conn
}

func (c *byteConn) Read(p []byte) (int, error)             { return c.r.Read(p) }
func (c *byteConn) Write(p []byte) (int, error)            { return len(p), nil }
func (c *byteConn) SetDeadline(time.Time) error            { return nil }
func (c *byteConn) SetReadDeadline(time.Time) error        { return nil }
func (c *byteConn) SetWriteDeadline(time.Time) error       { return nil }
func (c *byteConn) Close() error                           { return nil }
func (c *byteConn) RemoteAddr() net.Addr                   { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9} }
func (c *byteConn) LocalAddr() net.Addr                    { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 10} }
func (c *byteConn) SetKeepAlive(bool) error                { return nil }
func (c *byteConn) SetKeepAlivePeriod(time.Duration) error { return nil }

// FuzzWireDecode feeds arbitrary bytes to everything that decodes what a
// peer (or a stranger) sends: the handshake's listener side, control
// frames and their messages, the ring's link greeting and collective
// header. Nothing may panic; the handshake must refuse (no input can hold
// a proof for a fresh nonce); what decodes must encode back to the same
// bytes. The seed corpus is in testdata/fuzz/FuzzWireDecode.
func FuzzWireDecode(f *testing.F) {
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		// The handshake, with and without a secret.
		for _, secret := range [][]byte{nil, []byte("fuzz-secret-0123456789")} {
			err := ServerHandshake(&byteConn{r: bytes.NewReader(data)}, secret, time.Time{})
			require.Error(t, err, "a stranger's bytes passed the handshake")
			assert.True(t, errors.Is(err, ErrAuth), "%v", err)
		}

		// Control frames, one after another, decoded as their receivers do.
		r := bytes.NewReader(data)
		for range 8 {
			typ, body, err := readFrame(r)
			if err != nil {
				break
			}
			require.LessOrEqual(t, len(body), maxControlFrame)
			var v any
			switch typ {
			case msgHello:
				var h helloMsg
				if json.Unmarshal(body, &h) == nil {
					assert.Empty(t, compareSettings([][]Setting{h.Settings, h.Settings}), "a rank disagrees with itself")
				}
				continue
			case msgWelcome:
				v = &welcomeMsg{}
			case msgReject:
				v = &rejectMsg{}
			case msgReady:
				v = &readyMsg{}
			case msgGo:
				v = &goMsg{}
			case msgReport:
				v = &reportMsg{}
			case msgAbort:
				var a abortMsg
				if json.Unmarshal(body, &a) == nil {
					_ = kindError(a.Kind)
				}
				continue
			case msgProbe:
				v = &probeMsg{}
			case msgProbeReply:
				v = &probeReplyMsg{}
			default:
				continue
			}
			_ = json.Unmarshal(body, v)
		}
		var h helloMsg
		_ = readFrameAs(bytes.NewReader(data), msgHello, &h)

		// The ring: link greeting and collective header.
		if len(data) >= 16 {
			if rank, session, ok := decodeLinkHello(data[:16]); ok {
				assert.Equal(t, data[:16], encodeLinkHello(rank, session))
			}
		}
		if len(data) >= headerSize {
			if hdr, err := decodeHeader(data[:headerSize]); err == nil {
				var b [headerSize]byte
				hdr.encode(b[:])
				assert.Equal(t, data[:28], b[:28])
				_ = hdr.describe()
			}
		}
		_, _ = io.Copy(io.Discard, r)
	})
}
