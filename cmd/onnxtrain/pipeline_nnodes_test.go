//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// TestPipelineTwoNodes: a 2-stage pipeline over two "nodes", one launcher
// each (`onnxtrain launch --nnodes 2 --node-rank R --nproc-per-node 1`),
// stage 0 on node 0 and stage 1 on node 1, activations and gradients over
// TCP between the nodes' addresses, logs the losses of one process with
// --grad-accum M. The nodes are two network namespaces joined by a veth
// pair (skipped where namespaces cannot be made, a failure under CI=true)
// and, always, two loopback addresses.
func TestPipelineTwoNodes(t *testing.T) {
	testutil.SkipShort(t, "starts launcher and worker processes")
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	self, err := os.Executable()
	require.NoError(t, err)
	model, err := filepath.Abs(transformerModel)
	require.NoError(t, err)
	data, err := filepath.Abs(transformerData)
	require.NoError(t, err)
	const steps, micro = 3, 4
	common := []string{"train", "--model", model, "--data", data, "--loss", "output:loss", "--optimizer", "adamw", "--lr", "0.001",
		"--steps", strconv.Itoa(steps), "--shuffle=false", "--log-format", "json", "--batch-size", "2"}
	single := stepLosses(t, runCLI(t, append(common, "--grad-accum", strconv.Itoa(micro))...))
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
			args = append(append(args, self), append(common, "--pipeline-stages", "2", "--micro-batches", strconv.Itoa(micro),
				"--schedule", "1f1b", "--dist-timeout", "1m")...)
			cmd := exec.CommandContext(ctx, args[0], args[1:]...)
			cmd.Env = append(append(os.Environ(), h.env...), "ONNXTRAIN_DIST_SECRET=pipeline-two-nodes-test-secret")
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
		require.Empty(t, res[1].stdout.String(), "only rank 0 writes to standard output")
		got := stepLosses(t, res[0].stdout.String())
		assertLossesEqual(t, single, got, "2-stage pipeline over 2 nodes against 1 process with --grad-accum")
		t.Logf("losses: pipeline over 2 nodes %v, 1 process %v", got, single)
	}

	t.Run("netns", func(t *testing.T) {
		hosts, err := netnsHosts(t)
		if err != nil {
			testutil.Skip(t, "pipeline over 2 nodes: cannot make network namespaces (need root and iproute2): %v", err)
		}
		run(t, hosts, 29500) // each namespace has its own ports
	})
	t.Run("loopback-addresses", func(t *testing.T) {
		run(t, loopbackHosts(), freePort(t))
	})
}

// TestPipelineDevicesEqualProcesses: the stages on two CPU devices of one
// process (`--devices cpu:0,cpu:1`, activations in memory) log the losses
// and gradient norms of the same pipeline over two processes (activations
// over TCP), step for step, and write the same model.
func TestPipelineDevicesEqualProcesses(t *testing.T) {
	testutil.SkipShort(t, "starts worker processes")
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	common := []string{"train", "--model", vitModel, "--data", vitData, "--optimizer", "adamw", "--lr", "0.001",
		"--steps", "3", "--shuffle=false", "--log-format", "json", "--batch-size", "2", "--clip-grad-norm", "5",
		"--pipeline-stages", "2", "--micro-batches", "4", "--schedule", "zb1p"}
	inProcess := stepRecords(t, runCLI(t, append(common, "--devices", "cpu:0,cpu:1")...))
	processes := stepRecords(t, runCLI(t, launched(t, 2, nil, common...)...))
	require.Len(t, inProcess, 3)
	require.Len(t, processes, len(inProcess))
	for i := range inProcess {
		require.InDelta(t, inProcess[i].Loss, processes[i].Loss, 1e-5*inProcess[i].Loss, "step %d loss", i+1)
		require.InDelta(t, inProcess[i].GradNorm, processes[i].GradNorm, 1e-5*inProcess[i].GradNorm, "step %d grad norm", i+1)
	}
}
