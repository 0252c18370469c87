package testutil

import (
	"os/exec"
	"strings"
	"testing"
)

// FindPython returns a Python interpreter (Debian's /usr/bin/python3 first,
// then python3 on the PATH) that imports every module named, or "" when
// there is none.
func FindPython(modules ...string) string {
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(py, "-c", "import "+strings.Join(modules, ", ")).Run() == nil {
			return py
		}
	}
	return ""
}

// Python returns FindPython's interpreter or skips t (Skip: a failure under
// CI=true, where .ci/run installs the Debian packages the tests use).
func Python(t testing.TB, modules ...string) string {
	t.Helper()
	py := FindPython(modules...)
	if py == "" {
		Skip(t, "no python3 that imports %s (Debian: python3-onnx, python3-protobuf)", strings.Join(modules, ", "))
	}
	return py
}
