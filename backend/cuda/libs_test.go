package cuda

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeEnv is a machine described by its environment and files.
func fakeEnv(env map[string]string, files ...string) searchEnv {
	return searchEnv{
		Getenv: func(k string) string { return env[k] },
		Glob: func(p string) ([]string, error) {
			var out []string
			seen := map[string]bool{}
			for _, f := range files {
				for d := f; d != "/" && d != "."; d = filepath.Dir(d) {
					if ok, _ := filepath.Match(p, d); ok && !seen[d] {
						seen[d] = true
						out = append(out, d)
					}
				}
			}
			return out, nil
		},
		Exists: func(p string) bool { return slices.Contains(files, p) },
	}
}

func TestLibrarySearchOrder(t *testing.T) {
	env := fakeEnv(map[string]string{
		"ONNXTRAIN_CUDA_LIBS": "/opt/mine/lib:/opt/other",
		"LD_LIBRARY_PATH":     "/ld/one::/ld/two",
		"VIRTUAL_ENV":         "/venv",
	},
		"/usr/local/cuda-11.8/lib64/libcublas.so.11",
		"/usr/local/cuda-12.10/lib64/libcublas.so.12",
		"/usr/local/cuda-12.4/lib64/libcublas.so.12",
		"/venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublas.so.12",
	)
	dirs := libSearchDirs(libCublas, env)
	require.GreaterOrEqual(t, len(dirs), 8)
	// The variable first, then LD_LIBRARY_PATH (empty entries dropped).
	assert.Equal(t, []string{"/opt/mine/lib", "/opt/other", "/ld/one", "/ld/two", "/usr/local/cuda/lib64"}, dirs[:5])
	// Versioned toolkits newest first, by version number, not by string.
	i12, i124, i118 := slices.Index(dirs, "/usr/local/cuda-12.10/lib64"), slices.Index(dirs, "/usr/local/cuda-12.4/lib64"), slices.Index(dirs, "/usr/local/cuda-11.8/lib64")
	require.True(t, i12 >= 0 && i124 >= 0 && i118 >= 0, "%v", dirs)
	assert.Less(t, i12, i124)
	assert.Less(t, i124, i118)
	// The distribution folder before Python wheels; the wheel folder found.
	wheel := slices.Index(dirs, "/venv/lib/python3.11/site-packages/nvidia/cublas/lib")
	assert.Greater(t, wheel, slices.Index(dirs, "/usr/lib/x86_64-linux-gnu"))
	// The driver never comes from a wheel.
	assert.NotContains(t, libSearchDirs(libCUDA, env), "/venv/lib/python3.11/site-packages/nvidia/cublas/lib")

	c := candidates(libCublas, env)
	assert.Equal(t, []string{
		"/usr/local/cuda-12.10/lib64/libcublas.so.12",
		"/usr/local/cuda-12.4/lib64/libcublas.so.12",
		"/usr/local/cuda-11.8/lib64/libcublas.so.11",
		"/venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublas.so.12",
		"libcublas.so.12", // the loader's own search, last
	}, c)
}

func TestErrorMapping(t *testing.T) {
	e := &cuError{call: "cuDeviceGetCount", code: 100}
	assert.Equal(t, "cuda: cuDeviceGetCount: CUDA_ERROR_NO_DEVICE (100): no GPU: the driver sees no CUDA device (check nvidia-smi and CUDA_VISIBLE_DEVICES)", e.Error())
	assert.ErrorIs(t, e, ErrUnavailable)
	oom := &cuError{call: "cuMemAlloc(1024 bytes)", code: 2}
	assert.NotErrorIs(t, oom, ErrUnavailable)
	assert.Contains(t, oom.Error(), "CUDA_ERROR_OUT_OF_MEMORY")
	assert.Contains(t, (&cuError{call: "x", code: 12345}).Error(), "CUresult 12345")
	assert.Contains(t, (&cuError{call: "cuInit", code: 34}).Error(), "stub")
	assert.Equal(t, "cuda: cublasCreate: CUBLAS_STATUS_NOT_INITIALIZED (1)", (&cublasError{call: "cublasCreate", code: 1}).Error())
}

func TestVersionFormats(t *testing.T) {
	assert.Equal(t, "12.4", FormatCUDAVersion(12040))
	assert.Equal(t, "11.8", FormatCUDAVersion(11080))
	assert.Equal(t, "12.4.5", FormatCublasVersion(120405))
	assert.Equal(t, "11.11.3", FormatCublasVersion(111103))
}

func TestPickDevice(t *testing.T) {
	i, err := pickDevice("", "", 4)
	require.NoError(t, err)
	assert.Equal(t, 0, i)
	i, err = pickDevice("", "5", 4) // one GPU per data-parallel worker
	require.NoError(t, err)
	assert.Equal(t, 1, i)
	i, err = pickDevice("2", "5", 4)
	require.NoError(t, err)
	assert.Equal(t, 2, i)
	_, err = pickDevice("4", "", 4)
	assert.ErrorContains(t, err, "ONNXTRAIN_CUDA_DEVICE")
	_, err = pickDevice("", "", 0)
	assert.ErrorIs(t, err, ErrUnavailable)
}
