package testutil

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
)

// SmapsField returns the value of field key ("Rss", "VmFlags", ...) of
// the mapping of /proc/self/smaps that holds address a, as the kernel
// writes it after the colon (trimmed), and whether a mapping holds a.
func SmapsField(t testing.TB, a uintptr, key string) (string, bool) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatalf("reading /proc/self/smaps: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in, found := false, false
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 { // a mapping's header line
			in = lo <= a && a < hi
			found = found || in
			continue
		}
		if in {
			if v, ok := strings.CutPrefix(line, key+":"); ok {
				return strings.TrimSpace(v), true
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading /proc/self/smaps: %v", err)
	}
	return "", found
}
