package benchlib

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// vmFlags returns the VmFlags of the mapping of /proc/self/smaps that
// holds addr, or "" when none does.
func vmFlags(t *testing.T, addr uintptr) string {
	f, err := os.Open("/proc/self/smaps")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 { // a mapping's header line
			in = lo <= addr && addr < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return line
		}
	}
	require.NoError(t, sc.Err())
	return ""
}

// The references' storage is zero, writable, as long as asked, in a
// mapping the kernel holds as advised for huge pages ("hg" in VmFlags),
// and unmapped by its free function.
func TestHugeFloatsAdvisesHugePages(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil {
		t.Skip("missing: a kernel with transparent huge pages (no /sys/kernel/mm/transparent_hugepage)")
	}
	const n = 3 << 20 // 12 MiB of float32
	x, free := hugeFloats[float32](n)
	require.Len(t, x, n)
	addr := uintptr(unsafe.Pointer(&x[0]))
	for _, i := range []int{0, n / 2, n - 1} {
		assert.Zero(t, x[i])
		x[i] = float32(i)
	}
	assert.Equal(t, float32(n-1), x[n-1])
	flags := vmFlags(t, addr)
	require.NotEmpty(t, flags, "no mapping holds the storage")
	assert.Contains(t, strings.Fields(flags), "hg", "the mapping is not advised for huge pages: %s", flags)
	free()
	assert.Empty(t, vmFlags(t, addr), "the storage is still mapped after free")

	y, free64 := hugeFloats[float64](0)
	assert.Empty(t, y)
	free64()
}
