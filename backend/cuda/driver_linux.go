//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// openLibrary dlopens the first candidate of lib that loads.
func openLibrary(lib Library, env searchEnv) (handle uintptr, path string, err error) {
	for _, p := range candidates(lib, env) {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, p, nil
		}
	}
	dirs := libSearchDirs(lib, env)
	where := "ONNXTRAIN_CUDA_LIBS"
	if v := env.Getenv("ONNXTRAIN_CUDA_LIBS"); v != "" {
		where += "=" + v
	}
	reason := fmt.Sprintf("%s not found (searched %s, LD_LIBRARY_PATH, %d folders in all, and the loader's path)", lib.Name, where, len(dirs))
	return 0, "", &unavailable{reason: reason}
}

func resolve(h uintptr, lib string, syms []symbol) error {
	for _, s := range syms {
		a, err := purego.Dlsym(h, s.name)
		if err != nil || a == 0 {
			return &unavailable{reason: fmt.Sprintf("%s has no %s (too old a version)", lib, s.name)}
		}
		*s.addr = a
	}
	return nil
}

func load(env searchEnv) (*Driver, error) {
	d := &Driver{}
	h, p, err := openLibrary(libCUDA, env)
	if err != nil {
		return nil, &unavailable{reason: "no NVIDIA driver: " + err.(*unavailable).reason}
	}
	d.CUDAPath = p
	if err := resolve(h, p, d.sym.table()); err != nil {
		return nil, err
	}
	if err := d.check("cuInit", d.call(d.sym.cuInit, 0)); err != nil {
		return nil, &unavailable{reason: err.Error()}
	}
	var v int32
	if err := d.check("cuDriverGetVersion", d.call(d.sym.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
		return nil, err
	}
	d.Version = int(v)
	var n int32
	if err := d.check("cuDeviceGetCount", d.call(d.sym.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return nil, &unavailable{reason: err.Error()}
	}
	if n == 0 {
		return nil, &unavailable{reason: "no GPU: the NVIDIA driver " + FormatCUDAVersion(d.Version) + " sees no CUDA device"}
	}
	hl, pl, err := openLibrary(libCublasLt, env)
	if err != nil {
		return nil, err
	}
	_ = hl
	d.CublasLtPath = pl
	hb, pb, err := openLibrary(libCublas, env)
	if err != nil {
		return nil, err
	}
	d.CublasPath = pb
	if err := resolve(hb, pb, d.bl.table()); err != nil {
		return nil, err
	}
	// cublasGetProperty(MAJOR/MINOR/PATCH_LEVEL), which needs no handle.
	if gp, err := purego.Dlsym(hb, "cublasGetProperty"); err == nil && gp != 0 {
		var v [3]int32
		for i := range v {
			purego.SyscallN(gp, uintptr(i), uintptr(unsafe.Pointer(&v[i])))
		}
		d.CublasVersion = int(v[0])*10000 + int(v[1])*100 + int(v[2])
	}
	return d, nil
}

// call calls a driver API function and returns its CUresult. Pointers
// passed as uintptr(unsafe.Pointer(...)) in the call expression stay valid
// (and their memory alive) during the call.
//
//go:uintptrescapes
func (d *Driver) call(fn uintptr, args ...uintptr) int {
	r, _, _ := purego.SyscallN(fn, args...)
	return int(int32(r))
}

// check turns a CUresult into an error naming the call.
func (d *Driver) check(call string, code int) error {
	if code == 0 {
		return nil
	}
	e := &cuError{call: call, code: code}
	if d.sym.cuGetErrorName != 0 {
		var p *byte
		if d.call(d.sym.cuGetErrorName, uintptr(code), uintptr(unsafe.Pointer(&p))) == 0 && p != nil {
			e.name = goString(p)
		}
	}
	return e
}

//go:uintptrescapes
func (d *Driver) blas(call string, fn uintptr, args ...uintptr) error {
	r, _, _ := purego.SyscallN(fn, args...)
	if code := int(int32(r)); code != 0 {
		return &cublasError{call: call, code: code}
	}
	return nil
}

// goString copies a NUL-terminated C string.
func goString(p *byte) string {
	var b []byte
	for q := unsafe.Pointer(p); *(*byte)(q) != 0; q = unsafe.Add(q, 1) {
		b = append(b, *(*byte)(q))
	}
	return string(b)
}
