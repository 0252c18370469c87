package cuda

import "sync"

// Driver is the loaded driver API and cuBLAS: symbol addresses, called
// through the platform's dlopen shim (driver_linux.go). One per process.
type Driver struct {
	// CUDAPath, CublasPath are the files opened.
	CUDAPath, CublasPath, CublasLtPath string
	// Version is cuDriverGetVersion's answer (12040 for 12.4).
	Version int
	// CublasVersion is cublasGetVersion's (120401 for 12.4.1), 0 before a
	// handle exists.
	CublasVersion int

	sym driverSyms
	bl  cublasSyms
}

// driverSyms are the driver API functions the backend calls.
type driverSyms struct {
	cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet, cuDeviceGetName,
	cuDeviceTotalMem, cuDeviceGetAttribute, cuDevicePrimaryCtxRetain, cuCtxSetCurrent,
	cuCtxSynchronize, cuMemAlloc, cuMemFree, cuMemGetInfo, cuMemcpyHtoD, cuMemcpyDtoH,
	cuMemcpyDtoDAsync, cuMemsetD8Async, cuModuleLoadData, cuModuleGetFunction,
	cuLaunchKernel, cuStreamCreate, cuStreamSynchronize, cuStreamBeginCapture,
	cuStreamEndCapture, cuGraphInstantiate, cuGraphLaunch, cuGraphExecDestroy,
	cuGraphDestroy, cuGetErrorName uintptr
}

// driverSymbolNames maps each field of driverSyms to the exported symbol
// (the _v2 names are the 64-bit-size ABI every driver since CUDA 3.2 has;
// cuStreamBeginCapture_v2 takes a capture mode).
func (s *driverSyms) table() []symbol {
	return []symbol{
		{"cuInit", &s.cuInit},
		{"cuDriverGetVersion", &s.cuDriverGetVersion},
		{"cuDeviceGetCount", &s.cuDeviceGetCount},
		{"cuDeviceGet", &s.cuDeviceGet},
		{"cuDeviceGetName", &s.cuDeviceGetName},
		{"cuDeviceTotalMem_v2", &s.cuDeviceTotalMem},
		{"cuDeviceGetAttribute", &s.cuDeviceGetAttribute},
		{"cuDevicePrimaryCtxRetain", &s.cuDevicePrimaryCtxRetain},
		{"cuCtxSetCurrent", &s.cuCtxSetCurrent},
		{"cuCtxSynchronize", &s.cuCtxSynchronize},
		{"cuMemAlloc_v2", &s.cuMemAlloc},
		{"cuMemFree_v2", &s.cuMemFree},
		{"cuMemGetInfo_v2", &s.cuMemGetInfo},
		{"cuMemcpyHtoD_v2", &s.cuMemcpyHtoD},
		{"cuMemcpyDtoH_v2", &s.cuMemcpyDtoH},
		{"cuMemcpyDtoDAsync_v2", &s.cuMemcpyDtoDAsync},
		{"cuMemsetD8Async", &s.cuMemsetD8Async},
		{"cuModuleLoadData", &s.cuModuleLoadData},
		{"cuModuleGetFunction", &s.cuModuleGetFunction},
		{"cuLaunchKernel", &s.cuLaunchKernel},
		{"cuStreamCreate", &s.cuStreamCreate},
		{"cuStreamSynchronize", &s.cuStreamSynchronize},
		{"cuStreamBeginCapture_v2", &s.cuStreamBeginCapture},
		{"cuStreamEndCapture", &s.cuStreamEndCapture},
		{"cuGraphInstantiateWithFlags", &s.cuGraphInstantiate},
		{"cuGraphLaunch", &s.cuGraphLaunch},
		{"cuGraphExecDestroy", &s.cuGraphExecDestroy},
		{"cuGraphDestroy", &s.cuGraphDestroy},
		{"cuGetErrorName", &s.cuGetErrorName},
	}
}

// cublasSyms are the cuBLAS functions the backend calls.
type cublasSyms struct {
	create, setStream, setMathMode, setWorkspace, getVersion,
	sgemmStridedBatched, gemmStridedBatchedEx uintptr
}

func (s *cublasSyms) table() []symbol {
	return []symbol{
		{"cublasCreate_v2", &s.create},
		{"cublasSetStream_v2", &s.setStream},
		{"cublasSetMathMode", &s.setMathMode},
		{"cublasSetWorkspace_v2", &s.setWorkspace},
		{"cublasGetVersion_v2", &s.getVersion},
		{"cublasSgemmStridedBatched", &s.sgemmStridedBatched},
		{"cublasGemmStridedBatchedEx", &s.gemmStridedBatchedEx},
	}
}

type symbol struct {
	name string
	addr *uintptr
}

var (
	loadOnce   sync.Once
	loaded     *Driver
	loadFailed error
)

// Load opens the driver API and cuBLAS once per process and initialises
// the driver. The error, when not nil, is one line that names what is
// missing (the library and where it was looked for, the driver, or the
// GPU) and wraps ErrUnavailable.
func Load() (*Driver, error) {
	loadOnce.Do(func() { loaded, loadFailed = load(osSearchEnv()) })
	return loaded, loadFailed
}
