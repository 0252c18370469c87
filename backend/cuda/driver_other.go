//go:build !(linux && (amd64 || arm64))

package cuda

import "runtime"

func load(searchEnv) (*Driver, error) {
	return nil, &unavailable{reason: "the CUDA backend runs on linux/amd64 and linux/arm64, not " + runtime.GOOS + "/" + runtime.GOARCH}
}

func (d *Driver) call(fn uintptr, args ...uintptr) int { return 999 }

func (d *Driver) check(call string, code int) error {
	if code == 0 {
		return nil
	}
	return &cuError{call: call, code: code}
}

func (d *Driver) blas(call string, fn uintptr, args ...uintptr) error {
	return &cublasError{call: call, code: 1}
}
