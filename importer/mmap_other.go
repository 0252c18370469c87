//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package importer

import (
	"errors"
	"os"
)

// mapFile is unavailable here; files are read instead.
func mapFile(*os.File, int) ([]byte, error) {
	return nil, errors.New("no memory mapping on this platform")
}

func unmapFile([]byte) error { return nil }

func dropPages([]byte) {}

func allocAnon(int) ([]byte, error) { return nil, errors.New("no anonymous mappings on this platform") }
