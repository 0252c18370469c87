package distrib_test

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/distrib"
	"github.com/onnxtrain/onnxtrain/distrib/strangers"
)

const testSecret = "the-jobs-own-secret-for-this-test"

// job is a world of in-process ranks on loopback that runs a fixed chain of
// collectives; attack, when not nil, runs during the rendezvous (after
// ranks 0..n-2 started, before the last one) and in the middle of the
// collectives.
type job struct {
	n      int
	log    *logrus.Logger
	hook   *logtest.Hook
	master string
}

func newJob(n int) *job {
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	return &job{n: n, log: log, hook: hook}
}

// peerPort waits for rank's peer port to open and returns its address.
func (j *job) peerPort(t *testing.T, rank int) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, e := range j.hook.AllEntries() {
			if e.Message == "distrib: peer port open" && e.Data["rank"] == rank {
				return e.Data["addr"].(string)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("rank %d never opened its peer port", rank)
	return ""
}

// run returns every rank's result: the sum over iterations of AllReduce
// means of rank-dependent data, and a broadcast object.
func (j *job) run(t *testing.T, attack func(phase string)) [][]float32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	j.master = l.Addr().String()
	port := l.Addr().(*net.TCPAddr).Port
	groups := make([]*distrib.Group, j.n)
	errs := make([]error, j.n)
	var wg sync.WaitGroup
	start := func(r int) {
		cfg := distrib.Config{Rank: r, WorldSize: j.n, MasterAddr: "127.0.0.1", MasterPort: port, Timeout: time.Minute,
			Secret: []byte(testSecret), HandshakeTimeout: time.Second, Logger: j.log, ChunkBytes: 4096}
		if r == 0 {
			cfg.Listener = l
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			groups[r], errs[r] = distrib.Init(context.Background(), cfg)
		}()
	}
	for r := 0; r < j.n-1; r++ {
		start(r)
	}
	if attack != nil {
		attack("rendezvous")
	}
	start(j.n - 1)
	wg.Wait()
	for r := range j.n {
		require.NoError(t, errs[r], "rank %d", r)
	}
	defer func() {
		for _, g := range groups {
			g.Close()
		}
	}()

	const iters, attackFrom, attackBy = 120, 10, 110
	attacking := make(chan struct{})
	attacked := make(chan struct{})
	if attack == nil {
		close(attacked)
	} else {
		go func() {
			<-attacking
			attack("training")
			close(attacked)
		}()
	}
	out := make([][]float32, j.n)
	var once sync.Once
	errs = make([]error, j.n)
	for r, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acc := make([]float32, 3000)
			rng := rand.New(rand.NewSource(int64(r)))
			buf := make([]float32, len(acc))
			for it := range iters {
				if it == attackFrom {
					once.Do(func() { close(attacking) })
				}
				if it == attackBy {
					<-attacked
				}
				for i := range buf {
					buf[i] = float32(rng.NormFloat64())
				}
				if err := g.AllReduce(context.Background(), buf, distrib.Mean); err != nil {
					errs[r] = err
					return
				}
				for i := range acc {
					acc[i] += buf[i]
				}
			}
			obj, err := g.BroadcastObject(context.Background(), []byte(fmt.Sprint(acc[0])), 0)
			if err != nil {
				errs[r] = err
				return
			}
			out[r] = append(acc, float32(len(obj)))
		}()
	}
	wg.Wait()
	for r := range j.n {
		require.NoError(t, errs[r], "rank %d", r)
	}
	return out
}

// mark is where the next log record will go: a refusal is looked for only
// among the records after the mark taken before its connection was dialled.
func (j *job) mark() int { return len(j.hook.AllEntries()) }

