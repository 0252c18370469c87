package testutil

import (
	"fmt"
	"os"
	"testing"

	"github.com/onnxtrain/onnxtrain/internal/repodata"
)

// CI reports whether the tests run under CI (CI=true in the environment).
func CI() bool { return os.Getenv("CI") == "true" }

// Skip skips t for a reason other than missing hardware. Under CI=true it
// fails the test instead, naming the reason.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		t.Fatalf("CI=true: a test may skip only for missing hardware, but this one would skip: %s", msg)
	}
	t.Skip(msg)
}

// SkipShort skips t in -short mode (see Skip for CI=true), giving why it is
// not short.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		Skip(t, "-short: %s", why)
	}
}

// SkipHardware skips t because the machine lacks hardware the test needs; it
// is allowed under CI=true. The message must name the hardware.
func SkipHardware(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Skipf("missing hardware: "+format, args...)
}

// SkipChild skips the child half of a subprocess test when the parent did not
// start it (the environment variable env is unset); allowed under CI=true.
func SkipChild(t testing.TB, env string) {
	t.Helper()
	if os.Getenv(env) == "" {
		t.Skipf("the child half of a subprocess test; runs only when its parent sets %s", env)
	}
}

// ONNXTestdata returns the folder of ONNX conformance cases (testdata/onnx in
// the repository, or $ONNX_TESTDATA); where none is found it skips t, which
// under CI=true is a failure.
func ONNXTestdata(t testing.TB) string {
	t.Helper()
	d := repodata.ONNXTestdata()
	if d == "" {
		Skip(t, "ONNX conformance cases not found (testdata/onnx in the repository, or set %s)", repodata.ONNXTestdataEnv)
	}
	return d
}
