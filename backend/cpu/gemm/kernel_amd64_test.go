//go:build amd64 && !purego

package gemm

import "testing"

func wantAsmKernel() bool { return hasAVX2FMA }

// TestVendorString decodes CPUID leaf 0's registers as the two vendors
// spell them, and the running CPU's vendor into the string prefetch
// policy reads.
func TestVendorString(t *testing.T) {
	if got := vendorString(0x68747541, 0x444d4163, 0x69746e65); got != "AuthenticAMD" {
		t.Fatalf("AMD's registers decode to %q", got)
	}
	if got := vendorString(0x756e6547, 0x6c65746e, 0x49656e69); got != "GenuineIntel" {
		t.Fatalf("Intel's registers decode to %q", got)
	}
	if v := cpuVendor(); NextOperandsPrefetchHelps() != (v == "AuthenticAMD") {
		t.Fatalf("NextOperandsPrefetchHelps() = %v on a CPU whose vendor is %q", NextOperandsPrefetchHelps(), v)
	}
}
