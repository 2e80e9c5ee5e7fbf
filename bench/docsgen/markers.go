package docsgen

import (
	"fmt"
	"strings"
)

const (
	openPrefix = "<!-- fig "
	openSuffix = " -->"
	closeTag   = "<!-- /fig -->"
)

// A Marker is one marked figure of a document.
type Marker struct {
	// Spec is what the opening comment says: SOURCE FUNC ARG...
	Spec string
	// Text is the figure as the document has it now.
	Text string
	// Line is the line of the opening comment (1-based).
	Line int
	// start and end delimit Text in the document.
	start, end int
}

// Parse finds the marked figures of doc, in order. Markers do not nest; an opening
// comment without its closing one, or a closing one without an opening, is an
// error naming its line. Markers in code (fenced blocks and `spans`) are text: a
// doc can show the syntax.
func Parse(doc string) ([]Marker, error) {
	code := codeRanges(doc)
	inCode := func(off int) bool {
		for _, r := range code {
			if off >= r[0] && off < r[1] {
				return true
			}
		}
		return false
	}
	// next finds the next occurrence of s at or after pos outside code.
	next := func(s string, pos int) int {
		for {
			i := strings.Index(doc[pos:], s)
			if i < 0 {
				return -1
			}
			if !inCode(pos + i) {
				return pos + i
			}
			pos += i + len(s)
		}
	}
	var out []Marker
	pos := 0
	for {
		open, cl := next(openPrefix, pos), next(closeTag, pos)
		if open < 0 {
			if cl >= 0 {
				return nil, fmt.Errorf("line %d: %s without an opening marker", lineOf(doc, cl), closeTag)
			}
			return out, nil
		}
		if cl >= 0 && cl < open {
			return nil, fmt.Errorf("line %d: %s without an opening marker", lineOf(doc, cl), closeTag)
		}
		specStart := open + len(openPrefix)
		specLen := strings.Index(doc[specStart:], openSuffix)
		if specLen < 0 || strings.Contains(doc[specStart:specStart+specLen], "\n") {
			return nil, fmt.Errorf("line %d: a marker must close its comment on its line: %s SPEC%s", lineOf(doc, open), openPrefix, openSuffix)
		}
		spec := strings.TrimSpace(doc[specStart : specStart+specLen])
		if spec == "" {
			return nil, fmt.Errorf("line %d: a marker with no figure named", lineOf(doc, open))
		}
		textStart := specStart + specLen + len(openSuffix)
		end := next(closeTag, textStart)
		if end < 0 {
			return nil, fmt.Errorf("line %d: %q is never closed (%s)", lineOf(doc, open), spec, closeTag)
		}
		if n := next(openPrefix, textStart); n >= 0 && n < end {
			return nil, fmt.Errorf("line %d: a marker inside %q (line %d): markers do not nest", lineOf(doc, n), spec, lineOf(doc, open))
		}
		out = append(out, Marker{Spec: spec, Text: doc[textStart:end], Line: lineOf(doc, open), start: textStart, end: end})
		pos = end + len(closeTag)
	}
}

// codeRanges returns the byte ranges of doc's code: fenced blocks (between lines
// that start with ``` or ~~~) and code spans (a run of backticks to the next run
// of as many, within a paragraph: a span may cross a line break, not a blank line).
func codeRanges(doc string) [][2]int {
	var out [][2]int
	fence, fenceStart := "", 0
	open, openLen := -1, 0 // the code span begun and not yet closed
	off := 0
	for _, line := range strings.SplitAfter(doc, "\n") {
		t := strings.TrimLeft(line, " ")
		switch {
		case fence != "":
			if strings.HasPrefix(t, fence) {
				out = append(out, [2]int{fenceStart, off + len(line)})
				fence = ""
			}
		case strings.HasPrefix(t, "```"), strings.HasPrefix(t, "~~~"):
			fence, fenceStart, open = t[:3], off, -1
		case strings.TrimSpace(line) == "":
			open = -1 // a paragraph ends: an unclosed backtick was literal
		default:
			for i := 0; i < len(line); {
				if line[i] != '`' {
					i++
					continue
				}
				n := 0
				for i+n < len(line) && line[i+n] == '`' {
					n++
				}
				switch {
				case open < 0:
					open, openLen = off+i, n
				case n == openLen:
					out = append(out, [2]int{open, off + i + n})
					open = -1
				}
				i += n
			}
		}
		off += len(line)
	}
	if fence != "" {
		out = append(out, [2]int{fenceStart, len(doc)})
	}
	return out
}

func lineOf(doc string, off int) int { return strings.Count(doc[:off], "\n") + 1 }

// Replace returns doc with the text of each marker replaced by texts[i] (one per
// marker of Parse(doc), in order).
func Replace(doc string, ms []Marker, texts []string) string {
	if len(ms) != len(texts) {
		panic("docsgen: Replace needs one text per marker")
	}
	var b strings.Builder
	pos := 0
	for i, m := range ms {
		b.WriteString(doc[pos:m.start])
		b.WriteString(texts[i])
		pos = m.end
	}
	b.WriteString(doc[pos:])
	return b.String()
}
