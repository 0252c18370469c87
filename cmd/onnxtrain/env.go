package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/cpu"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/vmath"
	"github.com/onnxtrain/onnxtrain/graph"
)

// envReport is what `onnxtrain env` prints; its JSON form is for machines.
type envReport struct {
	Onnxtrain string      `json:"onnxtrain"`
	Revision  string      `json:"revision,omitempty"` // VCS revision the binary was built from
	Go        string      `json:"go"`
	OS        string      `json:"os"`
	Arch      string      `json:"arch"`
	Kernel    string      `json:"kernel,omitempty"`
	CPU       cpuReport   `json:"cpu"`
	Memory    memReport   `json:"memory"`
	Backends  []string    `json:"backends"`
	GPU       gpuReport   `json:"gpu"`
	Modules   []moduleVer `json:"modules"`
}

type cpuReport struct {
	Model         string          `json:"model"`
	LogicalCPUs   int             `json:"logical_cpus"`
	PhysicalCores int             `json:"physical_cores,omitempty"` // 0: unknown
	GOMAXPROCS    int             `json:"gomaxprocs"`
	Features      map[string]bool `json:"features"`
	GEMMAVX512    bool            `json:"gemm_avx512"`           // the GEMM's AVX-512 kernel is in use (ONNXTRAIN_NO_AVX512 turns it off)
	VMathAVX512   bool            `json:"vmath_avx512"`          // exp, erf and GELU run their AVX-512 loops (same bits as AVX2; ONNXTRAIN_NO_AVX512 turns them off)
	GEMMTuning    string          `json:"gemm_tuning,omitempty"` // the GEMM paths chosen by the CPU's vendor (gemm.CPUTuning)
	featureOrder  []string
}

type memReport struct {
	TotalBytes     uint64 `json:"total_bytes"`     // 0: unknown
	AvailableBytes uint64 `json:"available_bytes"` // 0: unknown
}

type gpuReport struct {
	CUDABackend bool     `json:"cuda_backend"` // a backend named "cuda" is registered in this build
	Summary     string   `json:"summary"`
	Driver      string   `json:"driver,omitempty"`      // NVIDIA kernel module version
	DriverLine  string   `json:"driver_line,omitempty"` // first line of /proc/driver/nvidia/version
	Devices     []string `json:"devices,omitempty"`     // /dev/nvidiaN
	Libraries   []string `json:"libraries,omitempty"`   // CUDA driver/runtime libraries found
	// CUDA is what the cuda backend found when it loaded the libraries:
	// driver API and cuBLAS versions and files, the GPUs, or the one-line
	// reason it cannot run here.
	CUDA []string `json:"cuda,omitempty"`
}

type moduleVer struct {
	Path    string `json:"path"`
	Version string `json:"version"`
}

// keyModules are the dependencies whose versions matter when reporting a
// problem; those not linked into this binary are left out.
var keyModules = []string{
	"github.com/spf13/cobra",
	"github.com/sirupsen/logrus",
	"google.golang.org/protobuf",
	"gopkg.in/yaml.v3",
	"golang.org/x/sys",
	"golang.org/x/image",
	"github.com/prometheus/client_golang",
	"github.com/ebitengine/purego",
	"github.com/owulveryck/onnx-go",
	"gorgonia.org/tensor",
}

func newEnvCmd() *cobra.Command {
	var asJSON, primitives bool
	cmd := &cobra.Command{
		Use:   "env [--json | --primitives]",
		Short: "Print versions, CPU, memory, backends and GPU presence (for bug reports)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
			if primitives {
				// The primitive set every backend implements, one op a line.
				for _, op := range graph.Primitives {
					fmt.Fprintln(w, op)
				}
				return nil
			}
			r := collectEnv()
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			writeEnvText(w, r)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.Flags().BoolVar(&primitives, "primitives", false, "print the primitive set (docs/primitives.md), one op name per line, and nothing else")
	cmd.MarkFlagsMutuallyExclusive("json", "primitives")
	return cmd
}

func collectEnv() envReport {
	r := envReport{
		Onnxtrain: version,
		Go:        runtime.Version(),
		OS:        runtime.GOOS,
		Arch:      runtime.GOARCH,
		Backends:  backend.Names(),
		Modules:   []moduleVer{},
	}
	if r.Backends == nil {
		r.Backends = []string{}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if r.Onnxtrain == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			r.Onnxtrain = bi.Main.Version
		}
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				r.Revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if r.Revision != "" && modified {
			r.Revision += " (modified)"
		}
		deps := map[string]string{}
		for _, d := range bi.Deps {
			v := d.Version
			if d.Replace != nil {
				v += " => " + d.Replace.Path + " " + d.Replace.Version
			}
			deps[d.Path] = v
		}
		for _, p := range keyModules {
			if v, ok := deps[p]; ok {
				r.Modules = append(r.Modules, moduleVer{Path: p, Version: v})
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		r.Kernel = strings.TrimSpace(string(b))
	}

	r.CPU = cpuReport{LogicalCPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0)}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		r.CPU.Model, r.CPU.PhysicalCores = parseCPUInfo(f)
		f.Close()
	}
	if r.CPU.Model == "" {
		r.CPU.Model = "unknown"
	}
	r.CPU.featureOrder, r.CPU.Features = cpuFeatures()
	r.CPU.GEMMAVX512 = gemm.AVX512()
	r.CPU.GEMMTuning = gemm.CPUTuning()
	r.CPU.VMathAVX512 = vmath.AVX512()

	if f, err := os.Open("/proc/meminfo"); err == nil {
		r.Memory = parseMemInfo(f)
		f.Close()
	}

	r.GPU = probeGPU(slices.Contains(r.Backends, "cuda"), gpuLibDirs(), "/proc/driver/nvidia/version", "/dev")
	if r.GPU.CUDABackend {
		r.GPU.CUDA = cudaEnvLines()
	}
	return r
}

