package repodata

import (
	"os"
	"path/filepath"
)

// ONNXTestdataEnv names the variable that overrides where the ONNX
// conformance cases are.
const ONNXTestdataEnv = "ONNX_TESTDATA"

// ONNXTestdata returns the folder of ONNX conformance cases: $ONNX_TESTDATA
// when set; else testdata/onnx in the repository (the module root above the
// working directory); else ../shared/onnx/testdata beside that root. It
// returns "" when none of them exists.
func ONNXTestdata() string {
	if d := os.Getenv(ONNXTestdataEnv); d != "" {
		return d
	}
	root := ModuleRoot()
	if root == "" {
		return ""
	}
	for _, p := range []string{
		filepath.Join(root, "testdata", "onnx"),
		filepath.Join(root, "..", "shared", "onnx", "testdata"),
	} {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
	}
	return ""
}

// ModuleRoot returns the nearest folder at or above the working directory
// that holds a go.mod file, or "" when there is none.
func ModuleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
