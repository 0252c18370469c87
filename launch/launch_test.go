//go:build unix

package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/distrib"
)

// lockedBuffer is a bytes.Buffer safe for the launcher's writers and the
// test's reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testConfig runs this test binary as the workers in the given mode.
func testConfig(t *testing.T, mode string, nproc int, extraEnv ...string) (Config, *lockedBuffer, *lockedBuffer) {
	t.Helper()
	var stdout, stderr lockedBuffer
	// atexit_sleep_ms: a worker built with -race would otherwise linger 1 s.
	env := append(os.Environ(), workerModeVar+"="+mode, testDirVar+"="+t.TempDir(), "GORACE=atexit_sleep_ms=0")
	env = append(env, extraEnv...)
	return Config{
		NProcPerNode: nproc,
		Command:      []string{os.Args[0]},
		Env:          env,
		Stdout:       &stdout,
		Stderr:       &stderr,
		GracePeriod:  5 * time.Second,
	}, &stdout, &stderr
}

// safetyContext bounds a test that would otherwise hang on a bug; the
// tests never assert how long anything took.
func safetyContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rankVars parses "[rank R] NAME=VALUE" lines into one map per rank.
func rankVars(t *testing.T, out string) map[int]map[string]string {
	t.Helper()
	vars := map[int]map[string]string{}
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		rest, ok := strings.CutPrefix(line, "[rank ")
		require.True(t, ok, "line without rank prefix: %q", line)
		num, kv, ok := strings.Cut(rest, "] ")
		require.True(t, ok, "malformed line %q", line)
		rank, err := strconv.Atoi(num)
		require.NoError(t, err)
		if vars[rank] == nil {
			vars[rank] = map[string]string{}
		}
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			vars[rank]["(other)"] += kv + "|"
			continue
		}
		_, dup := vars[rank][name]
		require.False(t, dup, "rank %d: %s printed twice", rank, name)
		vars[rank][name] = value
	}
	return vars
}

func TestWorkerEnvironmentPerRank(t *testing.T) {
	cfg, stdout, stderr := testConfig(t, "env", 3, "LAUNCH_TEST_INHERITED=yes", "RANK=99", "WORLD_SIZE=99", "GOMAXPROCS=",
		distrib.SecretVar+"=node-shared-secret-0123456789")
	// An inherited GOMAXPROCS (even empty) is the user's choice; drop it to
	// see the launcher's share.
	env := cfg.Env[:0]
	for _, kv := range cfg.Env {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			env = append(env, kv)
		}
	}
	cfg.Env = env
	cfg.NNodes, cfg.NodeRank = 2, 1
	cfg.MasterAddr, cfg.MasterPort = "10.1.2.3", 29999
	cfg.MaxRestarts = 5
	require.NoError(t, Run(safetyContext(t), cfg))

	vars := rankVars(t, stdout.String())
	require.Len(t, vars, 3, "ranks 3, 4, 5 on node 1")
	wantProcs := strconv.Itoa(max(1, runtime.GOMAXPROCS(0)/3))
	for local := range 3 {
		rank := 3 + local
		v := vars[rank]
		require.NotNil(t, v, "rank %d printed nothing", rank)
		assert.Equal(t, strconv.Itoa(rank), v["RANK"])
		assert.Equal(t, "6", v["WORLD_SIZE"])
		assert.Equal(t, strconv.Itoa(local), v["LOCAL_RANK"])
		assert.Equal(t, "3", v["LOCAL_WORLD_SIZE"])
		assert.Equal(t, "1", v["GROUP_RANK"])
		assert.Equal(t, "2", v["GROUP_WORLD_SIZE"])
		assert.Equal(t, "10.1.2.3", v["MASTER_ADDR"])
		assert.Equal(t, "29999", v["MASTER_PORT"])
		assert.Equal(t, "0", v["ONNXTRAIN_RESTART_COUNT"])
		assert.Equal(t, "5", v["ONNXTRAIN_MAX_RESTARTS"])
		assert.Equal(t, "0", v["TORCHELASTIC_RESTART_COUNT"])
		assert.Equal(t, "none", v["TORCHELASTIC_RUN_ID"])
		// One id for the invocation, which a restarted worker finds again.
		assert.NotEmpty(t, v["ONNXTRAIN_LAUNCH_ID"])
		assert.Equal(t, vars[3]["ONNXTRAIN_LAUNCH_ID"], v["ONNXTRAIN_LAUNCH_ID"])
		assert.Equal(t, "yes", v["LAUNCH_TEST_INHERITED"])
		assert.Equal(t, "node-shared-secret-0123456789", v[distrib.SecretVar], "the nodes' secret is passed on")
		assert.Equal(t, wantProcs, v["GOMAXPROCS"])
		// The last line had no newline: it is still a line of its own.
		assert.Equal(t, "no newline at the end|", v["(other)"])
	}
	for rank := 3; rank < 6; rank++ {
		assert.Contains(t, stderr.String(), fmt.Sprintf("[rank %d] to stderr\n", rank))
	}
	assert.NotContains(t, stdout.String(), "to stderr")
}

