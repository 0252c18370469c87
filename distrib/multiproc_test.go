package distrib

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The multi-process tests run this test binary again as worker processes,
// configured the way torchrun configures its workers (MASTER_ADDR,
// MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK) plus DISTRIB_TEST_WORKER naming
// the scenario. Rank 0 inherits the rendezvous listener the test opened
// (DISTRIB_TEST_LISTENER_FD), so no port is guessed.
func TestMain(m *testing.M) {
	if scenario := os.Getenv("DISTRIB_TEST_WORKER"); scenario != "" {
		os.Exit(runWorker(scenario))
	}
	os.Exit(m.Run())
}

// ownWorkers are scenarios that make their group themselves (tests under
// build tags register theirs here).
var ownWorkers = map[string]func() int{}

func runWorker(scenario string) int {
	if f, ok := ownWorkers[scenario]; ok {
		return f()
	}
	cfg, err := FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if fd := os.Getenv("DISTRIB_TEST_LISTENER_FD"); fd != "" {
		n, _ := strconv.Atoi(fd)
		f := os.NewFile(uintptr(n), "rendezvous")
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "inherited listener:", err)
			return 2
		}
		cfg.Listener = l
	}
	cfg.ChunkBytes, _ = strconv.Atoi(os.Getenv("DISTRIB_TEST_CHUNK"))
	ctx := context.Background()
	g, err := Init(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer g.Close()
	switch scenario {
	case "allreduce":
		return workerAllReduce(ctx, g)
	case "loop":
		return workerLoop(ctx, g)
	case "bench":
		return workerBench(ctx, g)
	}
	fmt.Fprintln(os.Stderr, "unknown scenario", scenario)
	return 2
}

// workerAllReduce checks a large AllReduce against the documented ring
// order and prints a digest of the result and of the gathered objects.
func workerAllReduce(ctx context.Context, g *Group) int {
	const n = 300001
	inputs := make([][]float32, g.WorldSize())
	for r := range inputs {
		inputs[r] = rankData(11, r, n)
	}
	data := append([]float32(nil), inputs[g.Rank()]...)
	if err := g.AllReduce(ctx, data, Sum); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	h := sha256.New()
	for i, v := range data {
		if want := ringOrderSum(inputs, i); math.Float32bits(want) != math.Float32bits(v) {
			fmt.Fprintf(os.Stderr, "element %d: got %v, want %v\n", i, v, want)
			return 1
		}
		fmt.Fprintf(h, "%08x", math.Float32bits(v))
	}
	objs, err := g.AllGatherObject(ctx, fmt.Appendf(nil, "hello from rank %d", g.Rank()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	h.Write(bytes.Join(objs, []byte("|")))
	if err := g.Barrier(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("digest %s\n", hex.EncodeToString(h.Sum(nil)))
	return 0
}

// workerLoop all-reduces until something fails, saying "ready" after a few
// rounds; the test then kills or stops one of the workers.
func workerLoop(ctx context.Context, g *Group) int {
	data := make([]float32, 1<<16)
	deadline := time.Now().Add(2 * time.Minute) // never outlive a broken test
	for step := int64(0); time.Now().Before(deadline); step++ {
		for i := range data {
			data[i] = 1
		}
		if err := g.AllReduce(WithStep(ctx, step), data, Sum); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		if data[0] != float32(g.WorldSize()) {
			fmt.Fprintf(os.Stderr, "step %d: got %v\n", step, data[0])
			return 1
		}
		if step == 3 {
			fmt.Println("ready")
		}
	}
	return 4
}

type workerProc struct {
	rank   int
	cmd    *exec.Cmd
	lines  chan string
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
	err    error
}

func (w *workerProc) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stderr.Write(p)
}

func (w *workerProc) errText() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stderr.String()
}

// startWorkers starts n workers of scenario, torchrun style.
func startWorkers(t *testing.T, n int, scenario string, env ...string) []*workerProc {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	lf, err := l.(*net.TCPListener).File()
	require.NoError(t, err)
	l.Close()
	defer lf.Close()
	ws := make([]*workerProc, n)
	for r := range ws {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), env...)
		cmd.Env = append(cmd.Env, "DISTRIB_TEST_WORKER="+scenario, "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n), "LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(n))
		if r == 0 {
			cmd.ExtraFiles = []*os.File{lf}
			cmd.Env = append(cmd.Env, "DISTRIB_TEST_LISTENER_FD=3")
		}
		w := &workerProc{rank: r, cmd: cmd, lines: make(chan string, 16), done: make(chan struct{})}
		cmd.Stderr = w
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				w.lines <- sc.Text()
			}
			close(w.lines)
			w.err = cmd.Wait()
			close(w.done)
		}()
		ws[r] = w
	}
	t.Cleanup(func() {
		for _, w := range ws {
			_ = w.cmd.Process.Kill()
			<-w.done
		}
	})
	return ws
}

