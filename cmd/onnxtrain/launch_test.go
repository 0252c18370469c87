//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is written by the launcher's goroutines and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runLaunch runs `onnxtrain launch ARGS...` in process.
func runLaunch(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb syncBuffer
	cmd := newLaunchCmd()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	err = cmd.Execute()
	return out.String(), errb.String(), err
}

func TestLaunchSetsRankEnvironmentAndPrefixesLines(t *testing.T) {
	// torchrun's underscore spelling is accepted too.
	stdout, stderr, err := runLaunch(t, "--nproc_per_node", "3", "--master-port", "29123", "--",
		"sh", "-c", `echo "rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK of $LOCAL_WORLD_SIZE group=$GROUP_RANK master=$MASTER_ADDR:$MASTER_PORT restart=$ONNXTRAIN_RESTART_COUNT"; echo "to stderr" >&2`)
	require.NoError(t, err, stderr)
	for _, want := range []string{
		"[rank 0] rank=0 world=3 local=0 of 3 group=0 master=127.0.0.1:29123 restart=0\n",
		"[rank 1] rank=1 world=3 local=1 of 3 group=0 master=127.0.0.1:29123 restart=0\n",
		"[rank 2] rank=2 world=3 local=2 of 3 group=0 master=127.0.0.1:29123 restart=0\n",
	} {
		assert.Contains(t, stdout, want)
	}
	assert.Equal(t, 3, strings.Count(stdout, "\n"), stdout)
	for _, r := range []string{"0", "1", "2"} {
		assert.Contains(t, stderr, "[rank "+r+"] to stderr\n")
	}
}

func TestLaunchSecondNodeRanks(t *testing.T) {
	t.Setenv("ONNXTRAIN_DIST_SECRET", "every-node-holds-this-secret") // several nodes need one
	stdout, stderr, err := runLaunch(t, "--nproc-per-node", "2", "--nnodes", "3", "--node-rank", "2",
		"--master-addr", "node0.example", "--", "sh", "-c", `echo "$RANK/$WORLD_SIZE $LOCAL_RANK $GROUP_RANK $MASTER_ADDR:$MASTER_PORT"`)
	require.NoError(t, err, stderr)
	assert.Contains(t, stdout, "[rank 4] 4/6 0 2 node0.example:29500\n")
	assert.Contains(t, stdout, "[rank 5] 5/6 1 2 node0.example:29500\n")
}

func TestLaunchJSONLogsPassRankZeroStdoutThrough(t *testing.T) {
	// The worker's own arguments carry --log-format json ($1 and $2 of the script).
	stdout, stderr, err := runLaunch(t, "--nproc-per-node", "2", "--",
		"sh", "-c", `echo "{\"step\":1,\"rank\":$RANK,\"flag\":\"$1 $2\"}"`, "sh", "--log-format", "json")
	require.NoError(t, err, stderr)
	var rec struct {
		Step, Rank int
		Flag       string
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rec), "stdout must be rank 0's JSON alone: %q", stdout)
	assert.Equal(t, 0, rec.Rank)
	assert.Equal(t, "--log-format json", rec.Flag)
	assert.Contains(t, stderr, `[rank 1] {"step":1,"rank":1,"flag":"--log-format json"}`)
}

func TestLaunchFailingWorkerFailsTheJob(t *testing.T) {
	_, stderr, err := runLaunch(t, "--nproc-per-node", "3", "--grace-period", "2s", "--",
		"sh", "-c", `if [ "$RANK" = 1 ]; then exit 3; fi; while :; do sleep 0.05; done`)
	require.Error(t, err)
	var ee *exitError
	require.True(t, errors.As(err, &ee), "%T: %v", err, err)
	assert.Equal(t, 1, ee.code)
	assert.Contains(t, err.Error(), "worker rank 1")
	assert.Contains(t, err.Error(), "exit status 3")
	assert.Contains(t, stderr, "worker rank 1 failed (exit status 3)", "the launcher's log says so too")
}

func TestLaunchRestartsFailedWorkers(t *testing.T) {
	stdout, stderr, err := runLaunch(t, "--nproc-per-node", "2", "--max-restarts", "1", "--monitor-interval", "10ms", "--",
		"sh", "-c", `echo "start $ONNXTRAIN_RESTART_COUNT"; if [ "$RANK" = 1 ] && [ "$ONNXTRAIN_RESTART_COUNT" = 0 ]; then exit 3; fi`)
	require.NoError(t, err, stderr)
	// (Rank 0 may be stopped before it prints its first line.)
	for _, want := range []string{"[rank 1] start 0\n", "[rank 0] start 1\n", "[rank 1] start 1\n"} {
		assert.Contains(t, stdout, want)
	}
	assert.NotContains(t, stdout, "start 2")
	assert.Contains(t, stderr, "restart 1 of 1")
}

