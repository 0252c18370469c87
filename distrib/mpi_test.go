//go:build mpi && cgo

package distrib

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The MPI tests run this test binary under mpirun as the worker scenario
// "mpi": each process joins the MPI group and, through it, a TCP group of
// the same ranks, runs every collective on both with the same inputs, and
// checks the results against each other and against a reference computed
// from every rank's inputs (each rank can compute them all).
func init() {
	ownWorkers["mpi"] = workerMPI
	ownWorkers["mpibench"] = workerMPIBench
}

// mpirunArgs is the mpirun command line that runs np copies of this test
// binary as the worker scenario.
func mpirunArgs(t testing.TB, np int, scenario string, env ...string) *exec.Cmd {
	t.Helper()
	mpirun, err := exec.LookPath("mpirun")
	require.NoError(t, err, "mpirun is not installed (Debian: apt-get install openmpi-bin libopenmpi-dev)")
	args := []string{"--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(np),
		"-x", "DISTRIB_TEST_WORKER=" + scenario}
	for _, e := range env {
		args = append(args, "-x", e)
	}
	args = append(args, os.Args[0], "-test.run=^$")
	cmd := exec.Command(mpirun, args...)
	cmd.Env = append(os.Environ(), "DISTRIB_TEST_WORKER="+scenario)
	return cmd
}

// TestMPICollectivesMatchTCP: under mpirun with 2 and 3 processes, every
// collective on MPI gives what the TCP ring gives and what the closed-form
// reference says (bit for bit with 2 ranks, where a sum has one order;
// within float32 rounding with 3), byte objects of different lengths
// (one empty) arrive intact, and with Debug a length mismatch is caught on
// every rank and leaves the group usable.
func TestMPICollectivesMatchTCP(t *testing.T) {
	for _, np := range []int{2, 3} {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			cmd := mpirunArgs(t, np, "mpi")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			done := make(chan error, 1)
			require.NoError(t, cmd.Start())
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				require.NoError(t, err, "mpirun: %s", out.String())
			case <-ctx.Done():
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("mpirun did not finish within 2 minutes: %s", out.String())
			}
			t.Logf("mpirun -np %d:\n%s", np, out.String())
			for r := 0; r < np; r++ {
				assert.Contains(t, out.String(), fmt.Sprintf("rank %d of %d: all MPI collectives agree", r, np))
			}
			assert.NotContains(t, out.String(), "MISMATCH")
		})
	}
}

// mpiChecker collects a worker's failed checks.
type mpiChecker struct {
	rank   int
	exact  bool // compare bits (2 ranks) rather than within tolerance
	fails  int
	checks int
}

func (c *mpiChecker) failf(format string, args ...any) {
	c.fails++
	fmt.Fprintf(os.Stderr, "rank %d: MISMATCH: %s\n", c.rank, fmt.Sprintf(format, args...))
}

func (c *mpiChecker) floats(what string, got, want []float32) {
	c.checks++
	if len(got) != len(want) {
		c.failf("%s: %d elements, want %d", what, len(got), len(want))
		return
	}
	for i := range got {
		same := math.Float32bits(got[i]) == math.Float32bits(want[i])
		if !c.exact {
			same = math.Abs(float64(got[i]-want[i])) <= 1e-6*(1+math.Abs(float64(want[i])))
		}
		if !same {
			c.failf("%s: element %d is %v, want %v", what, i, got[i], want[i])
			return
		}
	}
}

func (c *mpiChecker) objects(what string, got, want [][]byte) {
	c.checks++
	if len(got) != len(want) {
		c.failf("%s: %d objects, want %d", what, len(got), len(want))
		return
	}
	for r := range got {
		if !bytes.Equal(got[r], want[r]) {
			c.failf("%s: object of rank %d is %q, want %q", what, r, got[r], want[r])
		}
	}
}

func (c *mpiChecker) noErr(what string, err error) bool {
	if err != nil {
		c.failf("%s: %v", what, err)
		return false
	}
	return true
}

// refSum is the element-wise sum of every rank's input, in rank order, in
// float32.
func refSum(inputs [][]float32) []float32 {
	out := make([]float32, len(inputs[0]))
	for _, x := range inputs {
		for i, v := range x {
			out[i] += v
		}
	}
	return out
}