func TestFreeMasterPortOnOneNodeAndUserGOMAXPROCS(t *testing.T) {
	cfg, stdout, _ := testConfig(t, "env", 2, "GOMAXPROCS=7")
	require.NoError(t, Run(safetyContext(t), cfg))
	vars := rankVars(t, stdout.String())
	require.Len(t, vars, 2)
	port, err := strconv.Atoi(vars[0]["MASTER_PORT"])
	require.NoError(t, err)
	assert.True(t, port > 0 && port < 65536, "port %d", port)
	assert.Equal(t, vars[0]["MASTER_PORT"], vars[1]["MASTER_PORT"], "every rank is told the same port")
	for r := range 2 {
		assert.Equal(t, "127.0.0.1", vars[r]["MASTER_ADDR"])
		assert.Equal(t, "2", vars[r]["WORLD_SIZE"])
		assert.Equal(t, "0", vars[r]["GROUP_RANK"])
		assert.Equal(t, "7", vars[r]["GOMAXPROCS"], "the user's GOMAXPROCS wins")
	}
}

func TestJSONStdoutPassesRankZeroThrough(t *testing.T) {
	cfg, stdout, stderr := testConfig(t, "json", 3)
	cfg.JSONStdout = true
	require.NoError(t, Run(safetyContext(t), cfg))

	// stdout is exactly rank 0's record, unprefixed and decodable.
	out := stdout.String()
	require.Equal(t, 1, strings.Count(out, "\n"), "stdout: %q", out)
	var rec map[string]int
	require.NoError(t, json.Unmarshal([]byte(out), &rec))
	assert.Equal(t, map[string]int{"step": 1, "rank": 0}, rec)

	errs := stderr.String()
	for r := 1; r < 3; r++ {
		assert.Contains(t, errs, fmt.Sprintf("[rank %d] {\"step\":1,\"rank\":%d}\n", r, r))
	}
	for r := range 3 {
		assert.Contains(t, errs, fmt.Sprintf("[rank %d] log line\n", r))
	}
	assert.NotContains(t, errs, "\"rank\":0}", "rank 0's record is not repeated on stderr")
}

func TestWithoutJSONEveryStdoutLineIsPrefixed(t *testing.T) {
	cfg, stdout, _ := testConfig(t, "json", 2)
	require.NoError(t, Run(safetyContext(t), cfg))
	assert.Equal(t, []string{`[rank 0] {"step":1,"rank":0}`, `[rank 1] {"step":1,"rank":1}`},
		sortedLines(stdout.String()))
}

func sortedLines(s string) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	sort.Strings(lines)
	return lines
}

// linesOf returns one rank's lines, in order, without the prefix.
func linesOf(s string, rank int) []string {
	var out []string
	prefix := fmt.Sprintf("[rank %d] ", rank)
	for _, line := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			out = append(out, rest)
		}
	}
	return out
}

func TestWantsJSONStdout(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"train", "--log-format", "json"}, true},
		{[]string{"train", "--log-format=json", "--lr", "1"}, true},
		{[]string{"train", "--log-format", "text"}, false},
		{[]string{"train", "--log-format"}, false},
		{[]string{"train", "--", "--log-format", "json"}, false},
		{nil, false},
	} {
		assert.Equal(t, tc.want, WantsJSONStdout(tc.args), "%q", tc.args)
	}
}

func TestFailingWorkerStopsTheOthers(t *testing.T) {
	cfg, stdout, stderr := testConfig(t, "fail", 3, "FAIL_RANK=1")
	logger, hook := logtest.NewNullLogger()
	cfg.Logger = logger
	err := Run(safetyContext(t), cfg)

	var we *WorkerError
	require.ErrorAs(t, err, &we, "stderr:\n%s", stderr.String())
	assert.Equal(t, 1, we.Rank)
	assert.Equal(t, 1, we.LocalRank)
	assert.Equal(t, 3, we.ExitCode)
	assert.Equal(t, "exit status 3", we.Status)
	assert.Equal(t, 2, we.Stopped)
	assert.Contains(t, err.Error(), "worker rank 1")
	assert.Contains(t, err.Error(), "exit status 3")

	// The others were stopped by SIGTERM, not left to sleep out their minute.
	out := stdout.String()
	assert.Contains(t, out, "[rank 0] rank 0 got terminated\n")
	assert.Contains(t, out, "[rank 2] rank 2 got terminated\n")
	assert.NotContains(t, out, "slept to the end")
	assert.Contains(t, stderr.String(), "[rank 1] rank 1 fails now\n")

	var warned bool
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "worker rank 1 failed") {
			warned = true
		}
	}
	assert.True(t, warned, "the launcher logs the failure")
}

