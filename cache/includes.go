package cache

import (
	"bytes"
	"path"
	"strings"
)

// includedNames are the base names of the files that src's #include,
// #import and #embed directives may name, for includeReads. It may name
// more than the preprocessor reads, which only recompiles more; it must
// never name fewer while ok is true.
//
// It does not tokenize the source as a compiler does: three reviews of a
// scanner that did (comments and literals removed first) found a dozen
// ways to make it hide a directive that g++ or clang act on, through the
// corners where compilers disagree on what is a comment, a literal or a
// number. Here nothing is removed, so nothing can be hidden. After joining
// spliced lines (a backslash, blanks allowed, then a line end), every #, %:
// and ??= in the text, wherever it stands (in code, a comment, a string, an
// #if 0 block), is read as a directive could be: blanks, bytes past ASCII
// (clang reads Unicode white space as a blank) and block comments (which
// may span lines, as inside a directive) skipped, a word, the same skipped
// again, then "name" or <name> up to the closing mark on that line. Where the word is include, import or embed, the name
// counts. ok is false where the text after such a word is not a plain name
// (a name made by a macro), at include_next (which names a file by its
// place on the search path), and at what this does not read as compilers
// might: a NUL byte, a carriage return, the trigraph ??/ (a backslash
// where trigraphs are on), a universal character name (\u, \U), a
// backslash inside a name (an escape to clang, not to g++), and a block
// comment after a # that never ends.
func includedNames(src []byte) (names []string, ok bool) {
	if bytes.IndexByte(src, 0) >= 0 || bytes.IndexByte(src, '\r') >= 0 || bytes.Contains(src, []byte("??/")) ||
		bytes.Contains(src, []byte(`\u`)) || bytes.Contains(src, []byte(`\U`)) {
		return nil, false
	}
	text := spliceLines(strings.TrimPrefix(string(src), "\ufeff"))
	for i := 0; i < len(text); i++ {
		var at int
		switch {
		case text[i] == '#':
			at = i + 1
		case strings.HasPrefix(text[i:], "%:"):
			at = i + 2
		case strings.HasPrefix(text[i:], "??="):
			at = i + 3
		default:
			continue
		}
		if at, ok = skipSpace(text, at); !ok {
			return nil, false
		}
		end := at
		for end < len(text) && isWordByte(text[end]) {
			end++
		}
		switch text[at:end] {
		case "include", "import", "embed":
		case "include_next":
			return nil, false
		default:
			continue
		}
		if at, ok = skipSpace(text, end); !ok {
			return nil, false
		}
		name, ok := headerName(text[at:])
		if !ok {
			return nil, false
		}
		names = append(names, path.Base(name))
	}
	return names, true
}

// blanks are the white space that may separate a directive's parts.
const blanks = " \t\v\f"

// skipSpace returns the index of the first byte at or after at that is
// neither a blank, nor a byte past ASCII (clang reads Unicode white space,
// a no-break space for one, as a blank), nor inside a block comment; false
// when a block comment there never ends.
func skipSpace(text string, at int) (int, bool) {
	for {
		for at < len(text) && (strings.IndexByte(blanks, text[at]) >= 0 || text[at] >= 0x80) {
			at++
		}
		if !strings.HasPrefix(text[at:], "/*") {
			return at, true
		}
		end := strings.Index(text[at+2:], "*/")
		if end < 0 {
			return at, false
		}
		at += 2 + end + 2
	}
}

// headerName is the name of "name" or <name> at the start of s, which must
// close on its line.
func headerName(s string) (string, bool) {
	var closing byte
	switch {
	case strings.HasPrefix(s, `"`):
		closing = '"'
	case strings.HasPrefix(s, "<"):
		closing = '>'
	default:
		return "", false
	}
	line, _, _ := strings.Cut(s[1:], "\n")
	end := strings.IndexByte(line, closing)
	if end <= 0 || strings.Contains(line[:end], "\\") {
		return "", false // clang reads a backslash in a name as an escape, g++ does not
	}
	return line[:end], true
}

// spliceLines joins each line that ends in a backslash (blanks after it
// allowed, as gcc and clang allow them) to the next.
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

// isWordByte says whether c may be part of a directive's word.
func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
