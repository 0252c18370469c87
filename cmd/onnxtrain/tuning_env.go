package main

import (
	"fmt"
	"os"

	"github.com/onnxtrain/onnxtrain/backend"
)

// The environment variables that choose compile options
// (backend.Tuning). They are read here only and passed to every compile
// the command makes; no backend reads the environment.
const (
	// envWinograd selects the Winograd policy for 3×3 stride-1
	// convolutions: "auto" (the default: the layer shapes where it
	// measured faster), "off" (always the implicit GEMM) or "force"
	// (wherever it applies). Benchmarks compare the policies with it.
	envWinograd = "ONNXTRAIN_WINOGRAD"
	// envNoMemPlan, when set to anything but "" or "0", turns the memory
	// plan off.
	envNoMemPlan = "ONNXTRAIN_NO_MEMPLAN"
	// envNoPushDownGather, when set to anything but "" or "0", leaves the
	// pushdown-gather pass out of the training step
	// (train.Config.NoPushDownGather): the step then computes every row
	// of ViT's last block, as before the pass; benchmarks compare the two.
	envNoPushDownGather = "ONNXTRAIN_NO_PUSHDOWN_GATHER"
)

// envSet reports whether the variable name is set to anything but "" or
// "0".
func envSet(name string) bool {
	v := os.Getenv(name)
	return v != "" && v != "0"
}

// noPushDownGather reads envNoPushDownGather.
func noPushDownGather() bool { return envSet(envNoPushDownGather) }

// envTuning reads the compile options from the environment; a bad value
// is an error that names the variable.
func envTuning() (backend.Tuning, error) {
	var t backend.Tuning
	p, err := backend.ParseWinograd(os.Getenv(envWinograd))
	if err != nil {
		return t, fmt.Errorf("%s: %w", envWinograd, err)
	}
	t.Winograd = p
	t.NoMemoryPlan = envSet(envNoMemPlan)
	return t, nil
}

// tuningOrDefault is envTuning for the places that run after the root
// command's pre-run has already refused a bad value.
func tuningOrDefault() backend.Tuning {
	t, _ := envTuning()
	return t
}
