package cpu_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/conformance"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu"
)

// Known gaps: cases of features the README lists as not supported yet. A case
// listed here is skipped with the reason; every other case must pass.
var knownGaps = map[string]string{}

func runSuite(t *testing.T, suite string) []conformance.Result {
	root := conformance.TestdataDir()
	if root == "" {
		t.Skip("../shared/onnx/testdata not found (set ONNX_TESTDATA)")
	}
	b, err := backend.Open("cpu")
	require.NoError(t, err)
	opts := conformance.Options{Skip: knownGaps}
	if r := os.Getenv("ONNXTRAIN_CONFORMANCE_RUN"); r != "" {
		opts.Run = regexp.MustCompile(r)
	}
	results, err := conformance.Run(b, filepath.Join(root, suite), opts, func(r conformance.Result) {
		if r.Status != conformance.Pass || testing.Verbose() {
			t.Log(r.String())
		}
	})
	require.NoError(t, err)
	t.Log(suite + ": " + conformance.FormatSummary(results))
	return results
}

func TestConformanceNode(t *testing.T) {
	results := runSuite(t, "node")
	for _, r := range results {
		assert.NotEqual(t, conformance.Fail, r.Status, "%s", r)
	}
}
