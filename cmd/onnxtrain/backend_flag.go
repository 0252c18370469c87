package main

import (
	"github.com/spf13/cobra"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cuda"
)

// checkBackendFlag opens the backend a command's --backend names before
// the command does anything else, so that `--backend cuda` on a machine
// without a GPU fails at once with the backend's one-line reason (no
// NVIDIA driver, libcuda.so.1 not found, no GPU) instead of after the
// model and data are loaded. The CPU backend needs no check.
func checkBackendFlag(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup("backend")
	if f == nil || f.Value.String() == "" || f.Value.String() == "cpu" {
		return nil
	}
	_, err := backend.Open(f.Value.String())
	return err
}

// addDeviceBackendFlags gives the commands that plan device memory but had
// no --backend flag one (estimate-memory: the plan is the backend-neutral
// liveness plan every backend's arena follows; the flag checks that the
// backend can run here).
func addDeviceBackendFlags(root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.Name() == "estimate-memory" && c.Flags().Lookup("backend") == nil {
			c.Flags().String("backend", "cpu", "backend whose device memory is estimated (checked to be available; the plan is the same)")
		}
	}
}

// cudaEnvLines is what `onnxtrain env` prints about the CUDA backend.
func cudaEnvLines() []string { return cuda.Probe().Lines() }
