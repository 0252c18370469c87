//go:build !amd64

package kern

import "runtime"

// curg returns a key of the calling goroutine that no other live goroutine
// shares: its id, read from the header of its stack trace. Slower than the
// amd64 version (a traceback per call), and called only while some
// goroutine is bound to a device pool.
func curg() uintptr {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	// "goroutine 123 [running]:..."
	var id uintptr
	for i := len("goroutine "); i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		id = id*10 + uintptr(b[i]-'0')
	}
	return id
}
