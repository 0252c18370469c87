package testutil

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// recorder stands in for a *testing.T and records whether the helper skipped
// or failed; both end the helper early, as runtime.Goexit would.
type recorder struct {
	testing.TB
	skipped, failed string
}

type stop struct{}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	r.skipped = fmt.Sprint(args...)
	panic(stop{})
}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	panic(stop{})
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(stop{})
}

func record(f func(tb testing.TB)) (r *recorder) {
	r = &recorder{}
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(stop); !ok {
				panic(p)
			}
		}
	}()
	f(r)
	return r
}

func TestSkipFailsUnderCI(t *testing.T) {
	t.Setenv("CI", "true")
	r := record(func(tb testing.TB) { Skip(tb, "no %s", "dataset") })
	assert.Empty(t, r.skipped)
	assert.Contains(t, r.failed, "would skip: no dataset")

	r = record(func(tb testing.TB) { SkipHardware(tb, "no AVX-512") })
	assert.Empty(t, r.failed)
	assert.Equal(t, "missing hardware: no AVX-512", r.skipped)

	t.Setenv("CHILD_FOR_TEST", "")
	r = record(func(tb testing.TB) { SkipChild(tb, "CHILD_FOR_TEST") })
	assert.Empty(t, r.failed)
	assert.Contains(t, r.skipped, "CHILD_FOR_TEST")

	t.Setenv("CHILD_FOR_TEST", "1")
	r = record(func(tb testing.TB) { SkipChild(tb, "CHILD_FOR_TEST") })
	assert.Empty(t, r.failed)
	assert.Empty(t, r.skipped, "the child runs when its variable is set")
}

func TestSkipSkipsOutsideCI(t *testing.T) {
	t.Setenv("CI", "")
	r := record(func(tb testing.TB) { Skip(tb, "no %s", "dataset") })
	assert.Empty(t, r.failed)
	assert.Equal(t, "no dataset", r.skipped)
}

func TestONNXTestdataFindsRepositoryCopy(t *testing.T) {
	t.Setenv("ONNX_TESTDATA", "")
	d := ONNXTestdata(t)
	assert.FileExists(t, d+"/node/test_abs/model.onnx")
	assert.FileExists(t, d+"/LICENSE")
}
