package conformance

import (
	"os"
	"path/filepath"
)

// TestdataDir finds the ONNX conformance cases: $ONNX_TESTDATA when set, else
// ../shared/onnx/testdata beside the repository that holds the working
// directory. It returns "" when neither exists.
func TestdataDir() string {
	if d := os.Getenv("ONNX_TESTDATA"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "..", "shared", "onnx", "testdata")
			if _, err := os.Stat(p); err == nil {
				return p
			}
			return ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