// refusal waits for the log record, at or after since, of the refusal of
// the connection from local on the given port and returns its reason.
// Records before since are not read: the kernel hands out the same
// ephemeral local port again for a connection to another listener (rank
// 0's and rank 1's peer ports are both "the peer port"), so an earlier
// knock's record can name the same address.
func (j *job) refusal(t *testing.T, since int, local, port, what string) string {
	t.Helper()
	want := fmt.Sprintf("distrib: refused a connection from %s on the %s: ", local, port)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		entries := j.hook.AllEntries()
		for _, e := range entries[min(since, len(entries)):] {
			if strings.HasPrefix(e.Message, want) {
				assert.Equal(t, logrus.WarnLevel, e.Level, what)
				return strings.TrimPrefix(e.Message, want)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Errorf("%s on the %s: no record %q…", what, port, want)
	return ""
}

// silent is the reason a listener gives for a connection that sent nothing
// within the handshake timeout.
const silent = "no greeting before the handshake deadline"

// knock sends k to addr and checks the reason the listener logs for
// refusing it. A knock whose bytes the listener did not see within its
// one-second handshake timeout is refused as silent; on a loaded machine
// (CI's two cores running other packages' tests beside this one) the
// knocking or the accepting goroutine can be held that long between the
// dial and the write or the read, so such a refusal is retried, up to
// four knocks, before it counts as a failure.
func (j *job) knock(t *testing.T, addr, port string, k strangers.Knock, what string) {
	t.Helper()
	for try := 1; ; try++ {
		since := j.mark()
		local, err := strangers.Try(addr, k, 20*time.Second)
		require.NoError(t, err, what)
		reason := j.refusal(t, since, local, port, what)
		if strings.Contains(reason, silent) && !strings.Contains(k.Reason, silent) && try < 4 {
			t.Logf("%s on the %s: refused as silent (try %d), knocking again", what, port, try)
			continue
		}
		assert.Contains(t, reason, k.Reason, what)
		return
	}
}

// TestStrangersAreRefused: during the rendezvous and in the middle of a
// chain of collectives, a client knocks on rank 0's rendezvous port and on
// a peer port with random bytes, a well-formed hello without the secret, a
// handshake with a wrong secret, a replay of a recorded valid handshake,
// and silence. Each connection is closed and logged with its address and
// the reason; the results are bit-identical to an undisturbed run.
func TestStrangersAreRefused(t *testing.T) {
	const n = 3
	want := newJob(n).run(t, nil)

	j := newJob(n)
	knocks, err := strangers.Knocks([]byte(testSecret), 7)
	require.NoError(t, err)
	var rounds []string
	attack := func(phase string) {
		rounds = append(rounds, phase)
		ports := []struct{ name, addr string }{
			{"rendezvous port", j.master},
			{"peer port", j.peerPort(t, 1)},
		}
		if phase == "training" {
			ports = append(ports, struct{ name, addr string }{"peer port", j.peerPort(t, 0)})
		}
		for _, p := range ports {
			for _, k := range knocks {
				j.knock(t, p.addr, p.name, k, fmt.Sprintf("%s: %s", phase, k.Name))
			}
			since := j.mark()
			local, err := strangers.Stall(p.addr, 20*time.Second)
			require.NoError(t, err, "%s: silence", phase)
			assert.Contains(t, j.refusal(t, since, local, p.name, phase+": silence"), silent, phase+": silence")
		}
		if phase == "training" {
			// A process that holds the secret but comes after the group
			// formed is told why.
			c, err := net.Dial("tcp", j.master)
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, distrib.ClientHandshake(c, []byte(testSecret), time.Now().Add(20*time.Second)))
			_, err = c.Write(strangers.Hello(1, n))
			require.NoError(t, err)
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			b := make([]byte, 512)
			k, _ := c.Read(b)
			assert.Contains(t, string(b[:k]), "the group of 3 processes has formed already; a process claiming rank 1 cannot join it now")
		}
	}
	got := j.run(t, attack)
	assert.Equal(t, []string{"rendezvous", "training"}, rounds)
	require.Len(t, got, n)
	for r := range n {
		require.Len(t, got[r], len(want[r]))
		for i := range want[r] {
			if math.Float32bits(got[r][i]) != math.Float32bits(want[r][i]) {
				t.Fatalf("rank %d, element %d: %g with strangers, %g without", r, i, got[r][i], want[r][i])
			}
		}
	}
}

// TestWrongSecretRankIsRefused: a rank with another secret cannot join; it
// says the other end does not hold its secret, and rank 0 names the
// refused connection when the rendezvous times out.
func TestWrongSecretRankIsRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, secret := range []string{testSecret, "another-secret-of-enough-length"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := distrib.Config{Rank: r, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: port, Timeout: 3 * time.Second, Secret: []byte(secret)}
			if r == 0 {
				cfg.Listener = l
			}
			_, errs[r] = distrib.Init(context.Background(), cfg)
		}()
	}
	wg.Wait()
	require.Error(t, errs[1])
	assert.ErrorIs(t, errs[1], distrib.ErrAuth)
	assert.Contains(t, errs[1].Error(), "rank 1: the handshake with rank 0 at 127.0.0.1:")
	assert.Contains(t, errs[1].Error(), "the other end does not hold this job's secret")
	require.Error(t, errs[0])
	assert.Regexp(t, `rank 1 of 2 did not join within 3s \(refused connections: 127\.0\.0\.1:\d+: the connection closed while waiting for its proof`, errs[0].Error())
}
