package train

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// The crash test re-executes the test binary: with crashChildEnv set to a
// folder, TestCheckpointCrashChild saves checkpoints into it in a loop until
// it is killed.
const crashChildEnv = "ONNXTRAIN_CHECKPOINT_CRASH_DIR"

// crashState is the state of step n: every tensor is filled with values
// derived from n, so a loaded state shows whether its files come from one
// save.
func crashState(n int) *State {
	const elems = 1 << 18 // 1 MiB of float32 per tensor, 5 MiB per save
	fill := func(off float32) *graph.Tensor {
		d := make([]float32, elems)
		for i := range d {
			d[i] = float32(n) + off + float32(i%7)
		}
		return graph.FromFloat32(d, 512, elems/512)
	}
	return &State{
		Step: n, CheckpointCounter: n,
		Params:    map[string]*graph.Tensor{"a.weight": fill(0), "b.weight": fill(0.5)},
		Buffers:   map[string]*graph.Tensor{"bn.running_mean": fill(0.25)},
		Optimizer: map[string]*graph.Tensor{"a.weight/exp_avg": fill(0.125), "b.weight/exp_avg": fill(0.375), "step": graph.FromInt64([]int64{int64(n)})},
		Schedule:  map[string]any{"step": float64(n)},
	}
}

// checkCrashState fails unless st is crashState(st.Step).
func checkCrashState(t *testing.T, st *State) {
	t.Helper()
	want := crashState(st.Step)
	assert.Equal(t, st.Step, st.CheckpointCounter)
	assert.Equal(t, float64(st.Step), st.Schedule["step"])
	for kind, pair := range map[string][2]map[string]*graph.Tensor{
		"params": {want.Params, st.Params}, "buffers": {want.Buffers, st.Buffers}, "optimizer": {want.Optimizer, st.Optimizer},
	} {
		require.Len(t, pair[1], len(pair[0]), kind)
		for name, w := range pair[0] {
			g := pair[1][name]
			require.NotNil(t, g, "%s %q", kind, name)
			assert.True(t, graph.SameShape(w.Shape, g.Shape), "%s %q", kind, name)
			assert.Equal(t, w.Data, g.Data, "%s %q of step %d", kind, name, st.Step)
		}
	}
}

// TestCheckpointCrashChild is the child process of TestCheckpointCrash.
func TestCheckpointCrashChild(t *testing.T) {
	testutil.SkipChild(t, crashChildEnv)
	dir := os.Getenv(crashChildEnv)
	start, err := strconv.Atoi(os.Getenv(crashChildEnv + "_START"))
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second) // in case the parent is gone
	for n := start; time.Now().Before(deadline); n++ {
		st := crashState(n)
		fmt.Printf("begin %d\n", n)
		require.NoError(t, SaveState(dir, st))
		fmt.Printf("saved %d\n", n)
	}
}

// TestCheckpointCrash kills a process that keeps replacing a checkpoint at
// random moments: each time, the folder must still load, checksums intact,
// as the last or the next state in full. (SIGKILL tests the rename
// protocol; surviving a power loss also rests on the fsyncs.)
func TestCheckpointCrash(t *testing.T) {
	testutil.SkipShort(t, "spawns processes")
	dir := filepath.Join(t.TempDir(), "latest")
	require.NoError(t, SaveState(dir, crashState(0)))

	// The kill moments are random; the seed is logged (and named again on
	// failure) so that a failing sequence of kill points can be re-run:
	// set <crashChildEnv>_SEED to it. A re-run draws the same fractions of
	// a save's duration; the save itself takes what the machine gives it.
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashChildEnv + "_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s_SEED", crashChildEnv)
		seed = n
	}
	t.Logf("kill-point seed %d (re-run with %s_SEED=%d)", seed, crashChildEnv, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed with kill-point seed %d: re-run with %s_SEED=%d go test ./train -run 'TestCheckpointCrash$'", seed, crashChildEnv, seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, 5))
	kills := 10
	if s := os.Getenv(crashChildEnv + "_KILLS"); s != "" { // for longer stress runs
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		kills = n
	}
	last := 0                        // the newest step a child reported saved
	withTemp, betweenRenames := 0, 0 // kills that left a .tmp-* folder, or dir.old and no dir
	for k := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCheckpointCrashChild$", "-test.count=1", "-test.v=false")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, fmt.Sprintf("%s_START=%d", crashChildEnv, last+1))
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		type event struct {
			saved bool // "saved n", else "begin n"
			n     int
		}
		events := make(chan event, 1000)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				word, num, _ := strings.Cut(sc.Text(), " ")
				if n, err := strconv.Atoi(num); err == nil && (word == "begin" || word == "saved") {
					events <- event{word == "saved", n}
				}
			}
			close(events)
		}()
		next := func(saved bool) {
			t.Helper()
			select {
			case e, ok := <-events:
				require.True(t, ok, "kill %d: the child ended early", k)
				require.Equal(t, saved, e.saved, "kill %d: unexpected child output", k)
				if e.saved {
					last = e.n
				}
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("kill %d: the child is stuck", k)
			}
		}
		// Time one SaveState, then kill the child at a random point of the
		// next one, whatever this machine's speed.
		next(false)
		begin := time.Now()
		next(true)
		took := time.Since(begin)
		next(false)
		time.Sleep(time.Duration(rng.Int64N(int64(took) + 1)))
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		for e := range events {
			if e.saved {
				last = e.n
			}
		}

		entries, err := os.ReadDir(filepath.Dir(dir))
		require.NoError(t, err)
		for _, e := range entries {
			if strings.Contains(e.Name(), ".tmp-") {
				withTemp++
			}
		}
		if _, err := os.Stat(dir); err != nil {
			betweenRenames++
		}
		st, err := LoadState(dir)
		require.NoError(t, err, "kill %d: the checkpoint must load", k)
		assert.Contains(t, []int{last, last + 1}, st.Step, "kill %d: the last completed save (%d) or the one in progress", k, last)
		checkCrashState(t, st)
		last = st.Step
	}
	t.Logf("%d kills: %d left a .tmp-* folder, %d fell between the two renames; last step %d", kills, withTemp, betweenRenames, last)
	assert.GreaterOrEqual(t, last, kills, "every child saved at least once")
}
