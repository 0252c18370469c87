package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/vmath"
)

func runEnv(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	cmd := newEnvCmd()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	require.NoError(t, cmd.Execute())
	return out.String()
}

func TestEnvText(t *testing.T) {
	out := runEnv(t)
	for _, key := range []string{"onnxtrain:", "go:", "os:", "cpu:", "cores:", "features:", "memory:", "backends:", "gpu:"} {
		assert.Regexp(t, "(?m)^"+key+" ", out, "key %s", key)
	}
	assert.Contains(t, out, runtime.Version())
	assert.Regexp(t, `(?m)^backends: .*\bcpu\b`, out)
	if runtime.GOARCH == "amd64" {
		assert.Regexp(t, `(?m)^features: .*[+-]avx2 .*[+-]fma .*[+-]avx512f `, out)
	}
	if vmath.AVX512() {
		assert.Regexp(t, `(?m)^vmath: +AVX-512 loops`, out)
	} else {
		assert.NotRegexp(t, `(?m)^vmath: +AVX-512 loops`, out)
	}
	if tuning := gemm.CPUTuning(); tuning != "" {
		assert.Contains(t, out, "\ntuning:    "+tuning+"\n")
	} else {
		assert.NotRegexp(t, `(?m)^tuning:`, out)
	}
	if slices.Contains(backend.Names(), "cuda") {
		assert.Contains(t, out, "CUDA backend registered")
	} else {
		assert.Contains(t, out, "no CUDA backend in this build")
	}
}

func TestEnvJSON(t *testing.T) {
	var r map[string]any
	require.NoError(t, json.Unmarshal([]byte(runEnv(t, "--json")), &r))
	for _, key := range []string{"onnxtrain", "go", "os", "arch", "cpu", "memory", "backends", "gpu", "modules"} {
		assert.Contains(t, r, key)
	}
	assert.Equal(t, runtime.GOOS, r["os"])
	assert.Equal(t, runtime.GOARCH, r["arch"])

	c, ok := r["cpu"].(map[string]any)
	require.True(t, ok, "cpu is an object")
	assert.EqualValues(t, runtime.NumCPU(), c["logical_cpus"])
	assert.NotEmpty(t, c["model"])
	feats, ok := c["features"].(map[string]any)
	require.True(t, ok, "cpu.features is an object")
	if runtime.GOARCH == "amd64" {
		for _, f := range []string{"avx2", "fma", "avx512f"} {
			assert.IsType(t, true, feats[f], "feature %s", f)
		}
		assert.Equal(t, vmath.AVX512(), c["vmath_avx512"])
		if tuning := gemm.CPUTuning(); tuning != "" {
			assert.Equal(t, tuning, c["gemm_tuning"])
		}
	}
	if runtime.GOOS == "linux" {
		m := r["memory"].(map[string]any)
		assert.Greater(t, m["total_bytes"], 0.0)
		assert.GreaterOrEqual(t, m["total_bytes"], m["available_bytes"])
	}
	assert.Contains(t, r["backends"], "cpu")
	g := r["gpu"].(map[string]any)
	assert.Contains(t, g, "cuda_backend")
	assert.Contains(t, g["summary"], "CUDA")

	var paths []string
	for _, m := range r["modules"].([]any) {
		paths = append(paths, m.(map[string]any)["path"].(string))
	}
	assert.Contains(t, paths, "github.com/spf13/cobra")
	assert.Contains(t, paths, "golang.org/x/sys")
}

// Two sockets of two hyper-threaded cores: 8 logical CPUs, 4 physical cores.
func TestParseCPUInfo(t *testing.T) {
	var sb strings.Builder
	for p := 0; p < 8; p++ {
		sb.WriteString("processor\t: " + string(rune('0'+p)) + "\nvendor_id\t: GenuineIntel\n")
		sb.WriteString("model name\t: Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz\n")
		sb.WriteString("physical id\t: " + string(rune('0'+p/4)) + "\n")
		sb.WriteString("core id\t\t: " + string(rune('0'+p%2)) + "\ncpu cores\t: 2\n\n")
	}
	model, cores := parseCPUInfo(strings.NewReader(sb.String()))
	assert.Equal(t, "Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz", model)
	assert.Equal(t, 4, cores)

	// arm boards name the chip under "Hardware" and give no core ids.
	model, cores = parseCPUInfo(strings.NewReader("processor\t: 0\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd\n\nHardware\t: BCM2835\n"))
	assert.Equal(t, "BCM2835", model)
	assert.Equal(t, 0, cores)
}

func TestParseMemInfo(t *testing.T) {
	m := parseMemInfo(strings.NewReader("MemTotal:       24683584 kB\nMemFree:        19402336 kB\nMemAvailable:   23023416 kB\nHugePages_Total:       0\n"))
	assert.Equal(t, uint64(24683584*1024), m.TotalBytes)
	assert.Equal(t, uint64(23023416*1024), m.AvailableBytes)
	assert.Equal(t, memReport{}, parseMemInfo(strings.NewReader("garbage\n")))
}

func TestProbeGPU(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "lib")
	dev := filepath.Join(dir, "dev")
	require.NoError(t, os.MkdirAll(lib, 0o755))
	require.NoError(t, os.MkdirAll(dev, 0o755))
	for _, f := range []string{filepath.Join(lib, "libcuda.so.1"), filepath.Join(lib, "libcudart.so.12"), filepath.Join(lib, "libm.so.6"),
		filepath.Join(dev, "nvidia0"), filepath.Join(dev, "nvidia1"), filepath.Join(dev, "nvidiactl")} {
		require.NoError(t, os.WriteFile(f, nil, 0o644))
	}
	require.NoError(t, os.Symlink(lib, filepath.Join(dir, "lib64"))) // the same folder twice
	proc := filepath.Join(dir, "version")
	require.NoError(t, os.WriteFile(proc, []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:12 UTC 2024\nGCC version:  gcc version 12.3.0\n"), 0o644))

	g := probeGPU(false, []string{lib, filepath.Join(dir, "lib64"), filepath.Join(dir, "missing")}, proc, dev)
	assert.Equal(t, "550.54.15", g.Driver)
	assert.Equal(t, []string{filepath.Join(dev, "nvidia0"), filepath.Join(dev, "nvidia1")}, g.Devices)
	assert.Equal(t, []string{filepath.Join(lib, "libcuda.so.1"), filepath.Join(lib, "libcudart.so.12")}, g.Libraries)
	assert.True(t, strings.HasPrefix(g.Summary, "no CUDA backend in this build; found NVIDIA driver 550.54.15"), g.Summary)
	assert.Contains(t, g.Summary, "libcuda (driver API)")
	assert.Contains(t, g.Summary, "libcudart (runtime)")
	assert.NotContains(t, g.Summary, "libcublas")

	// The open kernel module words its version line differently.
	require.NoError(t, os.WriteFile(proc, []byte("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  (dvs-builder@U16-I3-B03-4-3)\n"), 0o644))
	assert.Equal(t, "560.35.03", probeGPU(true, nil, proc, dev).Driver)
	assert.True(t, strings.HasPrefix(probeGPU(true, nil, proc, dev).Summary, "CUDA backend registered; "))

	none := probeGPU(false, []string{filepath.Join(dir, "missing")}, filepath.Join(dir, "no-proc"), filepath.Join(dir, "no-dev"))
	assert.Equal(t, "no CUDA backend in this build; found no NVIDIA driver and no CUDA library", none.Summary)
	assert.Empty(t, none.Libraries)
}
