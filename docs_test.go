package vkern

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/vkern/vkern/op"
)

// builtinOps are the ops this version knows, in wire-id order.
func builtinOps() []*op.Op {
	var out []*op.Op
	for _, o := range op.All() {
		if o.ID < op.FirstUserID {
			out = append(out, o)
		}
	}
	return out
}

// The README's and PROTOCOL.md's op tables are written by hand for
// readers; this keeps them from drifting from the contracts in op/*.go:
// PROTOCOL.md has one row per built-in op with its wire id, its RUN
// parameters (dimensions, then params) and its buffers in the contract's
// order with their element types, and the README names every op in a row
// of its own with every param's name.
func TestTheOpTablesFollowTheContracts(t *testing.T) {
	protocol := tableRows(t, "PROTOCOL.md", func(cells []string) string { return cells[1] })
	readme := tableRows(t, "README.md", func(cells []string) string { return strings.Trim(cells[0], "`") })
	for _, o := range builtinOps() {
		row, ok := protocol[o.Name]
		if !ok {
			t.Errorf("PROTOCOL.md's table of built-in ops has no row for %s", o.Name)
		} else {
			if row[0] != strconv.FormatUint(uint64(o.ID), 10) {
				t.Errorf("PROTOCOL.md gives %s the id %s; its contract, %d", o.Name, row[0], o.ID)
			}
			var params []string
			for _, d := range o.Dims {
				params = append(params, d.Name)
			}
			for _, p := range o.Params {
				params = append(params, p.Name)
			}
			if want := strings.Join(params, ", "); row[2] != want {
				t.Errorf("PROTOCOL.md lists %s's parameters as %q; its contract, %q", o.Name, row[2], want)
			}
			buffers := strings.Split(row[3], ", ")
			if len(buffers) != len(o.Operands) {
				t.Errorf("PROTOCOL.md lists %d buffers of %s (%q); its contract, %d", len(buffers), o.Name, row[3], len(o.Operands))
			} else {
				for i, p := range o.Operands {
					if want := p.Name + " " + p.DType.String() + " "; !strings.HasPrefix(buffers[i]+" ", want) {
						t.Errorf("PROTOCOL.md's buffer %d of %s is %q; its contract's, %s %s", i, o.Name, buffers[i], p.Name, p.DType)
					}
				}
			}
		}
		row, ok = readme[o.Name]
		if !ok {
			t.Errorf("the README's op tables have no row for %s", o.Name)
			continue
		}
		for _, p := range o.Params {
			if line := strings.Join(row, " | "); !strings.Contains(line, p.Name) {
				t.Errorf("the README's row of %s does not name its param %s", o.Name, p.Name)
			}
		}
	}
}

// tableRows reads the rows of every markdown table in file, keyed by
// key(cells) (cells trimmed, the escaped pipes inside a cell kept whole).
func tableRows(t *testing.T, file string, key func([]string) string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "| ---") {
			continue
		}
		line = strings.ReplaceAll(strings.Trim(strings.TrimSpace(line), "|"), `\|`, "\x00")
		var cells []string
		for _, c := range strings.Split(line, "|") {
			cells = append(cells, strings.ReplaceAll(strings.TrimSpace(c), "\x00", `\|`))
		}
		if len(cells) >= 2 {
			rows[key(cells)] = cells
		}
	}
	return rows
}
