//go:build unix

package launch

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/onnxtrain/onnxtrain/distrib"
)

// The tests run this test binary as the workers (and, for the end-to-end
// signal test, as the launcher), chosen by environment variables.
const (
	workerModeVar = "LAUNCH_TEST_WORKER"   // what a worker does
	testDirVar    = "LAUNCH_TEST_DIR"      // where workers leave ready files
	launcherVar   = "LAUNCH_TEST_LAUNCHER" // run as a launcher of N workers
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(workerModeVar); mode != "" && os.Getenv(launcherVar) == "" {
		os.Exit(testWorker(mode))
	}
	if n := os.Getenv(launcherVar); n != "" {
		os.Exit(testLauncher(n))
	}
	os.Exit(m.Run())
}

func envInt(name string) int {
	v, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		fmt.Fprintf(os.Stderr, "test worker: %s=%q: %v\n", name, os.Getenv(name), err)
		os.Exit(100)
	}
	return v
}

// markReady leaves the file that says this rank has installed its signal
// handlers; waitReady waits for the other ranks' files.
func markReady(rank int) {
	p := filepath.Join(os.Getenv(testDirVar), fmt.Sprintf("ready-%d-%s", rank, os.Getenv("ONNXTRAIN_RESTART_COUNT")))
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "test worker:", err)
		os.Exit(101)
	}
}

func waitReady(dir string, ranks []int, restart int) error {
	deadline := time.Now().Add(20 * time.Second)
	for _, r := range ranks {
		p := filepath.Join(dir, fmt.Sprintf("ready-%d-%d", r, restart))
		for {
			if _, err := os.Stat(p); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("rank %d never became ready (%s)", r, p)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

func otherRanks(self, world int) []int {
	var out []int
	for r := range world {
		if r != self {
			out = append(out, r)
		}
	}
	return out
}

// waitForStop handles SIGINT and SIGTERM (or ignores SIGTERM), marks the
// rank ready and waits for a signal; it prints what happened.
func waitForStop(rank int, ignoreTerm bool) int {
	ch := make(chan os.Signal, 1)
	if ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
		signal.Notify(ch, syscall.SIGINT)
		fmt.Printf("rank %d ignores SIGTERM\n", rank)
	} else {
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	}
	markReady(rank)
	select {
	case s := <-ch:
		fmt.Printf("rank %d got %v\n", rank, s)
		return 0
	case <-time.After(60 * time.Second):
		fmt.Printf("rank %d slept to the end\n", rank)
		return 0
	}
}

func testWorker(mode string) int {
	rank, world := envInt("RANK"), envInt("WORLD_SIZE")
	restart := envInt("ONNXTRAIN_RESTART_COUNT")
	switch mode {
	case "env":
		for _, name := range append(append([]string(nil), launcherVars...), "GOMAXPROCS", "LAUNCH_TEST_INHERITED", distrib.SecretVar, distrib.SecretFileVar) {
			fmt.Printf("%s=%s\n", name, os.Getenv(name))
		}
		fmt.Fprintln(os.Stderr, "to stderr")
		fmt.Print("no newline at the end")
		return 0
	case "json":
		fmt.Printf("{\"step\":1,\"rank\":%d}\n", rank)
		fmt.Fprintln(os.Stderr, "log line")
		return 0
	case "fail":
		// FAIL_RANK exits 3 once every other rank waits for a signal.
		if rank == envInt("FAIL_RANK") {
			if err := waitReady(os.Getenv(testDirVar), otherRanks(rank, world), restart); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 102
			}
			fmt.Fprintf(os.Stderr, "rank %d fails now\n", rank)
			return 3
		}
		return waitForStop(rank, os.Getenv("IGNORE_TERM_RANK") == strconv.Itoa(rank))
	case "restart":
		// Rank 1 fails on the first start; every rank succeeds on the next.
		fmt.Printf("rank %d start %d\n", rank, restart)
		if restart > 0 {
			return 0
		}
		if rank == 1 {
			if err := waitReady(os.Getenv(testDirVar), otherRanks(rank, world), restart); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 102
			}
			return 3
		}
		return waitForStop(rank, false)
	case "always-fail":
		fmt.Printf("rank %d start %d\n", rank, restart)
		if rank == 0 {
			return 4
		}
		return waitForStop(rank, false)
	case "signal":
		return waitForStop(rank, false)
	}
	fmt.Fprintf(os.Stderr, "test worker: unknown mode %q\n", mode)
	return 100
}

// testLauncher runs as `onnxtrain launch` does: n workers of this binary
// (in the mode of workerModeVar), OS signals forwarded.
func testLauncher(n string) int {
	nproc, err := strconv.Atoi(n)
	if err != nil {
		return 100
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	env := []string{}
	for _, kv := range os.Environ() {
		if len(kv) >= len(launcherVar) && kv[:len(launcherVar)] == launcherVar {
			continue
		}
		env = append(env, kv)
	}
	err = Run(context.Background(), Config{
		NProcPerNode: nproc, Command: []string{os.Args[0]}, Env: env,
		Stdout: os.Stdout, Stderr: os.Stderr, Signals: sigs, GracePeriod: 5 * time.Second,
	})
	if err == nil {
		return 0
	}
	fmt.Fprintln(os.Stderr, err)
	if se, ok := err.(*SignalError); ok {
		return se.ExitCode()
	}
	return 1
}
