//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/stretchr/testify/require"
)

// fakeHost is one "machine" of the multi-host test: the command prefix
// that runs a process on it, its address, and the environment its
// processes get.
type fakeHost struct {
	prefix []string
	addr   string
	env    []string
}

// netnsHosts makes two network namespaces joined by a veth pair
// (10.213.0.1/24 and 10.213.0.2/24), each with its loopback up, and
// returns them; the namespaces are deleted when the test ends, whether it
// passed or not. It returns an error where namespaces cannot be made (no
// root or CAP_NET_ADMIN, no iproute2).
func netnsHosts(t *testing.T) ([]fakeHost, error) {
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil, fmt.Errorf("iproute2's ip is not installed: %w", err)
	}
	id := strconv.Itoa(os.Getpid() % 100000)
	ns := []string{"onnxtrain-" + id + "-0", "onnxtrain-" + id + "-1"}
	dev := []string{"ot" + id + "a", "ot" + id + "b"}
	addr := []string{"10.213.0.1", "10.213.0.2"}
	run := func(args ...string) error {
		out, err := exec.Command(ip, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
		return nil
	}
	cleanup := func() {
		for _, n := range ns {
			_ = exec.Command(ip, "netns", "delete", n).Run() // also removes the veth pair
		}
	}
	t.Cleanup(cleanup)
	steps := [][]string{
		{"netns", "add", ns[0]},
		{"netns", "add", ns[1]},
		{"link", "add", dev[0], "type", "veth", "peer", "name", dev[1]},
	}
	for r := range 2 {
		steps = append(steps,
			[]string{"link", "set", dev[r], "netns", ns[r]},
			[]string{"-n", ns[r], "addr", "add", addr[r] + "/24", "dev", dev[r]},
			[]string{"-n", ns[r], "link", "set", dev[r], "up"},
			[]string{"-n", ns[r], "link", "set", "lo", "up"})
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			cleanup()
			_ = exec.Command(ip, "link", "delete", dev[0]).Run() // when it never moved
			return nil, err
		}
	}
	hosts := make([]fakeHost, 2)
	for r := range hosts {
		hosts[r] = fakeHost{prefix: []string{ip, "netns", "exec", ns[r]}, addr: addr[r]}
	}
	return hosts, nil
}

// loopbackHosts are two "machines" on two loopback addresses: each node's
// workers bind their peer listeners to its own address.
func loopbackHosts() []fakeHost {
	return []fakeHost{
		{addr: "127.0.0.1", env: []string{"ONNXTRAIN_LISTEN_HOST=127.0.0.1"}},
		{addr: "127.0.0.2", env: []string{"ONNXTRAIN_LISTEN_HOST=127.0.0.2"}},
	}
}

// TestMultiHostTwoNodes: two launchers, one per host (`onnxtrain launch
// --nnodes 2 --node-rank R --master-addr <host 0> --nproc-per-node 1`),
// train the MLP fixture with per-process batch 2 and log the losses of one
// process with batch 4. The hosts are two network namespaces joined by a
// veth pair; where namespaces cannot be made that subtest skips (a failure
// under CI=true). A second subtest always runs on two loopback addresses.
func TestMultiHostTwoNodes(t *testing.T) {
	testutil.SkipShort(t, "starts launcher and worker processes")
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	self, err := os.Executable()
	require.NoError(t, err)
	model, err := filepath.Abs("../../models/mlp/mlp_train.onnx")
	require.NoError(t, err)
	data, err := filepath.Abs("../../models/mlp/train_case.npz")
	require.NoError(t, err)
	const steps = 4
	common := []string{"train", "--model", model, "--data", data, "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
		"--steps", strconv.Itoa(steps), "--shuffle=false", "--log-format", "json"}
	single := stepLosses(t, runCLI(t, append(common, "--batch-size", "4")...))
	require.Len(t, single, steps)

	run := func(t *testing.T, hosts []fakeHost, port int) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		type result struct {
			stdout, stderr bytes.Buffer
			err            error
		}
		res := make([]*result, len(hosts))
		done := make(chan int, len(hosts))
		for r, h := range hosts {
			args := append(append([]string{}, h.prefix...), self, "launch", "--nnodes", "2", "--node-rank", strconv.Itoa(r),
				"--master-addr", hosts[0].addr, "--master-port", strconv.Itoa(port), "--nproc-per-node", "1", "--")
			args = append(append(args, self), append(common, "--batch-size", "2", "--dist-timeout", "1m")...)
			cmd := exec.CommandContext(ctx, args[0], args[1:]...)
			cmd.Env = append(append(os.Environ(), h.env...), "ONNXTRAIN_DIST_SECRET=multi-host-test-shared-secret")
			res[r] = &result{}
			cmd.Stdout, cmd.Stderr = &res[r].stdout, &res[r].stderr
			require.NoError(t, cmd.Start())
			go func() {
				res[r].err = cmd.Wait()
				done <- r
			}()
		}
		for range hosts {
			<-done
		}
		for r := range hosts {
			require.NoError(t, res[r].err, "launcher of node %d (context: %v)\nstderr: %s\nstdout: %s", r, ctx.Err(), res[r].stderr.String(), res[r].stdout.String())
		}
		got := stepLosses(t, res[0].stdout.String())
		assertLossesEqual(t, single, got, "2 hosts × 1 process against 1 process with the global batch")
		t.Logf("losses: 2 hosts %v, 1 process %v", got, single)
	}

	t.Run("netns", func(t *testing.T) {
		hosts, err := netnsHosts(t)
		port := 29500 // each namespace has its own ports
		if err != nil {
			// The loopback-addresses subtest below still runs; a CI run must
			// show two real network stacks, so there this is a failure.
			testutil.Skip(t, "multi-host: cannot make network namespaces (need root and iproute2): %v", err)
		}
		t.Logf("multi-host: two network namespaces joined by a veth pair, hosts %s and %s", hosts[0].addr, hosts[1].addr)
		run(t, hosts, port)
	})
	t.Run("loopback-addresses", func(t *testing.T) {
		t.Log("multi-host: two loopback addresses, 127.0.0.1 and 127.0.0.2")
		run(t, loopbackHosts(), freePort(t))
	})
}

// freePort is a port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
