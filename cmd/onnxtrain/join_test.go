//go:build unix

package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/distrib"
	"github.com/onnxtrain/onnxtrain/distrib/strangers"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

const joinTestSecret = "join-test-secret-0123456789abcdef"

// handRank is one worker started by hand with the torchrun environment.
type handRank struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	lines          chan string // rank's stdout lines, when watched
	err            error
	done           chan struct{}
}

// handJob starts ranks by hand the way torchrun would (MASTER_ADDR,
// MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), each
// running this test binary as the CLI with its own arguments, and the
// job's secret in ONNXTRAIN_DIST_SECRET. Rank 0 inherits the master
// listener, which the test then closes on its side.
type handJob struct {
	master string
	port   int
	l      *net.TCPListener
	ranks  []*handRank
}

func newHandJob(t *testing.T) *handJob {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return &handJob{master: l.Addr().String(), port: l.Addr().(*net.TCPAddr).Port, l: l.(*net.TCPListener)}
}

func (j *handJob) start(t *testing.T, ctx context.Context, rank, world int, args []string, watch bool) *handRank {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	h := &handRank{done: make(chan struct{})}
	h.cmd = exec.CommandContext(ctx, self, args...)
	h.cmd.Env = append(os.Environ(), "ONNXTRAIN_TEST_AS_CLI=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(j.port),
		"RANK="+strconv.Itoa(rank), "WORLD_SIZE="+strconv.Itoa(world), "LOCAL_RANK="+strconv.Itoa(rank),
		"LOCAL_WORLD_SIZE="+strconv.Itoa(world), distrib.SecretVar+"="+joinTestSecret)
	if rank == 0 {
		f, err := j.l.File()
		require.NoError(t, err)
		defer f.Close()
		h.cmd.ExtraFiles = []*os.File{f}
		h.cmd.Env = append(h.cmd.Env, distrib.ListenFDVar+"=3")
	}
	h.cmd.Stderr = &h.stderr
	var pipe io.ReadCloser
	if watch {
		pipe, err = h.cmd.StdoutPipe()
		require.NoError(t, err)
		h.lines = make(chan string, 1<<16)
	} else {
		h.cmd.Stdout = &h.stdout
	}
	require.NoError(t, h.cmd.Start())
	if rank == 0 {
		j.l.Close() // rank 0 holds it now; when it exits, the port is closed
	}
	var copied sync.WaitGroup
	if watch {
		copied.Add(1)
		go func() {
			defer copied.Done()
			sc := bufio.NewScanner(pipe)
			for sc.Scan() {
				h.stdout.Write([]byte(sc.Text() + "\n"))
				h.lines <- sc.Text()
			}
			close(h.lines)
		}()
	}
	go func() {
		copied.Wait()
		h.err = h.cmd.Wait()
		close(h.done)
	}()
	j.ranks = append(j.ranks, h)
	return h
}

func (j *handJob) wait() {
	for _, h := range j.ranks {
		<-h.done
	}
}

// appendDocString returns a copy of the model file with a doc string
// appended (ModelProto field 6): the same model, another file.
func appendDocString(t *testing.T, src string) string {
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	doc := "a different export"
	b = append(b, 0x32, byte(len(doc)))
	b = append(b, doc...)
	dst := filepath.Join(t.TempDir(), "other.onnx")
	require.NoError(t, os.WriteFile(dst, b, 0o644))
	return dst
}

func sha256Hex(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestJoinRefusesMismatchedSettings: two ranks started by hand with the
// torchrun environment and the same secret, one with a different --lr (and
// separately a different model file, and a different --grad-accum): both
// exit non-zero long before the rendezvous timeout, each printing on its
// own standard error one message that names the field and the ranks.
func TestJoinRefusesMismatchedSettings(t *testing.T) {
	testutil.SkipShort(t, "starts worker processes")
	model, err := filepath.Abs("../../models/mlp/mlp_train.onnx")
	require.NoError(t, err)
	data, err := filepath.Abs("../../models/mlp/train_case.npz")
	require.NoError(t, err)
	other := appendDocString(t, model)
	base := func(model string) []string {
		return []string{"train", "--model", model, "--data", data, "--optimizer", "sgd", "--lr", "0.01", "--batch-size", "2",
			"--steps", "2", "--shuffle=false", "--log-format", "json", "--dist-timeout", "10m"}
	}
	for _, tc := range []struct {
		name  string
		rank1 []string
		want  string
	}{
		{"lr", append(base(model), "--lr", "0.02"), "--lr: rank 0 = 0.01, rank 1 = 0.02"},
		{"model", base(other), fmt.Sprintf("--model (SHA-256): rank 0 = %s, rank 1 = %s", sha256Hex(t, model), sha256Hex(t, other))},
		{"grad-accum", append(base(model), "--grad-accum", "2"), "--grad-accum: rank 0 = 1, rank 1 = 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A bound on a hang (the timeout is 10 minutes), not a timing.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			j := newHandJob(t)
			j.start(t, ctx, 0, 2, base(model), false)
			j.start(t, ctx, 1, 2, tc.rank1, false)
			j.wait()
			require.NoError(t, ctx.Err(), "the ranks hung instead of stopping at the check")
			for r, h := range j.ranks {
				stderr := h.stderr.String()
				require.Error(t, h.err, "rank %d exited 0; stderr: %s", r, stderr)
				var ee *exec.ExitError
				require.ErrorAs(t, h.err, &ee)
				assert.NotEqual(t, 0, ee.ExitCode())
				assert.Contains(t, stderr, tc.want, "rank %d", r)
				assert.Contains(t, stderr, fmt.Sprintf("distrib: rank %d: the ranks were not started alike", r))
				assert.Equal(t, 1, strings.Count(stderr, "the ranks were not started alike"), "one message per rank: %s", stderr)
				assert.Empty(t, h.stdout.String(), "rank %d trained", r)
				t.Logf("rank %d: %s", r, strings.TrimSpace(stderr))
			}
		})
	}
}

