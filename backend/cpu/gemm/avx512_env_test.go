package gemm

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ONNXTRAIN_NO_AVX512=1 turns the AVX-512 kernel off at start-up (it is
// read once, when the package initialises), so the check runs in a child
// process: there AVX512() is false and products still agree with the
// reference.
func TestNoAVX512Environment(t *testing.T) {
	if os.Getenv("ONNXTRAIN_GEMM_ENV_CHILD") != "" {
		require.False(t, AVX512(), "ONNXTRAIN_NO_AVX512=1 leaves the AVX-512 kernel off")
		m, n, k := 37, 53, 29
		a, b := make([]float32, m*k), make([]float32, k*n)
		for i := range a {
			a[i] = float32(i%7) - 3
		}
		for i := range b {
			b[i] = float32(i%5) - 2
		}
		c := make([]float32, m*n)
		Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var want float32
				for p := 0; p < k; p++ {
					want += a[i*k+p] * b[p*n+j]
				}
				require.Equal(t, want, c[i*n+j], "C[%d,%d]", i, j)
			}
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoAVX512Environment$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ONNXTRAIN_GEMM_ENV_CHILD=1", "ONNXTRAIN_NO_AVX512=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child: %s", out)
	assert.Contains(t, string(out), "PASS")
}
