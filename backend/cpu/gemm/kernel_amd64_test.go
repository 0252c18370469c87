//go:build amd64 && !purego

package gemm

import (
	"os"
	"strings"
	"testing"
)

func wantAsmKernel() bool { return hasAVX2FMA }

// TestAMDVendorMatchesProcCPUInfo checks CPUID's vendor string against
// the kernel's /proc/cpuinfo where it exists.
func TestAMDVendorMatchesProcCPUInfo(t *testing.T) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip("no /proc/cpuinfo to check against")
	}
	want := strings.Contains(string(b), "AuthenticAMD")
	if !want && !strings.Contains(string(b), "GenuineIntel") {
		t.Skip("/proc/cpuinfo names neither vendor")
	}
	if got := amdCPU(); got != want {
		t.Fatalf("amdCPU() = %v, /proc/cpuinfo says AMD = %v", got, want)
	}
	if NextOperandsPrefetchHelps() != want {
		t.Fatalf("NextOperandsPrefetchHelps() = %v on a CPU whose vendor is AMD = %v", !want, want)
	}
}
