package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/nn"
)

// envWinograd selects the CPU backend's Winograd policy for 3×3 stride-1
// convolutions: "auto" (the default: the layer shapes where it measured
// faster), "off" (always the implicit GEMM) or "force" (wherever it
// applies). Benchmarks compare the policies with it.
const envWinograd = "ONNXTRAIN_WINOGRAD"

// winogradPolicy parses a value of envWinograd ("" is auto).
func winogradPolicy(v string) (nn.WinogradPolicy, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "auto":
		return nn.WinogradAuto, nil
	case "off":
		return nn.WinogradOff, nil
	case "force":
		return nn.WinogradForce, nil
	}
	return 0, fmt.Errorf("%s=%q: want auto, off or force", envWinograd, v)
}

// applyWinogradEnv sets the CPU backend's Winograd policy from the
// environment (the root command's pre-run: an unknown value is an error
// of the command, not a process exit during start-up).
func applyWinogradEnv() error {
	p, err := winogradPolicy(os.Getenv(envWinograd))
	if err != nil {
		return err
	}
	nn.SetWinograd(p)
	return nil
}
