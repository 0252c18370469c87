package distrib

import (
	"fmt"
	"strconv"
	"strings"
)

// maxNodeListHosts bounds ExpandNodeList so a typo such as "n[1-999999999]"
// is an error rather than an exhausted machine.
const maxNodeListHosts = 1 << 20

// A node list term is a sequence of literal text and bracketed ranges:
// "node[01-04]" or "rack[1-2]-n[7,9]".
type nodeTerm []nodePart

type nodePart struct {
	literal string      // when ranges is nil
	ranges  []nodeRange // a bracket group: "01-04,07"
}

type nodeRange struct {
	lo, hi, width int
}

func (r nodeRange) count() int { return r.hi - r.lo + 1 }

// ExpandNodeList expands a Slurm host list ("node[01-04,07],login1",
// "rack[1-2]-n[1-2]") into host names, in order. Zero padding follows the
// lower bound of each range ("[08-11]" gives 08, 09, 10, 11).
func ExpandNodeList(list string) ([]string, error) {
	terms, err := parseNodeList(list)
	if err != nil {
		return nil, err
	}
	var hosts []string
	for _, t := range terms {
		n := 1
		for _, p := range t {
			if p.ranges == nil {
				continue
			}
			c := 0
			for _, r := range p.ranges {
				c += r.count()
			}
			n *= c
			if n > maxNodeListHosts {
				break
			}
		}
		if len(hosts)+n > maxNodeListHosts {
			return nil, fmt.Errorf("node list %q names more than %d hosts", list, maxNodeListHosts)
		}
		hosts = t.expand(hosts)
	}
	return hosts, nil
}

// FirstNode returns the first host of a Slurm host list: the host where
// SLURM_PROCID 0 runs, and so the rendezvous address.
func FirstNode(list string) (string, error) {
	terms, err := parseNodeList(list)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range terms[0] {
		if p.ranges == nil {
			b.WriteString(p.literal)
		} else {
			r := p.ranges[0]
			b.WriteString(pad(r.lo, r.width))
		}
	}
	return b.String(), nil
}

func (t nodeTerm) expand(out []string) []string {
	prefixes := []string{""}
	for _, p := range t {
		if p.ranges == nil {
			for i := range prefixes {
				prefixes[i] += p.literal
			}
			continue
		}
		var next []string
		for _, pre := range prefixes {
			for _, r := range p.ranges {
				for v := r.lo; v <= r.hi; v++ {
					next = append(next, pre+pad(v, r.width))
				}
			}
		}
		prefixes = next
	}
	return append(out, prefixes...)
}

func pad(v, width int) string {
	s := strconv.Itoa(v)
	for len(s) < width {
		s = "0" + s
	}
	return s
}

func parseNodeList(list string) ([]nodeTerm, error) {
	list = strings.TrimSpace(list)
	if list == "" {
		return nil, fmt.Errorf("empty node list")
	}
	var terms []nodeTerm
	depth, start := 0, 0
	for i := 0; i <= len(list); i++ {
		if i < len(list) {
			switch list[i] {
			case '[':
				depth++
				if depth > 1 {
					return nil, fmt.Errorf("node list %q: nested '[' at byte %d", list, i)
				}
				continue
			case ']':
				depth--
				if depth < 0 {
					return nil, fmt.Errorf("node list %q: ']' without '[' at byte %d", list, i)
				}
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		} else if depth != 0 {
			return nil, fmt.Errorf("node list %q: '[' is never closed", list)
		}
		t, err := parseNodeTerm(list[start:i])
		if err != nil {
			return nil, fmt.Errorf("node list %q: %w", list, err)
		}
		terms = append(terms, t)
		start = i + 1
	}
	return terms, nil
}

func parseNodeTerm(s string) (nodeTerm, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty host name")
	}
	var t nodeTerm
	for s != "" {
		open := strings.IndexByte(s, '[')
		if open < 0 {
			t = append(t, nodePart{literal: s})
			break
		}
		if open > 0 {
			t = append(t, nodePart{literal: s[:open]})
		}
		end := strings.IndexByte(s, ']') // parseNodeList checked the pairing
		ranges, err := parseNodeRanges(s[open+1 : end])
		if err != nil {
			return nil, err
		}
		t = append(t, nodePart{ranges: ranges})
		s = s[end+1:]
	}
	return t, nil
}

func parseNodeRanges(s string) ([]nodeRange, error) {
	if s == "" {
		return nil, fmt.Errorf("empty brackets")
	}
	var out []nodeRange
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		loS, hiS, isRange := strings.Cut(item, "-")
		if !isRange {
			hiS = loS
		}
		lo, err1 := parseNodeNumber(loS)
		hi, err2 := parseNodeNumber(hiS)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%q in brackets is not a number or a range of numbers", item)
		}
		if hi < lo {
			return nil, fmt.Errorf("range %q runs backwards", item)
		}
		if hi-lo >= maxNodeListHosts {
			return nil, fmt.Errorf("range %q names more than %d hosts", item, maxNodeListHosts)
		}
		out = append(out, nodeRange{lo: lo, hi: hi, width: len(loS)})
	}
	return out, nil
}

func parseNodeNumber(s string) (int, error) {
	if s == "" || len(s) > 9 {
		return 0, fmt.Errorf("bad number")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("bad number")
		}
	}
	return strconv.Atoi(s)
}