func TestLaunchForwardsSIGTERM(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LAUNCH_TEST_DIR", dir)
	type result struct {
		stdout, stderr string
		err            error
	}
	done := make(chan result, 1)
	go func() {
		o, e, err := runLaunch(t, "--nproc-per-node", "2", "--grace-period", "5s", "--",
			"sh", "-c", `trap 'echo "got TERM"; exit 0' TERM; touch "$LAUNCH_TEST_DIR/ready-$RANK"; while :; do sleep 0.05; done`)
		done <- result{o, e, err}
	}()
	// The launcher listens for signals before it starts the workers, so
	// once both are ready, SIGTERM to this process goes to the launcher.
	deadline := time.Now().Add(20 * time.Second)
	for _, r := range []string{"0", "1"} {
		for {
			if _, err := os.Stat(filepath.Join(dir, "ready-"+r)); err == nil {
				break
			}
			require.True(t, time.Now().Before(deadline), "worker %s never started", r)
			time.Sleep(5 * time.Millisecond)
		}
	}
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	res := <-done
	var ee *exitError
	require.True(t, errors.As(res.err, &ee), "%v\n%s", res.err, res.stderr)
	assert.Equal(t, 128+int(syscall.SIGTERM), ee.code)
	assert.Contains(t, res.err.Error(), "received SIGTERM")
	assert.Contains(t, res.stdout, "[rank 0] got TERM\n")
	assert.Contains(t, res.stdout, "[rank 1] got TERM\n")
}

func TestLaunchFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nproc-per-node", "2"}, "no worker command"},
		{[]string{"--nnodes", "1:4", "--", "true"}, "elastic ranges"},
		{[]string{"--nnodes", "two", "--", "true"}, `--nnodes "two"`},
		{[]string{"--nnodes", "2", "--", "true"}, "needs --master-addr"},
		{[]string{"--nproc-per-node", "0", "--", "true"}, "--nproc-per-node 0"},
		{[]string{"--nnodes", "2", "--node-rank", "5", "--master-addr", "h", "--", "true"}, "--node-rank 5 is outside 0..1"},
		{[]string{"--master-port", "99999", "--", "true"}, "--master-port 99999"},
		{[]string{"--max-restarts", "-2", "--", "true"}, "--max-restarts -2"},
		{[]string{"--", "no-such-program-for-launch-test"}, "no-such-program-for-launch-test"},
	} {
		_, _, err := runLaunch(t, tc.args...)
		require.Error(t, err, "%q", tc.args)
		assert.Contains(t, err.Error(), tc.want, "%q", tc.args)
	}
}

func TestLaunchLeavesWorkerFlagsToTheWorker(t *testing.T) {
	// --nproc-per-node after the program name is the program's argument.
	stdout, stderr, err := runLaunch(t, "sh", "-c", `echo "args: $*"`, "sh", "--nproc-per-node", "7")
	require.NoError(t, err, stderr)
	assert.Equal(t, "[rank 0] args: --nproc-per-node 7\n", stdout)
}

// TestDeployFilesUseRealTrainFlags parses the `onnxtrain train` arguments of
// deploy/'s manifests and batch script with the train command's own flags.
func TestDeployFilesUseRealTrainFlags(t *testing.T) {
	yamlArgs := regexp.MustCompile(`(?s)exec onnxtrain train(.*?)\$EXTRA_ARGS`)
	slurmArgs := regexp.MustCompile(`(?s)train_args=\(\s*train\n(.*?)\n\)`)
	for file, re := range map[string]*regexp.Regexp{
		"../../deploy/kubernetes/pytorchjob.yaml":    yamlArgs,
		"../../deploy/kubernetes/indexed-job.yaml":   yamlArgs,
		"../../deploy/slurm/onnxtrain-fmnist.sbatch": slurmArgs,
	} {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		matches := re.FindAllStringSubmatch(string(b), -1)
		require.NotEmpty(t, matches, "%s: no train command found", file)
		for _, m := range matches {
			text := strings.NewReplacer("\\\n", " ", `"`, "").Replace(m[1])
			args := strings.Fields(text)
			require.Greater(t, len(args), 10, "%s: %q", file, text)
			assert.NoError(t, newTrainCmd().ParseFlags(args), "%s: %q", file, args)
		}
	}
}
