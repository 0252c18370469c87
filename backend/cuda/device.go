package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// FormatCUDAVersion writes a cuDriverGetVersion number (12040) as "12.4".
func FormatCUDAVersion(v int) string {
	return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
}

// FormatCublasVersion writes a cublasGetVersion number: 120401 as
// "12.4.1" (CUDA 12 encodes major*10000+minor*100+patch), 11801 as
// "11.8.1" (major*1000+minor*100+patch before).
func FormatCublasVersion(v int) string {
	if v >= 100000 {
		return fmt.Sprintf("%d.%d.%d", v/10000, (v%10000)/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, (v%1000)/100, v%100)
}

// GPU describes one device.
type GPU struct {
	Index        int
	Name         string
	TotalBytes   uint64
	Major, Minor int // compute capability
	SMs          int
}

func (g GPU) String() string {
	return fmt.Sprintf("cuda:%d %s (sm_%d%d, %d SMs, %.1f GiB)", g.Index, g.Name, g.Major, g.Minor, g.SMs, float64(g.TotalBytes)/(1<<30))
}

// CUdevice_attribute values (cuda.h).
const (
	attrMultiprocessorCount    = 16
	attrComputeCapabilityMajor = 75
	attrComputeCapabilityMinor = 76
)

// GPUs lists the devices the driver sees.
func (d *Driver) GPUs() ([]GPU, error) {
	var n int32
	if err := d.check("cuDeviceGetCount", d.call(d.sym.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return nil, err
	}
	out := make([]GPU, 0, n)
	for i := 0; i < int(n); i++ {
		var dev int32
		if err := d.check("cuDeviceGet", d.call(d.sym.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(i))); err != nil {
			return nil, err
		}
		name := make([]byte, 256)
		if err := d.check("cuDeviceGetName", d.call(d.sym.cuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(dev))); err != nil {
			return nil, err
		}
		g := GPU{Index: i, Name: cString(name)}
		var total uint64
		if err := d.check("cuDeviceTotalMem", d.call(d.sym.cuDeviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(dev))); err != nil {
			return nil, err
		}
		g.TotalBytes = total
		for _, a := range []struct {
			attr int
			dst  *int
		}{{attrComputeCapabilityMajor, &g.Major}, {attrComputeCapabilityMinor, &g.Minor}, {attrMultiprocessorCount, &g.SMs}} {
			var v int32
			if err := d.check("cuDeviceGetAttribute", d.call(d.sym.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a.attr), uintptr(dev))); err != nil {
				return nil, err
			}
			*a.dst = int(v)
		}
		out = append(out, g)
	}
	return out, nil
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// DevicePtr is an address in device memory (CUdeviceptr).
type DevicePtr uintptr

// Context is one GPU's primary context with the stream, cuBLAS handle and
// kernel module the backend's executables on it share.
type Context struct {
	d       *Driver
	GPU     GPU
	ctx     uintptr
	stream  uintptr
	blas    uintptr
	module  uintptr
	funcs   map[string]uintptr
	workspc DevicePtr
}

// cublasWorkspaceBytes is the workspace handed to cuBLAS, so that GEMMs
// allocate nothing while a step is captured into a CUDA graph.
const cublasWorkspaceBytes = 32 << 20

// OpenContext makes GPU index current on the calling OS thread's driver
// state, creates a stream and a cuBLAS handle on it (TF32 off unless
// allowTF32), and loads the embedded kernels.
func (d *Driver) OpenContext(index int, allowTF32 bool) (*Context, error) {
	gpus, err := d.GPUs()
	if err != nil {
		return nil, err
	}
	if index < 0 || index >= len(gpus) {
		return nil, &unavailable{reason: fmt.Sprintf("no GPU cuda:%d (the driver sees %d)", index, len(gpus))}
	}
	c := &Context{d: d, GPU: gpus[index], funcs: map[string]uintptr{}}
	var dev int32
	if err := d.check("cuDeviceGet", d.call(d.sym.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(index))); err != nil {
		return nil, err
	}
	if err := d.check("cuDevicePrimaryCtxRetain", d.call(d.sym.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&c.ctx)), uintptr(dev))); err != nil {
		return nil, err
	}
	if err := c.makeCurrent(); err != nil {
		return nil, err
	}
	const streamNonBlocking = 1
	if err := d.check("cuStreamCreate", d.call(d.sym.cuStreamCreate, uintptr(unsafe.Pointer(&c.stream)), streamNonBlocking)); err != nil {
		return nil, err
	}
	if err := d.blas("cublasCreate", d.bl.create, uintptr(unsafe.Pointer(&c.blas))); err != nil {
		return nil, err
	}
	var v int32
	if err := d.blas("cublasGetVersion", d.bl.getVersion, c.blas, uintptr(unsafe.Pointer(&v))); err == nil {
		d.CublasVersion = int(v)
	}
	if err := d.blas("cublasSetStream", d.bl.setStream, c.blas, c.stream); err != nil {
		return nil, err
	}
	if err := d.blas("cublasSetMathMode", d.bl.setMathMode, c.blas, uintptr(cublasMathMode(allowTF32))); err != nil {
		return nil, err
	}
	if c.workspc, err = c.Alloc(cublasWorkspaceBytes); err != nil {
		return nil, err
	}
	if err := d.blas("cublasSetWorkspace", d.bl.setWorkspace, c.blas, uintptr(c.workspc), cublasWorkspaceBytes); err != nil {
		return nil, err
	}
	ptx := append([]byte(kernelPTX), 0)
	if err := d.check("cuModuleLoadData (embedded kernels)", d.call(d.sym.cuModuleLoadData, uintptr(unsafe.Pointer(&c.module)), uintptr(unsafe.Pointer(&ptx[0])))); err != nil {
		return nil, err
	}
	return c, nil
}

