package distrib

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// handshake runs both sides over a pipe and returns their errors.
func handshake(dialerSecret, listenerSecret []byte) (dialer, listener error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		err := ServerHandshake(b, listenerSecret, time.Now().Add(10*time.Second))
		if err != nil {
			b.Close()
		}
		done <- err
	}()
	dialer = ClientHandshake(a, dialerSecret, time.Now().Add(10*time.Second))
	if dialer != nil {
		a.Close()
	}
	return dialer, <-done
}

func TestHandshake(t *testing.T) {
	secret := []byte("handshake-test-secret-0123")
	d, l := handshake(secret, secret)
	require.NoError(t, d)
	require.NoError(t, l)

	// Without a secret on both sides it runs with an empty key.
	d, l = handshake(nil, nil)
	require.NoError(t, d)
	require.NoError(t, l)

	// Different secrets, or a secret on one side only: the dialer sees that
	// the listener cannot prove it and sends no proof of its own.
	for _, pair := range [][2][]byte{{secret, []byte("another-secret-of-enough-size")}, {nil, secret}, {secret, nil}} {
		d, l = handshake(pair[0], pair[1])
		require.ErrorIs(t, d, ErrAuth)
		assert.Contains(t, d.Error(), "the other end does not hold this job's secret")
		require.ErrorIs(t, l, ErrAuth)
		assert.Contains(t, l.Error(), "the connection closed while waiting for its proof")
	}
}

// TestHandshakeReflection: the listener's own proof, sent back to it, is
// not a dialer's proof (the role is part of the MAC), even with the nonces
// the attacker chose.
func TestHandshakeReflection(t *testing.T) {
	secret := []byte("reflection-test-secret-0123")
	a, b := net.Pipe()
	defer a.Close()
	done := make(chan error, 1)
	go func() {
		done <- ServerHandshake(b, secret, time.Now().Add(10*time.Second))
		b.Close()
	}()
	greet, err := authGreeting()
	require.NoError(t, err)
	_, err = a.Write(greet)
	require.NoError(t, err)
	chal := make([]byte, challSize)
	_, err = io.ReadFull(a, chal)
	require.NoError(t, err)
	_, err = a.Write(chal[helloSize:]) // the listener's proof, reflected
	require.NoError(t, err)
	verdict := make([]byte, 1)
	_, err = io.ReadFull(a, verdict)
	require.NoError(t, err)
	assert.Equal(t, byte(authRefused), verdict[0])
	err = <-done
	require.ErrorIs(t, err, ErrAuth)
	assert.Contains(t, err.Error(), "its proof does not match this job's secret")
}

// TestHandshakeDeadline: a dialer that stalls halfway is refused at the
// deadline.
func TestHandshakeDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _, _ = a.Write([]byte(authMagic)) }() // then nothing
	err := ServerHandshake(b, nil, time.Now().Add(200*time.Millisecond))
	require.ErrorIs(t, err, ErrAuth)
	assert.Contains(t, err.Error(), "no greeting before the handshake deadline")
}

func TestSecretFromEnv(t *testing.T) {
	env := func(kv map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}
	s, err := SecretFromEnv(env(nil))
	require.NoError(t, err)
	assert.Nil(t, s)
	s, err = SecretFromEnv(env(map[string]string{SecretVar: "0123456789abcdef"}))
	require.NoError(t, err)
	assert.Equal(t, []byte("0123456789abcdef"), s)
	_, err = SecretFromEnv(env(map[string]string{SecretVar: "0123456789abcde"}))
	assert.ErrorContains(t, err, "ONNXTRAIN_DIST_SECRET holds 15 bytes; a secret needs at least 16")
	_, err = SecretFromEnv(env(map[string]string{SecretFileVar: ""}))
	assert.ErrorContains(t, err, "ONNXTRAIN_DIST_SECRET_FILE is set but empty")

	// FromEnv reads it for the group.
	cfg, err := configFromEnv(env(map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", SecretVar: "0123456789abcdef-x"}))
	require.NoError(t, err)
	assert.Equal(t, []byte("0123456789abcdef-x"), cfg.Secret)
}

// benchConnect measures a loopback connection (TCP_NODELAY, as the group
// sets) followed by exchange. BenchmarkConnectHandshake against
// BenchmarkConnectSameBytes (the handshake's four messages, of its sizes,
// without the cryptography), measured in the same run, is what the
// handshake's HMACs and nonces cost.
func benchConnect(b *testing.B, exchange func(dialer, listener net.Conn) error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer l.Close()
	conns := make(chan net.Conn)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(conns)
				return
			}
			tuneConn(c)
			conns <- c
		}
	}()
	b.ResetTimer()
	for range b.N {
		d, err := net.Dial("tcp", l.Addr().String())
		require.NoError(b, err)
		tuneConn(d)
		a := <-conns
		require.NoError(b, exchange(d, a))
		d.Close()
		a.Close()
	}
}

func BenchmarkConnectSameBytes(b *testing.B) {
	benchConnect(b, func(d, a net.Conn) error {
		go func() {
			buf := make([]byte, challSize)
			_, _ = io.ReadFull(a, buf[:helloSize])
			_, _ = a.Write(buf[:challSize])
			_, _ = io.ReadFull(a, buf[:macSize])
			_, _ = a.Write(buf[:1])
		}()
		buf := make([]byte, challSize)
		if _, err := d.Write(buf[:helloSize]); err != nil {
			return err
		}
		if _, err := io.ReadFull(d, buf[:challSize]); err != nil {
			return err
		}
		if _, err := d.Write(buf[:macSize]); err != nil {
			return err
		}
		_, err := io.ReadFull(d, buf[:1])
		return err
	})
}

func BenchmarkConnectHandshake(b *testing.B) {
	secret := []byte("benchmark-secret-0123456789")
	benchConnect(b, func(d, a net.Conn) error {
		done := make(chan error, 1)
		go func() { done <- ServerHandshake(a, secret, time.Now().Add(10*time.Second)) }()
		if err := ClientHandshake(d, secret, time.Now().Add(10*time.Second)); err != nil {
			return err
		}
		return <-done
	})
}
