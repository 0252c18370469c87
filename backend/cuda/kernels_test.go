package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// TestPTXUpToDate regenerates the PTX from kernels.cu with clang and
// compares it byte for byte with the embedded file: the committed PTX is
// what the committed source makes, and the compiler has type-checked
// every kernel. .ci/run installs clang-14.
func TestPTXUpToDate(t *testing.T) {
	clang, err := exec.LookPath("clang-14")
	if err != nil {
		testutil.Skip(t, "clang-14 not installed (apt-get install clang-14): cannot regenerate kernels.ptx")
	}
	dir := t.TempDir()
	src, err := os.ReadFile("kernels/kernels.cu")
	require.NoError(t, err)
	gen, err := os.ReadFile("kernels/gen.sh")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kernels.cu"), src, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gen.sh"), gen, 0o755))
	cmd := exec.Command("sh", filepath.Join(dir, "gen.sh"))
	cmd.Env = append(os.Environ(), "CLANG="+clang)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	got, err := os.ReadFile(filepath.Join(dir, "kernels.ptx"))
	require.NoError(t, err)
	if string(got) != kernelPTX {
		t.Fatalf("kernels/kernels.ptx is not what kernels/kernels.cu compiles to with %s: run `go generate ./backend/cuda` and commit it", clang)
	}
}

// ptxParams reads each kernel's parameter list from the PTX: u64, u32,
// f32 or an aligned byte array of a size.
func ptxParams(ptx string) map[string][]string {
	entry := regexp.MustCompile(`(?s)\.visible \.entry (\w+)\((.*?)\)`)
	param := regexp.MustCompile(`\.param (?:\.align \d+ )?\.(\w+) \w+?(\[\d+\])?\s*$`)
	out := map[string][]string{}
	for _, m := range entry.FindAllStringSubmatch(ptx, -1) {
		var ps []string
		for _, line := range strings.Split(m[2], ",") {
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			p := param.FindStringSubmatch(line)
			if p == nil {
				ps = append(ps, "?"+line)
				continue
			}
			ps = append(ps, p[1]+p[2])
		}
		out[m[1]] = ps
	}
	return out
}

func TestKernelSignaturesMatchPTX(t *testing.T) {
	params := ptxParams(kernelPTX)
	require.NotEmpty(t, params)
	want := map[byte]string{'p': "u64", 'l': "u64", 'i': "u32", 'f': "f32", 'x': "b8[288]"}
	for name, sig := range kernelSigs {
		ps, ok := params[name]
		if !assert.True(t, ok, "kernel %s is declared in kernels.go but not in the PTX", name) {
			continue
		}
		var got []string
		for i := range sig {
			got = append(got, want[sig[i]])
		}
		assert.Equal(t, got, ps, "kernel %s", name)
	}
	for name := range params {
		assert.Contains(t, kernelSigs, name, "kernel %s is in the PTX but has no signature in kernels.go", name)
	}
	assert.Equal(t, 288, indexBytes)
}
