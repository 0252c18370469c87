// Command testcount reads `go test -json` on standard input, prints each
// test's output as plain go test would, and ends with the number of tests
// that passed, failed and skipped, naming the skipped ones with their reason
// and, last (so that a log's tail shows them), the failed tests and packages
// with the output they printed. It exits 1 when any test or package failed,
// so CI fails as go test would.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

// keepLines is how many of a test's last output lines a failure repeats.
const keepLines = 40

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func main() {
	var pass, fail, skip int
	var skipped []string
	reasons := map[string]string{}   // package/test -> last output line before the skip
	outputs := map[string][]string{} // package/test -> its last output lines
	var failures []string            // package/test, in the order they failed
	failed := false
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	for in.Scan() {
		var e event
		if err := json.Unmarshal(in.Bytes(), &e); err != nil {
			fmt.Println(in.Text()) // not JSON: a build error line
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "build-output": // compiler errors (go test -json since Go 1.24)
			fmt.Print(e.Output)
		case "build-fail":
			failed = true
		case "output":
			fmt.Print(e.Output)
			if tail := append(outputs[key], e.Output); len(tail) > keepLines {
				outputs[key] = tail[len(tail)-keepLines:]
			} else {
				outputs[key] = tail
			}
			if s := strings.TrimSpace(e.Output); e.Test != "" && s != "" && !strings.HasPrefix(s, "---") && !strings.HasPrefix(s, "===") {
				reasons[key] = s
			}
		case "pass":
			if e.Test != "" {
				pass++
			}
		case "fail":
			failed = true
			if e.Test != "" {
				fail++
			}
			failures = append(failures, key)
		case "skip":
			if e.Test != "" {
				skip++
				skipped = append(skipped, key+": "+reasons[key])
			}
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testcount:", err)
		os.Exit(2)
	}
	sort.Strings(skipped)
	fmt.Printf("testcount: %d passed, %d failed, %d skipped\n", pass, fail, skip)
	for _, s := range skipped {
		fmt.Println("testcount: skipped", s)
	}
	for _, k := range failures {
		fmt.Printf("testcount: FAILED %s; its last output:\n", k)
		for _, line := range outputs[k] {
			fmt.Print("    ", line)
		}
	}
	if failed {
		os.Exit(1)
	}
}
