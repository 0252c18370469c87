package distrib

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Setting is one value every rank of a group must agree on: the model
// file's digest, a hyper-parameter, the size of the data. Init compares
// the ranks' Config.Settings when the group forms; if any differ, every
// rank's Init fails with a *SettingsError naming each differing setting and
// which ranks hold which value.
type Setting struct {
	// Name is how the user sets it ("--lr"), as the message shows it.
	Name string `json:"name"`
	// Value is its value as text; two ranks agree when the texts are equal.
	Value string `json:"value"`
}

// ErrSettingsMismatch is what a *SettingsError wraps, for errors.Is.
var ErrSettingsMismatch = errors.New("distrib: the ranks were started with different settings")

// SettingsError is Init's error on every rank when the ranks' settings
// differ.
type SettingsError struct {
	// Rank is the rank that returns it.
	Rank int
	// Detail names each differing setting and the ranks that hold each
	// value ("--lr: ranks 0,2 = 0.001, rank 1 = 0.002").
	Detail string
}

func (e *SettingsError) Error() string {
	return fmt.Sprintf("distrib: rank %d: the ranks were not started alike (every rank must run the same model and settings): %s", e.Rank, e.Detail)
}

// Unwrap makes errors.Is(err, ErrSettingsMismatch) true.
func (e *SettingsError) Unwrap() error { return ErrSettingsMismatch }

// maxShownValue bounds a value in the message.
const maxShownValue = 160

// notGiven is the value shown for a setting a rank did not send (a rank of
// another version).
const notGiven = "(not given)"

// compareSettings returns "" when every rank sent the same settings, else
// one message naming each differing setting, in the order rank 0 lists
// them (then any only other ranks list), with the ranks of each value.
func compareSettings(byRank [][]Setting) string {
	var names []string
	seen := map[string]bool{}
	values := make([]map[string]string, len(byRank))
	for r, list := range byRank {
		values[r] = map[string]string{}
		for _, s := range list {
			if _, dup := values[r][s.Name]; dup {
				continue
			}
			values[r][s.Name] = s.Value
			if !seen[s.Name] {
				seen[s.Name] = true
				names = append(names, s.Name)
			}
		}
	}
	var diffs []string
	for _, name := range names {
		var order []string
		holders := map[string][]int{}
		for r := range byRank {
			v, ok := values[r][name]
			if !ok {
				v = notGiven
			}
			if _, ok := holders[v]; !ok {
				order = append(order, v)
			}
			holders[v] = append(holders[v], r)
		}
		if len(order) == 1 {
			continue
		}
		parts := make([]string, len(order))
		for i, v := range order {
			parts[i] = fmt.Sprintf("%s = %s", rankList(holders[v]), showValue(v))
		}
		diffs = append(diffs, name+": "+strings.Join(parts, ", "))
	}
	return strings.Join(diffs, "; ")
}

func showValue(v string) string {
	if v == "" {
		return `""`
	}
	if len(v) > maxShownValue {
		return v[:maxShownValue] + "…"
	}
	return v
}

// rankList writes ascending ranks as "rank 1", "ranks 0,2" or, with runs
// of three or more, "ranks 0-3,5".
func rankList(ranks []int) string {
	var parts []string
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		switch {
		case j-i >= 2:
			parts = append(parts, strconv.Itoa(ranks[i])+"-"+strconv.Itoa(ranks[j]))
		default:
			for k := i; k <= j; k++ {
				parts = append(parts, strconv.Itoa(ranks[k]))
			}
		}
		i = j + 1
	}
	if len(ranks) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ",")
}

// checkSettings (rank 0, once every rank joined) compares the settings;
// on a difference it tells every rank and returns the error.
func (g *Group) checkSettings(peers []*peerConn) error {
	byRank := make([][]Setting, g.size)
	byRank[0] = g.cfg.Settings
	for r := 1; r < g.size; r++ {
		byRank[r] = peers[r].settings
	}
	detail := compareSettings(byRank)
	if detail == "" {
		return nil
	}
	for r := 1; r < g.size; r++ {
		_ = writeFrame(peers[r].conn, msgReject, rejectMsg{Reason: detail, Settings: true}, time.Now().Add(controlWriteTimeout))
	}
	return &SettingsError{Rank: 0, Detail: detail}
}

// checkSettingsOver compares the settings over a transport whose
// processes found each other already (MPI): every rank gathers every
// rank's list and judges the same.
func (g *Group) checkSettingsOver(tr transport) error {
	mine, err := json.Marshal(g.cfg.Settings)
	if err != nil {
		return fmt.Errorf("distrib: rank %d: encoding the settings: %w", g.rank, err)
	}
	blocks, err := tr.allGatherBytes(mine)
	if err != nil {
		return fmt.Errorf("distrib: rank %d: comparing the settings across ranks: %w", g.rank, err)
	}
	byRank := make([][]Setting, len(blocks))
	for r, b := range blocks {
		if err := json.Unmarshal(b, &byRank[r]); err != nil {
			return fmt.Errorf("distrib: rank %d: rank %d's settings are malformed: %w", g.rank, r, err)
		}
	}
	if d := compareSettings(byRank); d != "" {
		return &SettingsError{Rank: g.rank, Detail: d}
	}
	return nil
}
