package distrib

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// The job's secret. Every connection between the processes of a job (the
// rendezvous, the control channel, the ring links, pipeline links) starts
// with a challenge–response over it, before any command or tensor is read.
const (
	// SecretVar names the variable that holds the job's secret.
	SecretVar = "ONNXTRAIN_DIST_SECRET"
	// SecretFileVar names the variable that holds the path of a file with
	// the job's secret (a mounted Kubernetes Secret, say).
	SecretFileVar = "ONNXTRAIN_DIST_SECRET_FILE"
	// MinSecretBytes is the shortest secret accepted.
	MinSecretBytes = 16
	// DefaultHandshakeTimeout bounds how long a listener waits for a new
	// connection to complete the handshake before closing it.
	DefaultHandshakeTimeout = 10 * time.Second
)

// ErrAuth marks a failed handshake: the other end does not hold the job's
// secret, is not an onnxtrain process, replayed an old handshake, or
// stalled.
var ErrAuth = errors.New("distrib: handshake failed")

// AuthError is a failed handshake. Reason says why, for logs and errors.
type AuthError struct{ Reason string }

func (e *AuthError) Error() string { return e.Reason }

// Unwrap makes errors.Is(err, ErrAuth) true.
func (e *AuthError) Unwrap() error { return ErrAuth }

// The handshake, on a connection from a dialer to a listener:
//
//	dialer → listener: "ONXTAUTH", version (1 byte), nonce D (32 bytes)
//	listener → dialer: "ONXTAUTH", version, nonce L (32), HMAC(secret, "listener", D, L)
//	dialer → listener: HMAC(secret, "dialer", L, D)
//	listener → dialer: 'Y' (admitted) or 'N' (refused, then closed)
//
// HMAC is HMAC-SHA-256 over the magic, the version, the role and the two
// nonces. Each side proves it holds the secret over the nonce the other
// side just drew, so a recorded handshake cannot be replayed, and the roles
// in the MACs keep one side's proof from serving as the other's.
const (
	authMagic   = "ONXTAUTH"
	authVersion = 1
	nonceSize   = 32
	macSize     = sha256.Size
	helloSize   = len(authMagic) + 1 + nonceSize
	challSize   = helloSize + macSize
	authOK      = 'Y'
	authRefused = 'N'
)

func authMAC(secret []byte, role string, first, second []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(authMagic))
	m.Write([]byte{authVersion, byte(len(role))})
	m.Write([]byte(role))
	m.Write(first)
	m.Write(second)
	return m.Sum(nil)
}

func authGreeting() ([]byte, error) {
	b := make([]byte, helloSize)
	copy(b, authMagic)
	b[len(authMagic)] = authVersion
	if _, err := rand.Read(b[len(authMagic)+1:]); err != nil {
		return nil, fmt.Errorf("distrib: drawing a handshake nonce: %w", err)
	}
	return b, nil
}

// checkGreeting checks the magic and version of a greeting; it returns the
// nonce.
func checkGreeting(b []byte) ([]byte, error) {
	if string(b[:len(authMagic)]) != authMagic {
		return nil, &AuthError{fmt.Sprintf("not an onnxtrain handshake (it began with %q)", b[:len(authMagic)])}
	}
	if v := b[len(authMagic)]; v != authVersion {
		return nil, &AuthError{fmt.Sprintf("handshake version %d, this process speaks version %d", v, authVersion)}
	}
	return b[len(authMagic)+1 : helloSize], nil
}

// ioAuthError turns a read or write failure during the handshake into an
// AuthError that says what happened.
func ioAuthError(err error, waitingFor string) error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return &AuthError{fmt.Sprintf("no %s before the handshake deadline", waitingFor)}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return &AuthError{fmt.Sprintf("the connection closed while waiting for its %s", waitingFor)}
	}
	return &AuthError{fmt.Sprintf("waiting for its %s: %v", waitingFor, err)}
}

// ClientHandshake runs the dialer's side of the handshake on c, a
// connection this process opened: it proves that it holds secret and checks
// that the listener holds it too. It returns an error wrapping ErrAuth when
// the listener does not prove it, refuses this side's proof, or does not
// answer by deadline (zero: no deadline). c's deadlines are cleared on
// return.
func ClientHandshake(c net.Conn, secret []byte, deadline time.Time) error {
	_ = c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	greet, err := authGreeting()
	if err != nil {
		return err
	}
	own := greet[len(authMagic)+1:]
	if _, err := c.Write(greet); err != nil {
		return ioAuthError(err, "greeting to be taken")
	}
	chal := make([]byte, challSize)
	if _, err := io.ReadFull(c, chal); err != nil {
		return ioAuthError(err, "challenge")
	}
	theirs, err := checkGreeting(chal)
	if err != nil {
		return err
	}
	if !hmac.Equal(chal[helloSize:], authMAC(secret, "listener", own, theirs)) {
		return &AuthError{"the other end does not hold this job's secret (" + SecretVar + " differs between the processes, or only one of them has it)"}
	}
	if _, err := c.Write(authMAC(secret, "dialer", theirs, own)); err != nil {
		return ioAuthError(err, "proof to be taken")
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return ioAuthError(err, "verdict")
	}
	if ack[0] != authOK {
		return &AuthError{"the other end refused this process's proof of the job's secret"}
	}
	return nil
}