func workerMPI() int {
	ctx := context.Background()
	mg, err := InitMPI(ctx, Config{Debug: true, Timeout: time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rank, size := mg.Rank(), mg.WorldSize()
	c := &mpiChecker{rank: rank, exact: size == 2}
	if env := os.Getenv("OMPI_COMM_WORLD_RANK"); env != strconv.Itoa(rank) {
		c.failf("MPI rank %d, OMPI_COMM_WORLD_RANK %q", rank, env)
	}
	if mg.LocalRank() != rank { // every process runs on this machine
		c.failf("local rank %d on a single machine, want %d", mg.LocalRank(), rank)
	}

	tg, err := tcpBeside(ctx, mg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer tg.Close()

	const n, m = 100003, 1001 // n splits unevenly over the ranks
	inputs := make([][]float32, size)
	for r := range inputs {
		inputs[r] = rankData(29, r, n)
	}
	both := func(what string, run func(g *Group) ([]float32, error), want []float32) {
		for _, g := range []*Group{mg, tg} {
			via := map[bool]string{true: "MPI", false: "TCP"}[g == mg]
			got, err := run(g)
			if c.noErr(what+" on "+via, err) {
				c.floats(what+" on "+via, got, want)
			}
		}
	}

	sum := refSum(inputs)
	both("AllReduce sum", func(g *Group) ([]float32, error) {
		x := append([]float32(nil), inputs[rank]...)
		return x, g.AllReduce(ctx, x, Sum)
	}, sum)
	mean := make([]float32, n)
	for i, v := range sum {
		mean[i] = v / float32(size)
	}
	both("AllReduce mean", func(g *Group) ([]float32, error) {
		x := append([]float32(nil), inputs[rank]...)
		return x, g.AllReduce(ctx, x, Mean)
	}, mean)

	blocks := make([][]float32, size)
	for r := range blocks {
		blocks[r] = inputs[r][:size*m]
	}
	rs := refSum(blocks)[rank*m : (rank+1)*m]
	both("ReduceScatter sum", func(g *Group) ([]float32, error) {
		out := make([]float32, m)
		return out, g.ReduceScatter(ctx, blocks[rank], out, Sum)
	}, rs)
	both("ReduceScatter into its own block of the input", func(g *Group) ([]float32, error) {
		x := append([]float32(nil), blocks[rank]...)
		out := x[rank*m : (rank+1)*m]
		return out, g.ReduceScatter(ctx, x, out, Sum)
	}, rs)
	rsMean := make([]float32, m)
	for i, v := range rs {
		rsMean[i] = v / float32(size)
	}
	both("ReduceScatterInPlace mean", func(g *Group) ([]float32, error) {
		x := append([]float32(nil), blocks[rank]...)
		return g.ReduceScatterInPlace(ctx, x, Mean)
	}, rsMean)

	var gathered []float32
	for r := range inputs {
		gathered = append(gathered, inputs[r][:m]...)
	}
	both("AllGather", func(g *Group) ([]float32, error) {
		out := make([]float32, size*m)
		return out, g.AllGather(ctx, inputs[rank][:m], out)
	}, gathered)
	both("AllGather from its own block of the output", func(g *Group) ([]float32, error) {
		out := make([]float32, size*m)
		copy(out[rank*m:], inputs[rank][:m])
		return out, g.AllGather(ctx, out[rank*m:(rank+1)*m], out)
	}, gathered)
	root := size - 1
	both("Broadcast", func(g *Group) ([]float32, error) {
		x := append([]float32(nil), inputs[rank]...)
		return x, g.Broadcast(ctx, x, root)
	}, inputs[root])
	c.noErr("Barrier on MPI", mg.Barrier(ctx))

	// Objects of different lengths; rank 1's is empty.
	obj := func(r int) []byte {
		if r == 1 {
			return []byte{}
		}
		return bytes.Repeat([]byte(fmt.Sprintf("rank %d;", r)), 1+r*1000)
	}
	all := make([][]byte, size)
	for r := range all {
		all[r] = obj(r)
	}
	for _, g := range []*Group{mg, tg} {
		via := map[bool]string{true: "MPI", false: "TCP"}[g == mg]
		got, err := g.AllGatherObject(ctx, obj(rank))
		if c.noErr("AllGatherObject on "+via, err) {
			c.objects("AllGatherObject on "+via, got, all)
		}
		got, err = g.GatherObject(ctx, obj(rank), 1)
		if c.noErr("GatherObject on "+via, err) {
			if rank == 1 {
				c.objects("GatherObject on "+via, got, all)
			} else if got != nil {
				c.failf("GatherObject on %s: rank %d (not the root) got %d objects", via, rank, len(got))
			}
		}
		b, err := g.BroadcastObject(ctx, obj(rank), 0)
		if c.noErr("BroadcastObject on "+via, err) {
			c.objects("BroadcastObject on "+via, [][]byte{b}, [][]byte{all[0]})
		}
	}

	// Debug: ranks that pass different lengths all get the same
	// mismatch error, and the group stays usable.
	bad := make([]float32, 10+rank)
	err = mg.AllReduce(ctx, bad, Sum)
	var re *RankError
	c.checks++
	switch {
	case !errors.Is(err, ErrMismatch) || !errors.As(err, &re):
		c.failf("lengths 10..%d on MPI with Debug: got %v, want ErrMismatch", 9+size, err)
	case !strings.Contains(err.Error(), "tensor lengths differ across ranks: rank 0: 10, rank 1: 11"):
		c.failf("mismatch message %q does not list the lengths", err)
	}
	both("AllReduce after a caught mismatch", func(g *Group) ([]float32, error) {
		x := append([]float32(nil), inputs[rank][:m]...)
		return x, g.AllReduce(ctx, x, Sum)
	}, refSum(blocks)[:m])

	if err := mg.Close(); err != nil {
		c.failf("closing the MPI group: %v", err)
	}
	if c.fails > 0 {
		return 1
	}
	fmt.Printf("rank %d of %d: all MPI collectives agree (%d checks)\n", rank, size, c.checks)
	return 0
}

// tcpBeside makes the TCP group of the MPI group's ranks: rank 0 listens on
// a port the kernel picks and tells the others through MPI.
func tcpBeside(ctx context.Context, mg *Group) (*Group, error) {
	var ln net.Listener
	var portMsg []byte
	if mg.Rank() == 0 {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
		portMsg = []byte(strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	}
	portMsg, err := mg.BroadcastObject(ctx, portMsg, 0)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(string(portMsg))
	if err != nil {
		return nil, fmt.Errorf("rank 0 sent port %q: %w", portMsg, err)
	}
	return Init(ctx, Config{Rank: mg.Rank(), WorldSize: mg.WorldSize(), MasterAddr: "127.0.0.1", MasterPort: port, Listener: ln, Timeout: 2 * time.Minute})
}

// BenchmarkMPIAllReduce compares, between the same two processes started
// by mpirun, the all-reduce of the MPI transport (Open MPI; on one machine
// its shared-memory transport) with the TCP ring over loopback: each
// iteration runs one of each, back to back. Reported: busbw of each
// (medians over the iterations) and mpi_over_tcp, the median of the
// per-iteration ratios. ns/op includes mpirun's start-up; read the metrics.
//
//	go test -tags mpi ./distrib -run XXX -bench MPIAllReduce -benchtime 10x
func BenchmarkMPIAllReduce(b *testing.B) {
	for _, mb := range []int{4, 16, 64, 256} {
		b.Run(fmt.Sprintf("%dMB", mb), func(b *testing.B) {
			cmd := mpirunArgs(b, 2, "mpibench", fmt.Sprintf("DISTRIB_TEST_BENCH=%d,%d", mb<<20, b.N))
			out, err := cmd.CombinedOutput()
			if err != nil {
				b.Fatalf("mpirun: %v: %s", err, out)
			}
			var mpiBW, tcpBW, ratio float64
			found := false
			for _, line := range strings.Split(string(out), "\n") {
				if _, err := fmt.Sscanf(line, "mpibench %g %g %g", &mpiBW, &tcpBW, &ratio); err == nil {
					found = true
				}
			}
			if !found {
				b.Fatalf("no result from the workers: %s", out)
			}
			b.ReportMetric(mpiBW, "mpi_busbw_GB/s")
			b.ReportMetric(tcpBW, "tcp_ring_busbw_GB/s")
			b.ReportMetric(ratio, "mpi_over_tcp")
		})
	}
}

// workerMPIBench times the all-reduce on MPI and on the TCP ring, one of
// each per iteration, and prints (rank 0) the median busbw of each and the
// median ratio.
func workerMPIBench() int {
	var size, iters int
	if _, err := fmt.Sscanf(os.Getenv("DISTRIB_TEST_BENCH"), "%d,%d", &size, &iters); err != nil {
		fmt.Fprintln(os.Stderr, "DISTRIB_TEST_BENCH:", err)
		return 2
	}
	ctx := context.Background()
	mg, err := InitMPI(ctx, Config{Timeout: 2 * time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer mg.Close()
	tg, err := tcpBeside(ctx, mg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer tg.Close()
	data := make([]float32, size/4)
	world := float64(mg.WorldSize())
	perLink := 2 * (world - 1) / world * float64(size)
	timed := func(g *Group) (time.Duration, error) {
		if err := mg.Barrier(ctx); err != nil {
			return 0, err
		}
		start := time.Now()
		err := g.AllReduce(ctx, data, Sum)
		return time.Since(start), err
	}
	var mpiBW, tcpBW, ratios []float64
	for i := 0; i <= iters; i++ { // the first round warms up
		m, err := timed(mg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		tc, err := timed(tg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if i > 0 {
			mpiBW = append(mpiBW, perLink/m.Seconds()/1e9)
			tcpBW = append(tcpBW, perLink/tc.Seconds()/1e9)
			ratios = append(ratios, tc.Seconds()/m.Seconds())
		}
	}
	if mg.Rank() == 0 {
		fmt.Printf("mpibench %g %g %g\n", median(mpiBW), median(tcpBW), median(ratios))
	}
	return 0
}