func TestWorkerIgnoringSIGTERMIsKilledAfterTheGracePeriod(t *testing.T) {
	cfg, stdout, _ := testConfig(t, "fail", 2, "FAIL_RANK=1", "IGNORE_TERM_RANK=0")
	cfg.GracePeriod = 200 * time.Millisecond
	logger, hook := logtest.NewNullLogger()
	cfg.Logger = logger
	err := Run(safetyContext(t), cfg)

	var we *WorkerError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, 1, we.Rank, "the failure reported is the first one, not the killed worker")
	assert.Contains(t, stdout.String(), "rank 0 ignores SIGTERM")
	assert.NotContains(t, stdout.String(), "slept to the end")
	assert.NotContains(t, stdout.String(), "got terminated")
	var killed bool
	for _, e := range hook.AllEntries() {
		if strings.Contains(e.Message, "killing them") {
			killed = true
		}
	}
	assert.True(t, killed, "the launcher reports the kill")
}

func TestRestartAfterFailure(t *testing.T) {
	cfg, stdout, stderr := testConfig(t, "restart", 2)
	cfg.MaxRestarts = 2
	cfg.MonitorInterval = 10 * time.Millisecond
	require.NoError(t, Run(safetyContext(t), cfg), "stderr:\n%s", stderr.String())
	// In each rank's own order: rank 0 was stopped when rank 1 failed, and
	// both started again with ONNXTRAIN_RESTART_COUNT=1.
	assert.Equal(t, []string{"rank 0 start 0", "rank 0 got terminated", "rank 0 start 1"}, linesOf(stdout.String(), 0))
	assert.Equal(t, []string{"rank 1 start 0", "rank 1 start 1"}, linesOf(stdout.String(), 1))
}

func TestRestartsRunOut(t *testing.T) {
	cfg, stdout, _ := testConfig(t, "always-fail", 2)
	cfg.MaxRestarts = 2
	cfg.MonitorInterval = 10 * time.Millisecond
	err := Run(safetyContext(t), cfg)
	var we *WorkerError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, 0, we.Rank)
	assert.Equal(t, 4, we.ExitCode)
	assert.Equal(t, 2, we.Restarts)
	assert.Equal(t, 2, we.MaxRestarts)
	assert.Contains(t, err.Error(), "after 2 of --max-restarts 2 restarts")
	for restart := range 3 {
		assert.Contains(t, stdout.String(), fmt.Sprintf("[rank 0] rank 0 start %d\n", restart))
	}
	assert.NotContains(t, stdout.String(), "start 3")
}

func TestSignalIsForwardedToEveryWorker(t *testing.T) {
	cfg, stdout, _ := testConfig(t, "signal", 3)
	dir := envValue(cfg.Env, testDirVar)
	sigs := make(chan os.Signal, 1)
	cfg.Signals = sigs
	errc := make(chan error, 1)
	go func() { errc <- Run(safetyContext(t), cfg) }()
	require.NoError(t, waitReady(dir, []int{0, 1, 2}, 0))
	sigs <- syscall.SIGINT
	err := <-errc

	var se *SignalError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, syscall.SIGINT, se.Signal)
	assert.Equal(t, 3, se.Workers)
	assert.Equal(t, 130, se.ExitCode())
	assert.Contains(t, err.Error(), "SIGINT")
	for r := range 3 {
		assert.Contains(t, stdout.String(), fmt.Sprintf("[rank %d] rank %d got interrupt\n", r, r))
	}
}

func TestCancelledContextStopsTheWorkers(t *testing.T) {
	cfg, stdout, _ := testConfig(t, "signal", 2)
	dir := envValue(cfg.Env, testDirVar)
	ctx, cancel := context.WithCancel(safetyContext(t))
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, cfg) }()
	require.NoError(t, waitReady(dir, []int{0, 1}, 0))
	cancel()
	err := <-errc
	assert.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, stdout.String(), "[rank 0] rank 0 got terminated")
	assert.Contains(t, stdout.String(), "[rank 1] rank 1 got terminated")
}

