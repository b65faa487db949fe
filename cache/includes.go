package cache

import (
	"path"
	"strings"
)

// includedNames are the base names of the files that src's #include,
// #import and #embed directives name, for includeReads. It is written to
// err on one side only: it may name files the preprocessor never reads (a
// directive inside a comment-free #if 0 block, a line a block comment ends
// on), which only recompiles more, and ok is false wherever it cannot be
// sure it has seen every such directive: a raw string literal, whose end
// it does not look for; a name made by a macro; #include_next, which names
// a file by its place on the search path. A compiler's dependency file
// would be exact, but the GPU builds do not ask for one (objects.go), so
// the scan reads the source as the preprocessor's first phases do:
//
//   - a byte-order mark dropped, "\r\n" and a lone "\r" read as line ends;
//   - a backslash at the end of a line (blanks after it allowed, as gcc
//     allows them) joins the next line to it;
//   - comments removed, a block comment that spans lines leaving a line
//     end (so that a directive after it starts a line, as at most it
//     might), string and character literals skipped whole to their closing
//     quote or the line's end, so that neither a "/*" inside one nor a
//     digit separator (1'000) is misread;
//   - a directive is a line whose first text is #, %: or ??=.
func includedNames(src []byte) (names []string, ok bool) {
	text := strings.TrimPrefix(string(src), "\ufeff")
	text = strings.ReplaceAll(text, "\r\n", "\n")
	text = strings.ReplaceAll(text, "\r", "\n")
	code, ok := stripComments(spliceLines(text))
	if !ok {
		return nil, false
	}
	for _, line := range strings.Split(code, "\n") {
		rest, directive := strings.TrimLeft(line, blanks), false
		for _, intro := range []string{"#", "%:", "??="} {
			if strings.HasPrefix(rest, intro) {
				rest, directive = rest[len(intro):], true
				break
			}
		}
		if !directive {
			continue
		}
		rest = strings.TrimLeft(rest, blanks)
		n := 0
		for n < len(rest) && isIdent(rest[n]) {
			n++
		}
		switch rest[:n] {
		case "include", "import", "embed":
			name, ok := headerName(strings.TrimLeft(rest[n:], blanks))
			if !ok {
				return nil, false
			}
			names = append(names, path.Base(name))
		case "include_next":
			return nil, false
		}
	}
	return names, true
}

// blanks are the white space that may open a line or separate a
// directive's words (the newline aside).
const blanks = " \t\v\f"

// headerName is the name of a directive's "name" or <name>.
func headerName(s string) (string, bool) {
	if len(s) < 2 {
		return "", false
	}
	closing := map[byte]byte{'"': '"', '<': '>'}[s[0]]
	if closing == 0 {
		return "", false
	}
	end := strings.IndexByte(s[1:], closing)
	if end <= 0 {
		return "", false
	}
	return s[1 : 1+end], true
}

// spliceLines joins each line that ends in a backslash (blanks after it
// allowed) to the next.
func spliceLines(text string) string {
	if !strings.Contains(text, "\\") {
		return text
	}
	var b strings.Builder
	for i := 0; i < len(text); i++ {
		if text[i] == '\\' {
			j := i + 1
			for j < len(text) && strings.IndexByte(blanks, text[j]) >= 0 {
				j++
			}
			if j < len(text) && text[j] == '\n' {
				i = j
				continue
			}
		}
		b.WriteByte(text[i])
	}
	return b.String()
}

// stripComments removes text's comments: a line comment up to its line's
// end, a block comment for a space, or a line end if it spans lines.
// String and character literals are copied whole, to their closing quote
// or their line's end. ok is false at a raw string literal (R"…(…)…" and
// its prefixed forms), whose end this does not look for.
func stripComments(text string) (string, bool) {
	var b strings.Builder
	number := false // inside a pp-number, where ' separates digits
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '/' && i+1 < len(text) && text[i+1] == '/':
			for i+1 < len(text) && text[i+1] != '\n' {
				i++
			}
			number = false
			continue
		case c == '/' && i+1 < len(text) && text[i+1] == '*':
			end := strings.Index(text[i+2:], "*/")
			if end < 0 {
				end = len(text) - (i + 2) // unterminated: to the end
			}
			if strings.Contains(text[i+2:i+2+end], "\n") {
				b.WriteByte('\n')
			} else {
				b.WriteByte(' ')
			}
			i += 2 + end + 1
			number = false
			continue
		case c == '"' || (c == '\'' && !number):
			if c == '"' && rawPrefix(text[:i]) {
				return "", false
			}
			b.WriteByte(c)
			for i+1 < len(text) && text[i+1] != '\n' {
				i++
				b.WriteByte(text[i])
				if text[i] == '\\' && i+1 < len(text) && text[i+1] != '\n' {
					i++
					b.WriteByte(text[i])
				} else if text[i] == c {
					break
				}
			}
			number = false
			continue
		}
		switch {
		case number && (isIdent(c) || c == '.' || c == '\''):
		case number && (c == '+' || c == '-') && strings.IndexByte("eEpP", text[i-1]) >= 0:
		case c >= '0' && c <= '9' && (i == 0 || !isIdent(text[i-1])):
			number = true
		case c == '.' && i+1 < len(text) && text[i+1] >= '0' && text[i+1] <= '9':
			number = true
		default:
			number = false
		}
		b.WriteByte(c)
	}
	return b.String(), true
}

// rawPrefix says whether before, the text up to a '"', ends in the
// encoding prefix of a raw string literal: R, u8R, uR, UR or LR, a whole
// identifier.
func rawPrefix(before string) bool {
	n := len(before)
	start := n
	for start > 0 && isIdent(before[start-1]) {
		start--
	}
	switch before[start:n] {
	case "R", "u8R", "uR", "UR", "LR":
		return true
	}
	return false
}

// isIdent says whether c may be part of an identifier.
func isIdent(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}
