//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package importer

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// mapFile maps the first n bytes of f private and copy-on-write: tensors
// aliasing the mapping may be written (training updates parameters in
// place) without the file changing.
func mapFile(f *os.File, n int) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE)
}

func unmapFile(b []byte) error { return syscall.Munmap(b) }

// dropPages releases the process's pages of a private file mapping (a
// later access reads the file again).
func dropPages(b []byte) { _ = unix.Madvise(b, unix.MADV_DONTNEED) }

// allocAnon maps n bytes of zeroed anonymous memory, outside Go's
// collected heap.
func allocAnon(n int) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, err
	}
	adviseHuge(b)
	return b, nil
}