func (w *workerProc) waitLine(t *testing.T, want string, guard time.Duration) {
	t.Helper()
	timer := time.NewTimer(guard)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-w.lines:
			if !ok {
				<-w.done
				t.Fatalf("rank %d exited (%v) before printing %q; stderr:\n%s", w.rank, w.err, want, w.errText())
			}
			if strings.HasPrefix(line, want) {
				return
			}
		case <-timer.C:
			t.Fatalf("rank %d did not print %q within %s; stderr:\n%s", w.rank, want, guard, w.errText())
		}
	}
}

// waitExit waits for the worker to end; guard only stops a hung test.
func (w *workerProc) waitExit(t *testing.T, guard time.Duration) int {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(guard):
		t.Fatalf("rank %d still runs after %s; stderr:\n%s", w.rank, guard, w.errText())
	}
	return w.cmd.ProcessState.ExitCode()
}

func TestMultiProcessAllReduce(t *testing.T) {
	const world = 3
	ws := startWorkers(t, world, "allreduce")
	var digests []string
	for _, w := range ws {
		var last string
		timer := time.After(60 * time.Second)
	read:
		for {
			select {
			case line, ok := <-w.lines:
				if !ok {
					break read
				}
				last = line
			case <-timer:
				t.Fatalf("rank %d hung; stderr:\n%s", w.rank, w.errText())
			}
		}
		<-w.done
		require.NoError(t, w.err, "rank %d; stderr:\n%s", w.rank, w.errText())
		require.True(t, strings.HasPrefix(last, "digest "), "rank %d printed %q", w.rank, last)
		digests = append(digests, last)
	}
	for r := 1; r < world; r++ {
		assert.Equal(t, digests[0], digests[r], "rank %d's result differs from rank 0's", r)
	}
}

// A killed worker makes every other worker fail, naming it, well within
// the timeout (its connections close, so nobody needs to wait).
func TestMultiProcessKilledWorkerIsNamed(t *testing.T) {
	const world = 4
	ws := startWorkers(t, world, "loop", "ONNXTRAIN_DIST_TIMEOUT=60s")
	for _, w := range ws {
		w.waitLine(t, "ready", 60*time.Second)
	}
	require.NoError(t, ws[2].cmd.Process.Kill())
	for _, r := range []int{0, 1, 3} {
		code := ws[r].waitExit(t, 30*time.Second) // far below the 60 s timeout
		msg := ws[r].errText()
		assert.Equal(t, 3, code, "rank %d: %s", r, msg)
		// "during AllReduce (step N, ...)", or "after ..." when rank 0 was
		// between two collectives as it noticed.
		assert.Regexp(t, `distrib: rank 2 was lost (during|after) AllReduce \(step \d+, collective \d+\)`, msg, "rank %d", r)
		assert.Contains(t, msg, "(the process exited or was killed)", "rank %d", r)
	}
}
