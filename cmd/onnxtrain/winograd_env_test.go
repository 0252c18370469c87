package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/nn"
)

// TestWinogradPolicyEnv: ONNXTRAIN_WINOGRAD's values map to the policies
// (unset is auto, case and spaces ignored) and anything else is an error
// that names the variable.
func TestWinogradPolicyEnv(t *testing.T) {
	for v, want := range map[string]nn.WinogradPolicy{
		"": nn.WinogradAuto, "auto": nn.WinogradAuto, "off": nn.WinogradOff,
		"Force": nn.WinogradForce, " OFF ": nn.WinogradOff,
	} {
		got, err := winogradPolicy(v)
		require.NoError(t, err, v)
		assert.Equal(t, want, got, v)
	}
	_, err := winogradPolicy("on")
	require.Error(t, err)
	assert.Contains(t, err.Error(), envWinograd)
	// The root command's pre-run applies it, and fails on a bad value.
	prev := nn.SetWinograd(nn.WinogradAuto)
	defer nn.SetWinograd(prev)
	t.Setenv(envWinograd, "force")
	require.NoError(t, applyWinogradEnv())
	assert.Equal(t, nn.WinogradForce, nn.Winograd())
	t.Setenv(envWinograd, "on")
	require.ErrorContains(t, applyWinogradEnv(), envWinograd)
}
