//go:build linux && (amd64 || arm64)

package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLibraryNotFoundNamesTheLibrary(t *testing.T) {
	env := fakeEnv(map[string]string{"ONNXTRAIN_CUDA_LIBS": "/nowhere"})
	_, _, err := openLibrary(Library{Name: "libnotcuda.so.1", Files: []string{"libnotcuda-onnxtrain-test.so.1"}}, env)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUnavailable)
	assert.Contains(t, err.Error(), "libnotcuda.so.1 not found")
	assert.Contains(t, err.Error(), "/nowhere")
	assert.NotContains(t, err.Error(), "\n")
}
