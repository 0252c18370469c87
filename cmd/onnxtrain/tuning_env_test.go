package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
)

// TestTuningEnv: ONNXTRAIN_WINOGRAD's values map to the policies (unset is
// auto, case and spaces ignored), ONNXTRAIN_NO_MEMPLAN to the memory-plan
// option, and a bad Winograd value is an error that names the variable.
func TestTuningEnv(t *testing.T) {
	for v, want := range map[string]backend.WinogradPolicy{
		"": backend.WinogradAuto, "auto": backend.WinogradAuto, "off": backend.WinogradOff,
		"Force": backend.WinogradForce, " OFF ": backend.WinogradOff,
	} {
		t.Setenv(envWinograd, v)
		got, err := envTuning()
		require.NoError(t, err, v)
		assert.Equal(t, want, got.Winograd, v)
	}
	t.Setenv(envWinograd, "on")
	_, err := envTuning()
	require.ErrorContains(t, err, envWinograd)
	t.Setenv(envWinograd, "")
	for v, want := range map[string]bool{"": false, "0": false, "1": true, "yes": true} {
		t.Setenv(envNoMemPlan, v)
		got, err := envTuning()
		require.NoError(t, err)
		assert.Equal(t, want, got.NoMemoryPlan, v)
	}
	t.Setenv(envNoMemPlan, "")
	for v, want := range map[string]bool{"": false, "0": false, "1": true} {
		t.Setenv(envNoPushDownGather, v)
		assert.Equal(t, want, noPushDownGather(), "%s=%q", envNoPushDownGather, v)
	}
}
