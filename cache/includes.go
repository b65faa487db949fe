package cache

import (
	"bytes"
	"path"
	"strings"
)

// includedNames are the base names of the files that src's #include,
// #import and #embed directives name, for includeReads. It errs on one side
// only. It may name files the preprocessor never reads (a directive inside
// an #if 0 block, a line a block comment ends on), which only recompiles
// more. ok is false wherever it cannot be sure it has seen every such
// directive: a raw string literal, whose end it does not look for; a name
// made by a macro; #include_next, which names a file by its place on the
// search path; and any text whose tokens g++ and clang may read otherwise
// than it does (a NUL byte, a byte past ASCII or a backslash outside
// comments and literals, where compilers differ on what an identifier or a
// number holds; ??/, a line splice where trigraphs are on). A compiler's dependency file would be exact, but the GPU
// builds do not ask for one (objects.go), so the scan reads the source as
// the preprocessor's first phases do:
//
//   - a byte-order mark dropped, "\r\n" and a lone "\r" read as line ends;
//   - a backslash at the end of a line (blanks after it allowed, as gcc
//     allows them) joins the next line to it;
//   - comments removed, a block comment that spans lines leaving a line
//     end (so that a directive after it starts a line, as at most it
//     might); string and character literals, and the <name> of an
//     include, skipped whole to their closing quote (or >) or the line's
//     end, so that a "/*" inside one opens no comment; a ' inside a number
//     and before a digit or a letter is a digit separator (1'000), as the
//     compilers read it, and any other opens a character literal;
//   - a directive is a line whose first text is # or %: (or ??=, a
//     trigraph the compilers ignore in C++17: it can only add names).
func includedNames(src []byte) (names []string, ok bool) {
	if bytes.IndexByte(src, 0) >= 0 || bytes.Contains(src, []byte("??/")) {
		return nil, false // a NUL byte; the trigraph of a backslash, a splice where trigraphs are on
	}
	text := strings.TrimPrefix(string(src), "\ufeff")
	text = strings.ReplaceAll(text, "\r\n", "\n")
	text = strings.ReplaceAll(text, "\r", "\n")
	code, ok := stripComments(spliceLines(text))
	if !ok {
		return nil, false
	}
	for _, line := range strings.Split(code, "\n") {
		word, rest, directive := directiveWord(line)
		if !directive {
			continue
		}
		switch word {
		case "include", "import", "embed":
			name, ok := headerName(strings.TrimLeft(rest, blanks))
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

// directiveWord reads line as a directive: its first word (include, if…)
// and what follows it. directive is false when the line's first text is
// not #, %: or ??=.
func directiveWord(line string) (word, rest string, directive bool) {
	rest = strings.TrimLeft(line, blanks)
	for _, intro := range []string{"#", "%:", "??="} {
		if strings.HasPrefix(rest, intro) {
			rest, directive = strings.TrimLeft(rest[len(intro):], blanks), true
			break
		}
	}
	if !directive {
		return "", "", false
	}
	n := 0
	for n < len(rest) && isIdent(rest[n]) {
		n++
	}
	return rest[:n], rest[n:], true
}

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
// String and character literals, and an include's <name>, are copied whole,
// to their closing quote (or >) or their line's end. ok is false at a raw
// string literal (R"…(…)…" and its prefixed forms), whose end this does not
// look for, and at a byte past ASCII or a backslash outside comments and
// literals.
func stripComments(text string) (string, bool) {
	out := make([]byte, 0, len(text))
	lineStart := 0  // where the current line starts in out
	number := false // inside a pp-number
	// copyTo copies text[i] and what follows it, to the first close
	// (unescaped when escapes) or the line's end, and returns the index
	// of the last byte copied.
	copyTo := func(i int, close byte, escapes bool) int {
		out = append(out, text[i])
		for i+1 < len(text) && text[i+1] != '\n' {
			i++
			out = append(out, text[i])
			if escapes && text[i] == '\\' && i+1 < len(text) && text[i+1] != '\n' {
				i++
				out = append(out, text[i])
			} else if text[i] == close {
				break
			}
		}
		return i
	}
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
				out = append(out, '\n')
				lineStart = len(out)
			} else {
				out = append(out, ' ')
			}
			i += 2 + end + 1
			number = false
			continue
		case c == '"':
			if i > 0 && text[i-1] == 'R' { // R", u8R", LR", …: a raw string, or an identifier the compilers may split before R
				return "", false
			}
			i = copyTo(i, '"', true)
			number = false
			continue
		case c == '\'' && !(number && i+1 < len(text) && isIdent(text[i+1])):
			i = copyTo(i, '\'', true)
			number = false
			continue
		case c == '<':
			if word, rest, directive := directiveWord(string(out[lineStart:])); directive && strings.TrimLeft(rest, blanks) == "" &&
				(word == "include" || word == "import" || word == "embed") {
				i = copyTo(i, '>', false)
				number = false
				continue
			}
		case c >= 0x80 || c == '\\':
			return "", false
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
		out = append(out, c)
		if c == '\n' {
			lineStart = len(out)
		}
	}
	return string(out), true
}

// isIdent says whether c may be part of an identifier or a number: an
// ASCII letter, digit, _ or $ (which g++ and clang take in identifiers).
func isIdent(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