// parseCPUInfo reads /proc/cpuinfo: the model name (x86 "model name", or
// "Hardware"/"Processor"/"cpu model" elsewhere) and the number of physical
// cores (distinct physical id and core id pairs; 0 when the file lacks them).
func parseCPUInfo(r io.Reader) (model string, physicalCores int) {
	cores := map[string]bool{}
	var physID, fallback string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "model name":
			if model == "" {
				model = v
			}
		case "Hardware", "Processor", "cpu model", "uarch":
			if fallback == "" && v != "" {
				fallback = v
			}
		case "physical id":
			physID = v
		case "core id":
			cores[physID+"/"+v] = true
		}
	}
	if model == "" {
		model = fallback
	}
	return model, len(cores)
}

// parseMemInfo reads MemTotal and MemAvailable (in kB) from /proc/meminfo.
func parseMemInfo(r io.Reader) memReport {
	var m memReport
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		n, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		if len(f) >= 3 && f[2] == "kB" {
			n *= 1024
		}
		switch f[0] {
		case "MemTotal:":
			m.TotalBytes = n
		case "MemAvailable:":
			m.AvailableBytes = n
		}
	}
	return m
}

// cpuFeatures lists the instruction-set extensions the kernels care about.
func cpuFeatures() ([]string, map[string]bool) {
	var names []string
	feats := map[string]bool{}
	add := func(name string, has bool) {
		names = append(names, name)
		feats[name] = has
	}
	switch runtime.GOARCH {
	case "amd64", "386":
		add("avx", cpu.X86.HasAVX)
		add("avx2", cpu.X86.HasAVX2)
		add("fma", cpu.X86.HasFMA)
		add("f16c", cpu.X86.HasF16C)
		add("avx512f", cpu.X86.HasAVX512F)
		add("avx512bw", cpu.X86.HasAVX512BW)
		add("avx512vl", cpu.X86.HasAVX512VL)
		add("avx512vnni", cpu.X86.HasAVX512VNNI)
		add("avx512bf16", cpu.X86.HasAVX512BF16)
		add("amxbf16", cpu.X86.HasAMXBF16)
	case "arm64":
		add("asimd", cpu.ARM64.HasASIMD)
		add("fphp", cpu.ARM64.HasFPHP)
		add("asimdhp", cpu.ARM64.HasASIMDHP)
		add("asimddp", cpu.ARM64.HasASIMDDP)
		add("i8mm", cpu.ARM64.HasI8MM)
		add("sve", cpu.ARM64.HasSVE)
		add("sve2", cpu.ARM64.HasSVE2)
	}
	return names, feats
}

// gpuLibDirs are the folders searched for the CUDA libraries: those of
// LD_LIBRARY_PATH, then the usual install places (distribution multiarch
// folders, the CUDA toolkit, the NVIDIA container runtime, WSL).
func gpuLibDirs() []string {
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	dirs = append(dirs,
		"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
		"/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/lib64", "/lib",
		"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib",
		"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/cuda/targets/sbsa-linux/lib",
		"/usr/lib/wsl/lib",
	)
	if more, err := filepath.Glob("/usr/local/cuda-*/lib64"); err == nil {
		dirs = append(dirs, more...)
	}
	return dirs
}

// gpuLibPatterns name the libraries a CUDA backend loads: the driver API
// (installed with the NVIDIA driver), the runtime and cuBLAS (toolkit).
var gpuLibPatterns = []string{"libcuda.so*", "libcudart.so*", "libcublas.so*"}

var nvidiaDriverVersion = regexp.MustCompile(`Kernel Module\s+(?:for\s+\S+\s+)?([0-9][0-9.]*)`)