// ServerHandshake runs the listener's side of the handshake on c, a
// connection this process accepted: the dialer must prove that it holds
// secret by deadline. It returns an error wrapping ErrAuth (an *AuthError
// whose Reason says why) when it does not; the caller then closes c. c's
// deadlines are cleared on return.
//
// Pipeline links and any other connection between the processes of a job
// call ClientHandshake on the dialing side and ServerHandshake on the
// accepting side, before anything else is sent.
func ServerHandshake(c net.Conn, secret []byte, deadline time.Time) error {
	_ = c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	// The magic first, so that a stranger's bytes are refused at once.
	greet := make([]byte, helloSize)
	m := len(authMagic)
	if n, err := io.ReadFull(c, greet[:m]); err != nil {
		if n > 0 && string(greet[:n]) != authMagic[:n] {
			return &AuthError{fmt.Sprintf("not an onnxtrain handshake (it began with %q)", greet[:n])}
		}
		return ioAuthError(err, "greeting")
	}
	if string(greet[:m]) != authMagic {
		return &AuthError{fmt.Sprintf("not an onnxtrain handshake (it began with %q)", greet[:m])}
	}
	if _, err := io.ReadFull(c, greet[m:]); err != nil {
		return ioAuthError(err, "greeting")
	}
	theirs, err := checkGreeting(greet)
	if err != nil {
		return err
	}
	chal, err := authGreeting()
	if err != nil {
		return err
	}
	own := chal[len(authMagic)+1:]
	chal = append(chal, authMAC(secret, "listener", theirs, own)...)
	if _, err := c.Write(chal); err != nil {
		return ioAuthError(err, "challenge to be taken")
	}
	proof := make([]byte, macSize)
	if _, err := io.ReadFull(c, proof); err != nil {
		return ioAuthError(err, "proof")
	}
	if !hmac.Equal(proof, authMAC(secret, "dialer", own, theirs)) {
		_, _ = c.Write([]byte{authRefused})
		return &AuthError{"its proof does not match this job's secret (a wrong or missing secret, or a replayed handshake)"}
	}
	if _, err := c.Write([]byte{authOK}); err != nil {
		return ioAuthError(err, "verdict to be taken")
	}
	return nil
}

// ReadSecretFile reads a secret from path: the file's bytes without
// trailing white space (a final newline, say), at least MinSecretBytes.
func ReadSecretFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("distrib: reading the job's secret: %w", err)
	}
	return checkSecret(b, "the secret file "+path)
}

func checkSecret(b []byte, from string) ([]byte, error) {
	s := strings.TrimRight(string(b), " \t\r\n")
	switch {
	case s == "":
		return nil, fmt.Errorf("distrib: %s is empty: put the job's secret in it (e.g. the output of `openssl rand -hex 32`)", from)
	case len(s) < MinSecretBytes:
		return nil, fmt.Errorf("distrib: %s holds %d bytes; a secret needs at least %d (e.g. the output of `openssl rand -hex 32`)", from, len(s), MinSecretBytes)
	}
	return []byte(s), nil
}

// SecretFromEnv returns the job's secret from the environment lookup
// reads: SecretVar, or the file SecretFileVar names. It returns nil, nil
// when neither is set, and an error when both are, when the file cannot be
// read, or when the secret is empty or shorter than MinSecretBytes.
func SecretFromEnv(lookup func(string) (string, bool)) ([]byte, error) {
	v, hasVar := lookup(SecretVar)
	f, hasFile := lookup(SecretFileVar)
	switch {
	case hasVar && hasFile:
		return nil, fmt.Errorf("distrib: both %s and %s are set: set only one", SecretVar, SecretFileVar)
	case hasFile:
		if strings.TrimSpace(f) == "" {
			return nil, fmt.Errorf("distrib: %s is set but empty: name the file holding the job's secret", SecretFileVar)
		}
		return ReadSecretFile(f)
	case hasVar:
		return checkSecret([]byte(v), SecretVar)
	}
	return nil, nil
}

// NewSecret draws a random secret (64 hexadecimal digits), for a launcher
// that starts every process of a job itself.
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("distrib: drawing a secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}
