package train

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
)

// loadLatest loads the newest checkpoint under root that loads: a damaged
// one (a file missing, cut short or failing its checksum) is skipped with a
// message naming it and why, and the next older one is tried. Folders that
// ListCheckpoints already ignores (no valid manifest, files of the wrong
// size, a save that never finished) newer than the one loaded are named
// too. It returns the folder loaded, or ErrNoCheckpoint.
func loadLatest(acc *Accelerator, root string, msg io.Writer) (string, error) {
	list, other, err := ckptScan(root)
	if err != nil {
		return "", err
	}
	newestLoaded := -1
	defer func() {
		// Report the incomplete folders newer than what was loaded.
		var names []string
		for n, ns := range other {
			if n > newestLoaded {
				names = append(names, ns...)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			if strings.HasSuffix(name, ".old") {
				continue // the previous copy of a checkpoint saved again
			}
			if strings.Contains(name, ".tmp-") {
				fmt.Fprintf(msg, "--resume latest: skipped %s: a save that did not finish\n", filepath.Join(root, name))
			} else {
				fmt.Fprintf(msg, "--resume latest: skipped %s: incomplete (manifest missing or a file of the wrong size)\n", filepath.Join(root, name))
			}
		}
	}()
	for i := len(list) - 1; i >= 0; i-- {
		e := list[i]
		err := acc.LoadState(e.path)
		if err == nil {
			newestLoaded = e.counter
			return e.path, nil
		}
		if errors.Is(err, ErrCheckpointCorrupt) || errors.Is(err, ErrCheckpointIncomplete) {
			fmt.Fprintf(msg, "--resume latest: skipped damaged checkpoint %s: %v\n", e.path, err)
			continue
		}
		newestLoaded = e.counter
		return "", err
	}
	return "", fmt.Errorf("train: %w under %s", ErrNoCheckpoint, root)
}
