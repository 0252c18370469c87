package importer

import "syscall"

// adviseHuge asks for transparent huge pages on b (where the system's
// policy is "madvise"): one fault per 2 MiB instead of per 4 KiB when a
// large tensor is filled.
func adviseHuge(b []byte) { _ = syscall.Madvise(b, syscall.MADV_HUGEPAGE) }