// probeGPU looks for an NVIDIA GPU without loading anything: the driver's
// /proc file, /dev/nvidiaN device nodes and the CUDA libraries in libDirs.
// Folders reached twice (symbolic links, LD_LIBRARY_PATH) count once.
func probeGPU(cudaBackend bool, libDirs []string, procVersion, devDir string) gpuReport {
	g := gpuReport{CUDABackend: cudaBackend}
	if b, err := os.ReadFile(procVersion); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		g.DriverLine = strings.Join(strings.Fields(line), " ")
		if m := nvidiaDriverVersion.FindStringSubmatch(line); m != nil {
			g.Driver = m[1]
		}
	}
	if devs, err := filepath.Glob(filepath.Join(devDir, "nvidia[0-9]*")); err == nil {
		g.Devices = devs
	}
	seenDir := map[string]bool{}
	for _, d := range libDirs {
		resolved, err := filepath.EvalSymlinks(d)
		if err != nil || seenDir[resolved] {
			continue
		}
		seenDir[resolved] = true
		for _, p := range gpuLibPatterns {
			found, err := filepath.Glob(filepath.Join(d, p))
			if err != nil {
				continue
			}
			g.Libraries = append(g.Libraries, found...)
		}
	}

	var found []string
	if g.Driver != "" {
		found = append(found, "NVIDIA driver "+g.Driver)
	} else if g.DriverLine != "" {
		found = append(found, "NVIDIA driver ("+g.DriverLine+")")
	}
	if n := len(g.Devices); n > 0 {
		found = append(found, fmt.Sprintf("%d device node(s) %s", n, strings.Join(g.Devices, " ")))
	}
	hasLib := func(prefix string) bool {
		return slices.ContainsFunc(g.Libraries, func(p string) bool { return strings.HasPrefix(filepath.Base(p), prefix) })
	}
	if hasLib("libcuda.so") {
		found = append(found, "libcuda (driver API)")
	}
	if hasLib("libcudart.so") {
		found = append(found, "libcudart (runtime)")
	}
	if hasLib("libcublas.so") {
		found = append(found, "libcublas")
	}
	head := "no CUDA backend in this build"
	if cudaBackend {
		head = "CUDA backend registered"
	}
	if len(found) == 0 {
		g.Summary = head + "; found no NVIDIA driver and no CUDA library"
	} else {
		g.Summary = head + "; found " + strings.Join(found, ", ")
	}
	return g
}

func formatBytes(n uint64) string {
	if n == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

func writeEnvText(w io.Writer, r envReport) {
	line := func(k, format string, a ...any) {
		fmt.Fprintf(w, "%-10s "+format+"\n", append([]any{k + ":"}, a...)...)
	}
	ver := r.Onnxtrain
	if r.Revision != "" {
		ver += " (" + r.Revision + ")"
	}
	line("onnxtrain", "%s", ver)
	line("go", "%s", r.Go)
	platform := r.OS + "/" + r.Arch
	if r.Kernel != "" {
		platform += " (kernel " + r.Kernel + ")"
	}
	line("os", "%s", platform)
	line("cpu", "%s", r.CPU.Model)
	cores := fmt.Sprintf("%d logical", r.CPU.LogicalCPUs)
	if r.CPU.PhysicalCores > 0 {
		cores += fmt.Sprintf(", %d physical", r.CPU.PhysicalCores)
	}
	line("cores", "%s (GOMAXPROCS %d)", cores, r.CPU.GOMAXPROCS)
	var feats []string
	for _, f := range r.CPU.featureOrder {
		mark := "-"
		if r.CPU.Features[f] {
			mark = "+"
		}
		feats = append(feats, mark+f)
	}
	if len(feats) == 0 {
		feats = []string{"(none checked on " + r.Arch + ")"}
	}
	line("features", "%s", strings.Join(feats, " "))
	if r.CPU.Features["avx512f"] && !r.CPU.GEMMAVX512 {
		line("gemm", "AVX2 kernels (ONNXTRAIN_NO_AVX512 is set)")
	} else if r.CPU.GEMMAVX512 {
		line("gemm", "AVX-512 kernels (ONNXTRAIN_NO_AVX512=1 turns them off)")
	}
	if r.CPU.GEMMTuning != "" {
		line("tuning", "%s", r.CPU.GEMMTuning)
	}
	if r.CPU.VMathAVX512 {
		line("vmath", "AVX-512 loops for exp, erf and GELU (the AVX2 loops' bits)")
	} else if r.CPU.Features["avx512f"] {
		line("vmath", "AVX2 loops (ONNXTRAIN_NO_AVX512 is set)")
	}
	line("memory", "%s total, %s available", formatBytes(r.Memory.TotalBytes), formatBytes(r.Memory.AvailableBytes))
	line("backends", "%s", strings.Join(r.Backends, ", "))
	line("gpu", "%s", r.GPU.Summary)
	for _, l := range r.GPU.Libraries {
		fmt.Fprintf(w, "%-10s   %s\n", "", l)
	}
	for _, l := range r.GPU.CUDA {
		line("cuda", "%s", l)
	}
	for _, m := range r.Modules {
		line("module", "%s %s", m.Path, m.Version)
	}
}
