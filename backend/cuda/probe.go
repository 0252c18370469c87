package cuda

import "strings"

// Report is what `onnxtrain env` prints about CUDA: the driver and library
// versions and files, the GPUs, or the one-line reason the backend cannot
// run here.
type Report struct {
	Driver, Cublas string // versions
	DriverPath     string
	CublasPath     string
	GPUs           []GPU
	// Unavailable is the reason the backend cannot run ("" when it can).
	Unavailable string
}

// Probe loads the libraries (once per process) and lists the GPUs,
// without creating a context.
func Probe() Report {
	d, err := Load()
	if err != nil {
		return Report{Unavailable: err.Error()}
	}
	r := Report{Driver: FormatCUDAVersion(d.Version), DriverPath: d.CUDAPath, CublasPath: d.CublasPath}
	if d.CublasVersion > 0 {
		r.Cublas = FormatCublasVersion(d.CublasVersion)
	}
	if r.GPUs, err = d.GPUs(); err != nil {
		r.Unavailable = err.Error()
	}
	return r
}

// Lines writes the report as lines for `onnxtrain env`.
func (r Report) Lines() []string {
	if r.Unavailable != "" {
		return []string{strings.TrimPrefix(r.Unavailable, "cuda ")}
	}
	out := []string{"driver API " + r.Driver + " (" + r.DriverPath + ")"}
	bl := "cuBLAS"
	if r.Cublas != "" {
		bl += " " + r.Cublas
	}
	out = append(out, bl+" ("+r.CublasPath+")")
	for _, g := range r.GPUs {
		out = append(out, g.String())
	}
	return out
}