var peerPortRE = regexp.MustCompile(`msg="distrib: peer port open" addr="?([0-9.]+:[0-9]+)"?`)

// peerPortOf waits for the rank's log to name its peer port.
func peerPortOf(t *testing.T, h *handRank) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if m := peerPortRE.FindStringSubmatch(h.stderr.String()); m != nil {
			return m[1]
		}
		select {
		case <-h.done:
			t.Fatalf("the rank exited before opening its peer port: %v\n%s", h.err, h.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("no peer port in the log:\n%s", h.stderr.String())
	return ""
}

// TestStrangersDoNotDisturbTraining: while two ranks started by hand form
// their group, and again in the middle of training, a client knocks on the
// master port and on a rank's peer port with random bytes, a well-formed
// hello without the secret, a handshake with a wrong secret and a replay
// of a recorded valid handshake. Each is refused and logged (address and
// reason), and the losses are bit-identical to an undisturbed run.
func TestStrangersDoNotDisturbTraining(t *testing.T) {
	testutil.SkipShort(t, "starts worker processes")
	model, err := filepath.Abs("../../models/mlp/mlp_train.onnx")
	require.NoError(t, err)
	data, err := filepath.Abs("../../models/mlp/train_case.npz")
	require.NoError(t, err)
	// Long enough that the knocks land while it trains.
	const steps = 1000
	args := []string{"--log-level", "debug", "train", "--model", model, "--data", data, "--optimizer", "sgd", "--lr", "0.05",
		"--momentum", "0.9", "--batch-size", "2", "--steps", strconv.Itoa(steps), "--shuffle=false", "--log-format", "json",
		"--dist-timeout", "2m"}

	run := func(t *testing.T, knock func(phase string, j *handJob)) []float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		j := newHandJob(t)
		r0 := j.start(t, ctx, 0, 2, args, knock != nil)
		if knock != nil {
			knock("rendezvous", j)
		}
		j.start(t, ctx, 1, 2, args, false)
		if knock != nil {
			first, ok := <-r0.lines
			require.True(t, ok, "rank 0 ended without a step: %s", r0.stderr.String())
			require.Contains(t, first, `"step":1,`)
			knockStart := time.Now()
			knock("training", j)
			knocked := time.Since(knockStart)
			during := len(r0.lines) // steps logged while the knocks ran
			left := -during
			for range r0.lines {
				left++
			}
			// For the record: how much training the knocks overlapped.
			t.Logf("the knocks took %v; rank 0 logged %d of %d steps after them", knocked, left, steps)
			require.Positive(t, left, "the job ended before the knocks did: raise steps")
		}
		j.wait()
		for r, h := range j.ranks {
			require.NoError(t, h.err, "rank %d: %s", r, h.stderr.String())
		}
		return stepLosses(t, r0.stdout.String())
	}

	want := run(t, nil)
	require.Len(t, want, steps)

	knocks, err := strangers.Knocks([]byte(joinTestSecret), 11)
	require.NoError(t, err)
	knock := func(phase string, j *handJob) {
		type port struct{ name, addr string }
		ranks := j.ranks
		r0 := ranks[0]
		ports := []port{{"rendezvous port", j.master}, {"peer port", peerPortOf(t, r0)}}
		if len(ranks) > 1 {
			ports = append(ports, port{"peer port", peerPortOf(t, ranks[1])})
		}
		for i, p := range ports {
			for _, k := range knocks {
				what := fmt.Sprintf("%s, %s: %s", phase, p.addr, k.Name)
				logOf := r0
				if i == 2 {
					logOf = ranks[1]
				}
				// Only the log after the dial is read: the kernel may give
				// this knock the local port of an earlier one to another
				// port, whose record would name the same address.
				since := len(logOf.stderr.String())
				local, err := strangers.Try(p.addr, k, time.Minute)
				require.NoError(t, err, "%s (did the job end before the knock? raise steps)", what)
				record := fmt.Sprintf("distrib: refused a connection from %s on the %s: ", local, p.name)
				require.Eventually(t, func() bool { return strings.Contains(logOf.stderr.String()[since:], record) }, time.Minute, 10*time.Millisecond,
					"%s: no log record %q", what, record)
				log := logOf.stderr.String()
				at := since + strings.Index(log[since:], record)
				line := log[strings.LastIndexByte(log[:at], '\n')+1:]
				line = line[:strings.IndexByte(line, '\n')]
				assert.Contains(t, line, k.Reason, what)
				assert.Contains(t, line, "level=warning", what)
			}
		}
	}
	got := run(t, knock)
	require.Len(t, got, steps)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("step %d: loss %v with strangers knocking, %v without", i+1, got[i], want[i])
		}
	}
}
