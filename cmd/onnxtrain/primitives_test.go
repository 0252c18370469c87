package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// TestEnvPrimitives: `onnxtrain env --primitives` prints the primitive set,
// one op name a line and nothing else.
func TestEnvPrimitives(t *testing.T) {
	out := runEnv(t, "--primitives")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	assert.Equal(t, graph.Primitives, lines)
	assert.LessOrEqual(t, len(lines), 40)
	for _, l := range lines {
		assert.Regexp(t, `^[A-Z][A-Za-z]+$`, l)
	}
	cmd := newEnvCmd()
	cmd.SetArgs([]string{"--primitives", "--json"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	assert.Error(t, cmd.Execute(), "--primitives and --json exclude each other")
}

// TestConformancePrimitivesOnlySummary: `onnxtrain conformance
// --primitives-only` prints the same summary line as the full backend.
func TestConformancePrimitivesOnlySummary(t *testing.T) {
	root := testutil.ONNXTestdata(t) // under CI=true a missing folder fails
	run := func(args ...string) string {
		var out bytes.Buffer
		cmd := newConformanceCmd()
		cmd.SetArgs(append([]string{"--backend", "cpu", "--testdata", filepath.Join(root, "pytorch-operator")}, args...))
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		require.NoError(t, cmd.Execute())
		return out.String()
	}
	summary := regexp.MustCompile(`(?m)^\d+ passed, \d+ failed, \d+ skipped$`)
	full, prims := summary.FindString(run()), summary.FindString(run("--primitives-only"))
	require.NotEmpty(t, full)
	assert.Equal(t, full, prims)
}
