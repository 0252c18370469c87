package cuda

import (
	"errors"
	"fmt"
)

// ErrUnavailable is wrapped by every error that says the backend cannot
// run on this machine (no driver, no library, no GPU).
var ErrUnavailable = errors.New("cuda: unavailable")

// unavailable is the one-line reason the backend cannot run here.
type unavailable struct{ reason string }

func (u *unavailable) Error() string { return "cuda backend unavailable: " + u.reason }
func (u *unavailable) Is(target error) bool {
	return target == ErrUnavailable
}

// cuResultNames are the CUresult codes of the driver API (cuda.h) that
// the backend can meet, by number; cuGetErrorName answers for the others
// when the driver is loaded.
var cuResultNames = map[int]string{
	0:   "CUDA_SUCCESS",
	1:   "CUDA_ERROR_INVALID_VALUE",
	2:   "CUDA_ERROR_OUT_OF_MEMORY",
	3:   "CUDA_ERROR_NOT_INITIALIZED",
	4:   "CUDA_ERROR_DEINITIALIZED",
	34:  "CUDA_ERROR_STUB_LIBRARY",
	46:  "CUDA_ERROR_DEVICE_UNAVAILABLE",
	100: "CUDA_ERROR_NO_DEVICE",
	101: "CUDA_ERROR_INVALID_DEVICE",
	200: "CUDA_ERROR_INVALID_IMAGE",
	201: "CUDA_ERROR_INVALID_CONTEXT",
	209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
	218: "CUDA_ERROR_INVALID_PTX",
	221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
	222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	400: "CUDA_ERROR_INVALID_HANDLE",
	500: "CUDA_ERROR_NOT_FOUND",
	600: "CUDA_ERROR_NOT_READY",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS",
	701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	702: "CUDA_ERROR_LAUNCH_TIMEOUT",
	719: "CUDA_ERROR_LAUNCH_FAILED",
	800: "CUDA_ERROR_NOT_PERMITTED",
	801: "CUDA_ERROR_NOT_SUPPORTED",
	803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	999: "CUDA_ERROR_UNKNOWN",
}

// cuResultHints say what a user can do about the codes that mean "this
// machine cannot run CUDA" or a likely set-up problem.
var cuResultHints = map[int]string{
	34:  "libcuda.so.1 is the toolkit's stub, not the driver's library: install the NVIDIA driver or put its folder first in ONNXTRAIN_CUDA_LIBS",
	100: "no GPU: the driver sees no CUDA device (check nvidia-smi and CUDA_VISIBLE_DEVICES)",
	46:  "the GPU is in exclusive mode and busy, or unavailable",
	222: "the driver is too old for the kernels' PTX (ISA 7.0, CUDA 11.0 or newer)",
	209: "the driver cannot JIT the kernels' PTX for this GPU",
	803: "the driver's kernel module and libcuda.so.1 are different versions",
	2:   "out of GPU memory: lower the batch size",
}

// cuError is a failed driver API call.
type cuError struct {
	call string
	code int
	name string // from cuGetErrorName, or the table
}

func (e *cuError) Error() string {
	name := e.name
	if name == "" {
		name = cuResultName(e.code)
	}
	msg := fmt.Sprintf("cuda: %s: %s (%d)", e.call, name, e.code)
	if h, ok := cuResultHints[e.code]; ok {
		msg += ": " + h
	}
	return msg
}

// Is makes the codes that mean the machine has no usable GPU match
// ErrUnavailable.
func (e *cuError) Is(target error) bool {
	return target == ErrUnavailable && (e.code == 100 || e.code == 34 || e.code == 803 || e.code == 46)
}

func cuResultName(code int) string {
	if n, ok := cuResultNames[code]; ok {
		return n
	}
	return fmt.Sprintf("CUresult %d", code)
}

// cublasStatusNames are cuBLAS's status codes (cublas_api.h).
var cublasStatusNames = map[int]string{
	0:  "CUBLAS_STATUS_SUCCESS",
	1:  "CUBLAS_STATUS_NOT_INITIALIZED",
	3:  "CUBLAS_STATUS_ALLOC_FAILED",
	7:  "CUBLAS_STATUS_INVALID_VALUE",
	8:  "CUBLAS_STATUS_ARCH_MISMATCH",
	11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR",
	15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

type cublasError struct {
	call string
	code int
}

func (e *cublasError) Error() string {
	name, ok := cublasStatusNames[e.code]
	if !ok {
		name = fmt.Sprintf("cublasStatus_t %d", e.code)
	}
	return fmt.Sprintf("cuda: %s: %s (%d)", e.call, name, e.code)
}