// cuBLAS math modes (cublasMath_t): the default keeps float32 GEMMs in
// float32 (CUBLAS_DEFAULT_MATH; TF32 only when asked), half and bfloat16
// GEMMs use tensor cores either way.
const (
	cublasDefaultMath      = 0
	cublasPedanticMath     = 2
	cublasTF32TensorOpMath = 3
)

func cublasMathMode(allowTF32 bool) int {
	if allowTF32 {
		return cublasTF32TensorOpMath
	}
	return cublasDefaultMath
}

func (c *Context) makeCurrent() error {
	return c.d.check("cuCtxSetCurrent", c.d.call(c.d.sym.cuCtxSetCurrent, c.ctx))
}

// Alloc allocates n bytes of device memory.
func (c *Context) Alloc(n int64) (DevicePtr, error) {
	if n <= 0 {
		n = 1
	}
	var p DevicePtr
	err := c.d.check(fmt.Sprintf("cuMemAlloc(%d bytes)", n), c.d.call(c.d.sym.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n)))
	return p, err
}

// Free releases device memory.
func (c *Context) Free(p DevicePtr) error {
	return c.d.check("cuMemFree", c.d.call(c.d.sym.cuMemFree, uintptr(p)))
}

// MemInfo reports free and total device memory.
func (c *Context) MemInfo() (free, total uint64, err error) {
	err = c.d.check("cuMemGetInfo", c.d.call(c.d.sym.cuMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))))
	return
}

// Upload copies host bytes to the device (synchronous after the stream's
// earlier work: the copy is ordered on the legacy stream).
func (c *Context) Upload(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if err := c.Sync(); err != nil {
		return err
	}
	return c.d.check("cuMemcpyHtoD", c.d.call(c.d.sym.cuMemcpyHtoD, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src))))
}

// Download copies device bytes to the host after the stream's work.
func (c *Context) Download(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	if err := c.Sync(); err != nil {
		return err
	}
	return c.d.check("cuMemcpyDtoH", c.d.call(c.d.sym.cuMemcpyDtoH, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst))))
}

// Copy copies n bytes on the device, on the stream.
func (c *Context) Copy(dst, src DevicePtr, n int64) error {
	if n == 0 || dst == src {
		return nil
	}
	return c.d.check("cuMemcpyDtoDAsync", c.d.call(c.d.sym.cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), c.stream))
}

// Zero sets n bytes to zero, on the stream.
func (c *Context) Zero(dst DevicePtr, n int64) error {
	if n == 0 {
		return nil
	}
	return c.d.check("cuMemsetD8Async", c.d.call(c.d.sym.cuMemsetD8Async, uintptr(dst), 0, uintptr(n), c.stream))
}

// Sync waits for the stream.
func (c *Context) Sync() error {
	return c.d.check("cuStreamSynchronize", c.d.call(c.d.sym.cuStreamSynchronize, c.stream))
}

// function looks a kernel of the embedded module up by name (cached).
func (c *Context) function(name string) (uintptr, error) {
	if f, ok := c.funcs[name]; ok {
		return f, nil
	}
	var f uintptr
	cname := append([]byte(name), 0)
	if err := c.d.check("cuModuleGetFunction("+name+")", c.d.call(c.d.sym.cuModuleGetFunction, uintptr(unsafe.Pointer(&f)), c.module, uintptr(unsafe.Pointer(&cname[0])))); err != nil {
		return 0, err
	}
	c.funcs[name] = f
	return f, nil
}

// Launch runs one kernel launch on the stream. The arguments are packed
// (launch.go) into one buffer; params points at each.
func (c *Context) Launch(l *Launch) error {
	f, err := c.function(l.Kernel)
	if err != nil {
		return err
	}
	buf, offs := l.pack()
	params := make([]uintptr, len(offs))
	base := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	for i, o := range offs {
		params[i] = base + uintptr(o)
	}
	var pp uintptr
	if len(params) > 0 {
		pp = uintptr(unsafe.Pointer(&params[0]))
	}
	code := c.d.call(c.d.sym.cuLaunchKernel, f,
		uintptr(l.Grid[0]), uintptr(l.Grid[1]), uintptr(l.Grid[2]),
		uintptr(l.Block[0]), uintptr(l.Block[1]), uintptr(l.Block[2]),
		uintptr(l.SharedBytes), c.stream, pp, 0)
	// buf and params must outlive the call: the driver copies the
	// arguments before cuLaunchKernel returns.
	runtime.KeepAlive(buf)
	runtime.KeepAlive(params)
	return c.d.check("cuLaunchKernel("+l.Kernel+")", code)
}
