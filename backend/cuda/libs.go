package cuda

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Library search.
//
// The CUDA libraries are opened at run time (dlopen through purego), never
// linked: the binary builds with CGO_ENABLED=0 on every platform, and on a
// machine without them only this backend is unavailable. Each library is
// looked for in the folders libSearchDirs lists, in order; the driver
// library (libcuda.so.1, which comes with the NVIDIA kernel driver, not the
// toolkit) is also left to the dynamic loader's own search (ld.so.cache),
// which is where distributions and the NVIDIA container runtime put it.

// Library is one shared library the backend opens, with the file names it
// accepts, newest first.
type Library struct {
	// Name is what messages call the library ("libcuda.so.1").
	Name string
	// Files are the file names tried in each folder, in order.
	Files []string
	// Wheel is the folder of the NVIDIA Python wheel that ships it
	// (site-packages/nvidia/<Wheel>/lib), "" for the driver.
	Wheel string
	// LoaderSearch lets the dynamic loader look for Files[0] by bare name
	// when no folder has it.
	LoaderSearch bool
}

var (
	libCUDA = Library{Name: "libcuda.so.1", Files: []string{"libcuda.so.1", "libcuda.so"}, LoaderSearch: true}
	// cuBLAS 12 first (CUDA 12.x), then 11; cuBLASLt is cuBLAS's own
	// dependency and must be opened first from the same folder.
	libCublasLt = Library{Name: "libcublasLt.so", Files: []string{"libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"}, Wheel: "cublas", LoaderSearch: true}
	libCublas   = Library{Name: "libcublas.so", Files: []string{"libcublas.so.12", "libcublas.so.11", "libcublas.so"}, Wheel: "cublas", LoaderSearch: true}
)

// searchEnv is what the library search reads from the process: environment
// variables and globbing. Tests replace it.
type searchEnv struct {
	Getenv func(string) string
	Glob   func(string) ([]string, error)
	// Exists reports whether a file exists.
	Exists func(string) bool
}

func osSearchEnv() searchEnv {
	return searchEnv{
		Getenv: os.Getenv,
		Glob:   filepath.Glob,
		Exists: func(p string) bool { _, err := os.Stat(p); return err == nil },
	}
}

// pythonSitePatterns are glob patterns for the site-packages folders of the
// Python environments NVIDIA's wheels (nvidia-cublas-cu12, ...) are usually
// installed in; $VIRTUAL_ENV and $CONDA_PREFIX come first.
func pythonSitePatterns(env searchEnv) []string {
	var roots []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if r := env.Getenv(v); r != "" {
			roots = append(roots, r)
		}
	}
	if h := env.Getenv("HOME"); h != "" {
		roots = append(roots, filepath.Join(h, ".local"))
	}
	roots = append(roots, "/usr/local", "/usr", "/opt/conda")
	var pats []string
	for _, r := range roots {
		pats = append(pats,
			filepath.Join(r, "lib", "python3*", "site-packages"),
			filepath.Join(r, "lib", "python3*", "dist-packages"))
	}
	return pats
}

// libSearchDirs lists the folders searched for lib, in order, without
// duplicates:
//
//  1. ONNXTRAIN_CUDA_LIBS (a colon-separated list of folders),
//  2. LD_LIBRARY_PATH,
//  3. /usr/local/cuda/lib64 and /usr/local/cuda-*/lib64 (newest version
//     first), and the toolkit's targets folder,
//  4. the distribution's folders (/usr/lib/x86_64-linux-gnu, ...), the
//     NVIDIA container runtime's and WSL's,
//  5. site-packages/nvidia/<wheel>/lib of Python environments (for cuBLAS;
//     the driver never comes in a wheel).
func libSearchDirs(lib Library, env searchEnv) []string {
	var dirs []string
	add := func(ds ...string) {
		for _, d := range ds {
			d = filepath.Clean(d)
			if d != "." && !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	for _, v := range []string{"ONNXTRAIN_CUDA_LIBS", "LD_LIBRARY_PATH"} {
		for _, d := range filepath.SplitList(env.Getenv(v)) {
			if d = strings.TrimSpace(d); d != "" {
				add(d)
			}
		}
	}
	add("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/cuda/targets/sbsa-linux/lib")
	if vers, err := env.Glob("/usr/local/cuda-*/lib64"); err == nil {
		slices.SortFunc(vers, compareVersionDirs)
		slices.Reverse(vers)
		add(vers...)
	}
	add("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
		"/usr/local/nvidia/lib64", "/usr/lib/wsl/lib")
	if lib.Wheel != "" {
		for _, p := range pythonSitePatterns(env) {
			sites, err := env.Glob(p)
			if err != nil {
				continue
			}
			slices.Sort(sites)
			slices.Reverse(sites) // python3.12 before python3.10
			for _, s := range sites {
				add(filepath.Join(s, "nvidia", lib.Wheel, "lib"))
			}
		}
	}
	return dirs
}

// compareVersionDirs orders /usr/local/cuda-X.Y/lib64 folders by version
// number (11.8 before 12.1 before 12.10).
func compareVersionDirs(a, b string) int {
	va, vb := versionFields(a), versionFields(b)
	for i := 0; i < len(va) && i < len(vb); i++ {
		if va[i] != vb[i] {
			return va[i] - vb[i]
		}
	}
	if len(va) != len(vb) {
		return len(va) - len(vb)
	}
	return strings.Compare(a, b)
}

func versionFields(dir string) []int {
	base := filepath.Base(filepath.Dir(dir)) // cuda-12.4
	_, v, _ := strings.Cut(base, "-")
	var out []int
	for _, f := range strings.Split(v, ".") {
		n := 0
		for _, c := range f {
			if c < '0' || c > '9' {
				break
			}
			n = n*10 + int(c-'0')
		}
		out = append(out, n)
	}
	return out
}

// candidates lists the paths tried for lib in order: every accepted file
// name in every search folder that has it, then (LoaderSearch) the first
// file name alone, for the dynamic loader to find.
func candidates(lib Library, env searchEnv) []string {
	var out []string
	for _, d := range libSearchDirs(lib, env) {
		for _, f := range lib.Files {
			p := filepath.Join(d, f)
			if env.Exists(p) {
				out = append(out, p)
			}
		}
	}
	if lib.LoaderSearch {
		out = append(out, lib.Files[0])
	}
	return out
}