// TestOSSignalReachesWorkersThroughALauncherProcess runs a launcher as a
// process of its own and sends it SIGTERM, as a cluster's scheduler would.
func TestOSSignalReachesWorkersThroughALauncherProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", launcherVar+"=2", workerModeVar+"=signal", testDirVar+"="+dir)
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	require.NoError(t, waitReady(dir, []int{0, 1}, 0))
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stderr:\n%s", stderr.String())
	assert.Equal(t, 128+int(syscall.SIGTERM), ee.ExitCode())
	assert.Contains(t, stdout.String(), "[rank 0] rank 0 got terminated\n")
	assert.Contains(t, stdout.String(), "[rank 1] rank 1 got terminated\n")
	assert.Contains(t, stderr.String(), "received SIGTERM")
}

func envValue(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

func TestConfigErrors(t *testing.T) {
	self := []string{os.Args[0]}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no workers", Config{Command: self}, "--nproc-per-node 0"},
		{"negative nodes", Config{NProcPerNode: 1, NNodes: -1, Command: self}, "--nnodes -1"},
		{"node rank too big", Config{NProcPerNode: 1, NNodes: 2, NodeRank: 2, MasterAddr: "h", Command: self}, "--node-rank 2 is outside 0..1"},
		{"negative node rank", Config{NProcPerNode: 1, NodeRank: -1, Command: self}, "--node-rank -1"},
		{"several nodes without master", Config{NProcPerNode: 1, NNodes: 2, Command: self}, "--nnodes 2 needs --master-addr"},
		{"port too big", Config{NProcPerNode: 1, MasterPort: 70000, Command: self}, "--master-port 70000"},
		{"bad master", Config{NProcPerNode: 1, MasterAddr: "a b", Command: self}, "--master-addr"},
		{"negative restarts", Config{NProcPerNode: 1, MaxRestarts: -1, Command: self}, "--max-restarts -1"},
		{"negative interval", Config{NProcPerNode: 1, MonitorInterval: -time.Second, Command: self}, "--monitor-interval"},
		{"negative grace", Config{NProcPerNode: 1, GracePeriod: -time.Second, Command: self}, "--grace-period"},
		{"no command", Config{NProcPerNode: 1}, "no worker command"},
		{"unknown program", Config{NProcPerNode: 1, Command: []string{"no-such-program-onnxtrain-test"}}, `"no-such-program-onnxtrain-test"`},
		{"missing path", Config{NProcPerNode: 1, Command: []string{"/no/such/dir/prog"}}, "/no/such/dir/prog"},
		{"directory", Config{NProcPerNode: 1, Command: []string{os.TempDir() + "/"}}, "is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(context.Background(), tc.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.EqualError(t, tc.cfg.Validate(), err.Error(), "Validate reports the same problem without starting anything")
		})
	}
}

func TestResolveCommandRunsOwnExecutableForOnnxtrain(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	cmd, err := ResolveCommand([]string{"onnxtrain", "train", "--lr", "1"})
	require.NoError(t, err)
	assert.Equal(t, []string{self, "train", "--lr", "1"}, cmd)

	sh, err := ResolveCommand([]string{"sh", "-c", "true"})
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(sh[0], "/sh"), "sh resolved to %q", sh[0])
	assert.Equal(t, []string{"-c", "true"}, sh[1:])
}

func TestLineWriter(t *testing.T) {
	var buf lockedBuffer
	dst := &sharedWriter{w: &buf}
	l := newLineWriter(dst, "[rank 2] ")
	_, _ = l.Write([]byte("a"))
	_, _ = l.Write([]byte("b\nc\n\nd"))
	assert.Equal(t, "[rank 2] ab\n[rank 2] c\n[rank 2] \n", buf.String(), "only whole lines are written")
	l.flush()
	assert.Equal(t, "[rank 2] ab\n[rank 2] c\n[rank 2] \n[rank 2] d\n", buf.String())

	// A line longer than the limit is cut into pieces, each a line.
	var long lockedBuffer
	l = newLineWriter(&sharedWriter{w: &long}, "> ")
	_, _ = l.Write(bytes.Repeat([]byte("x"), maxLineBytes+10))
	l.flush()
	lines := strings.Split(strings.TrimSuffix(long.String(), "\n"), "\n")
	require.Len(t, lines, 2)
	assert.Len(t, lines[0], 2+maxLineBytes)
	assert.Equal(t, "> "+strings.Repeat("x", 10), lines[1])

	// A nil destination drops everything.
	n, err := newLineWriter(nil, "x").Write([]byte("gone\n"))
	assert.NoError(t, err)
	assert.Equal(t, 5, n)
}

func TestErrorsAreDistinguishable(t *testing.T) {
	var err error = &WorkerError{Rank: 5, LocalRank: 1, PID: 42, Status: "signal: killed", ExitCode: -1, Stopped: 1}
	assert.Equal(t, "launch: worker rank 5 (local rank 1, pid 42) failed: signal: killed; stopped the 1 other running worker", err.Error())
	var se *SignalError
	assert.False(t, errors.As(err, &se))
}
