//go:build !purego

package gemm

import (
	"os"
	"strings"
	"testing"
)

// TestVendorMatchesProcCPUInfo checks CPUID's vendor string against the
// kernel's vendor_id in /proc/cpuinfo.
func TestVendorMatchesProcCPUInfo(t *testing.T) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "vendor_id" {
			if got, want := cpuVendor(), strings.TrimSpace(v); got != want {
				t.Fatalf("CPUID's vendor %q, /proc/cpuinfo's %q", got, want)
			}
			return
		}
	}
	t.Fatal("/proc/cpuinfo has no vendor_id line")
}
