package cuda

import (
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	backend.Register("cuda", func() (backend.Backend, error) { return Open() })
}

// Environment switches.
const (
	// EnvDevice picks the GPU (an index among those the driver sees);
	// without it a process takes LOCAL_RANK modulo the GPU count, so that
	// data-parallel workers started by `onnxtrain launch` or torchrun take
	// one GPU each.
	EnvDevice = "ONNXTRAIN_CUDA_DEVICE"
	// EnvTF32 set to 1 lets float32 GEMMs use TF32 tensor cores (off by
	// default: float32 results then match the CPU backend's to float32
	// rounding).
	EnvTF32 = "ONNXTRAIN_CUDA_TF32"
	// EnvGraphs set to 0 turns whole-step CUDA-graph capture off (every
	// step then launches its kernels one by one).
	EnvGraphs = "ONNXTRAIN_CUDA_GRAPHS"
	// EnvHostFallback set to 0 makes a graph the GPU cannot run (strings,
	// sequences, control flow, an op with no kernel and no lowering) an
	// error instead of running on the CPU backend (executables without
	// state only).
	EnvHostFallback = "ONNXTRAIN_CUDA_HOST_FALLBACK"
)

// Backend is the CUDA backend on one GPU.
type Backend struct {
	ctx       *Context
	allowTF32 bool
	graphs    bool
	// mu serialises the use of the context's stream and cuBLAS handle.
	mu sync.Mutex
}

var (
	openMu sync.Mutex
	opened *Backend
)

// Open loads the driver and cuBLAS, picks the GPU and returns the backend
// (one per process). Without a usable GPU the error is one line naming
// what is missing, wrapping ErrUnavailable.
func Open() (*Backend, error) {
	openMu.Lock()
	defer openMu.Unlock()
	if opened != nil {
		return opened, nil
	}
	d, err := Load()
	if err != nil {
		return nil, err
	}
	gpus, err := d.GPUs()
	if err != nil {
		return nil, err
	}
	idx, err := pickDevice(os.Getenv(EnvDevice), os.Getenv("LOCAL_RANK"), len(gpus))
	if err != nil {
		return nil, err
	}
	b := &Backend{allowTF32: os.Getenv(EnvTF32) == "1", graphs: os.Getenv(EnvGraphs) != "0"}
	if b.ctx, err = d.OpenContext(idx, b.allowTF32); err != nil {
		return nil, err
	}
	opened = b
	return b, nil
}

// pickDevice chooses the GPU index from ONNXTRAIN_CUDA_DEVICE, else
// LOCAL_RANK modulo the count, else 0.
func pickDevice(device, localRank string, count int) (int, error) {
	if count == 0 {
		return 0, &unavailable{reason: "no GPU"}
	}
	if device != "" {
		i, err := strconv.Atoi(device)
		if err != nil || i < 0 || i >= count {
			return 0, fmt.Errorf("cuda: %s=%q: want a GPU index from 0 to %d", EnvDevice, device, count-1)
		}
		return i, nil
	}
	if localRank != "" {
		if r, err := strconv.Atoi(localRank); err == nil && r >= 0 {
			return r % count, nil
		}
	}
	return 0, nil
}

// Name implements backend.Backend.
func (*Backend) Name() string { return "cuda" }

// GPU describes the device the backend runs on.
func (b *Backend) GPU() GPU { return b.ctx.GPU }

// Supports implements backend.Backend: ops with a kernel here, and every
// op graph/ lowers to them.
func (*Backend) Supports(domain, op string, opset int64) bool {
	n := &graph.Node{Domain: domain, OpType: op}
	if hasKernel(n, false) {
		return true
	}
	if domain == "ai.onnx.preview.training" && op == "Gradient" {
		return true
	}
	if domain == "" || domain == "ai.onnx" {
		return graph.HasLowering(op)
	}
	return graph.HasDomainLowering(domain, op)
}
