// Package strangers knocks on a job's ports the way a process that does
// not belong to the job would, for tests: random bytes, a well-formed
// hello without the secret, a handshake with a wrong secret, and a replay
// of a recorded valid handshake. A listener that works refuses each one
// (closes the connection) and the job goes on unchanged.
package strangers

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"time"

	"github.com/onnxtrain/onnxtrain/distrib"
)

// Knock is one way of knocking on a port.
type Knock struct {
	// Name says what it sends.
	Name string
	// Reason is a part of the reason the listener logs when it refuses it.
	Reason string
	send   func(c net.Conn) error
}

// Sizes of the handshake's messages (see distrib's auth.go): greeting
// (magic, version, nonce), challenge (greeting and proof), proof.
const (
	magic     = "ONXTAUTH"
	greetSize = len(magic) + 1 + 32
	challSize = greetSize + 32
	proofSize = 32
)

// Knocks returns the four knocks. The replay is of a handshake recorded
// with secret, the job's own; the random bytes come from seed.
func Knocks(secret []byte, seed int64) ([]Knock, error) {
	rec, err := Record(secret)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewSource(seed))
	garbage := make([]byte, 256)
	rng.Read(garbage)
	return []Knock{
		{Name: "random bytes", Reason: "not an onnxtrain handshake", send: func(c net.Conn) error {
			_, err := c.Write(garbage)
			return err
		}},
		{Name: "a well-formed hello claiming rank 1, without the secret", Reason: "not an onnxtrain handshake", send: func(c net.Conn) error {
			_, err := c.Write(Hello(1, 2))
			return err
		}},
		{Name: "a handshake with a wrong secret", Reason: "its proof does not match this job's secret", send: func(c net.Conn) error {
			return wrongSecret(c, []byte("not-the-jobs-secret-at-all"))
		}},
		{Name: "a replay of a recorded valid handshake", Reason: "its proof does not match this job's secret", send: func(c net.Conn) error {
			return replay(c, rec)
		}},
	}, nil
}

// Hello is a control frame as a rank sends it to join (type 1, length,
// JSON), claiming rank of world, sent without any handshake.
func Hello(rank, world int) []byte {
	body, _ := json.Marshal(map[string]any{"Magic": "onnxtrain-distrib", "Version": 2, "Rank": rank,
		"WorldSize": world, "DataAddr": "127.0.0.1:9", "Debug": false})
	b := make([]byte, 5+len(body))
	b[0] = 1
	binary.BigEndian.PutUint32(b[1:], uint32(len(body)))
	copy(b[5:], body)
	return b
}

// Recording is what the dialer sent in a valid handshake.
type Recording struct{ Greeting, Proof []byte }

// Record runs a valid handshake with secret between two ends of a pipe
// and returns what the dialer sent.
func Record(secret []byte) (Recording, error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	rc := &recorder{Conn: a}
	done := make(chan error, 1)
	go func() { done <- distrib.ServerHandshake(b, secret, time.Now().Add(10*time.Second)) }()
	if err := distrib.ClientHandshake(rc, secret, time.Now().Add(10*time.Second)); err != nil {
		return Recording{}, fmt.Errorf("strangers: recording a handshake: %w", err)
	}
	if err := <-done; err != nil {
		return Recording{}, fmt.Errorf("strangers: recording a handshake: %w", err)
	}
	if len(rc.sent) != greetSize+proofSize {
		return Recording{}, fmt.Errorf("strangers: the dialer sent %d bytes, want %d", len(rc.sent), greetSize+proofSize)
	}
	return Recording{Greeting: rc.sent[:greetSize], Proof: rc.sent[greetSize:]}, nil
}

type recorder struct {
	net.Conn
	sent []byte
}

func (r *recorder) Write(p []byte) (int, error) {
	r.sent = append(r.sent, p...)
	return r.Conn.Write(p)
}

func replay(c net.Conn, rec Recording) error {
	if _, err := c.Write(rec.Greeting); err != nil {
		return err
	}
	chal := make([]byte, challSize)
	if _, err := io.ReadFull(c, chal); err != nil {
		return fmt.Errorf("no challenge: %w", err)
	}
	_, err := c.Write(rec.Proof)
	return err
}

// wrongSecret greets properly and answers the challenge with a proof made
// from the wrong secret.
func wrongSecret(c net.Conn, secret []byte) error {
	greet := make([]byte, greetSize)
	copy(greet, magic)
	greet[len(magic)] = 1
	rand.Read(greet[len(magic)+1:])
	if _, err := c.Write(greet); err != nil {
		return err
	}
	chal := make([]byte, challSize)
	if _, err := io.ReadFull(c, chal); err != nil {
		return fmt.Errorf("no challenge: %w", err)
	}
	m := hmac.New(sha256.New, secret)
	m.Write(chal[len(magic)+1 : greetSize])
	m.Write(greet[len(magic)+1:])
	_, err := c.Write(m.Sum(nil))
	return err
}

// ErrNotRefused: the listener kept the connection open.
var ErrNotRefused = errors.New("strangers: the listener did not close the connection")

// Try dials addr, knocks, and waits up to wait for the listener to close
// the connection. It returns the local address of the connection (what the
// listener logs), and an error when the dial or the knock failed or the
// connection stayed open.
func Try(addr string, k Knock, wait time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		return "", fmt.Errorf("strangers: %s: %w", k.Name, err)
	}
	defer c.Close()
	local := c.LocalAddr().String()
	_ = c.SetDeadline(time.Now().Add(wait))
	if err := k.send(c); err != nil && !closedByPeer(err) {
		return local, fmt.Errorf("strangers: %s: %w", k.Name, err)
	}
	// Whatever comes back ('N', a rejection), the connection must end.
	_, err = io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return local, fmt.Errorf("%w within %s (%s)", ErrNotRefused, wait, k.Name)
	}
	return local, nil
}

// Stall dials addr and sends nothing; it returns once the listener closes
// the connection, or an error after wait.
func Stall(addr string, wait time.Duration) (string, error) {
	return Try(addr, Knock{Name: "silence", send: func(net.Conn) error { return nil }}, wait)
}

func closedByPeer(err error) bool {
	var ne *net.OpError
	return errors.Is(err, io.EOF) || errors.As(err, &ne)
}
