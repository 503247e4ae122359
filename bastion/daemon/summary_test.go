package daemon_test

import (
	"fmt"
	"go/doc"
	"go/parser"
	"go/token"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// maxSummaryWords bounds a package's summary sentence: the aim is under
// about 20 words, what go doc and go list show; the detail goes in the
// paragraphs after it.
const maxSummaryWords = 25

// TestPackageSummaries: every package's doc comment opens with one short
// sentence, "Package name ..." ("Command name ..." for a command), saying
// what the package owns.
func TestPackageSummaries(t *testing.T) {
	for _, line := range goList(t, "-f", "{{.ImportPath}}|{{.Name}}|{{.Dir}}|{{.Doc}}|{{join .TestGoFiles \",\"}}", mod+"...") {
		fields := strings.SplitN(line, "|", 5)
		if len(fields) != 5 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		pkg, name, dir, summary, testFiles := fields[0], fields[1], fields[2], fields[3], fields[4]
		if summary == "" && testFiles != "" { // a package of tests alone: go list reads no comment from them
			summary = testSummary(t, dir, strings.Split(testFiles, ","))
		}
		if msg := summaryProblem(pkg, name, summary); msg != "" {
			t.Errorf("%s: %s", pkg, msg)
		}
	}
}

// summaryProblem says what is wrong with a package's summary sentence, or
// returns "".
func summaryProblem(pkg, name, summary string) string {
	want := "Package " + name + " "
	if name == "main" {
		want = "Command " + path.Base(pkg) + " "
	}
	words := len(strings.Fields(summary))
	switch {
	case summary == "":
		return "no package doc comment: open one with a sentence saying what the package owns"
	case !strings.HasPrefix(summary, want):
		return "the doc comment must open with " + strings.TrimSpace(want) + "...: " + summary
	case !strings.HasSuffix(summary, "."):
		return "the summary is not one sentence ending in a period, before a blank line: " + summary
	case words > maxSummaryWords:
		return fmt.Sprintf("the summary sentence has %d words (at most %d; the detail goes in the paragraphs after it): %s",
			words, maxSummaryWords, summary)
	}
	return ""
}

// testSummary is the summary of the first doc comment among a package's
// test files, as go doc would show it.
func testSummary(t *testing.T, dir string, files []string) string {
	t.Helper()
	for _, f := range files {
		parsed, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if parsed.Doc != nil {
			return new(doc.Package).Synopsis(parsed.Doc.Text())
		}
	}
	return ""
}

func TestSummaryProblem(t *testing.T) {
	long := "Package x owns" + strings.Repeat(" word", maxSummaryWords) + "."
	for _, c := range []struct {
		pkg, name, summary string
		ok                 bool
	}{
		{mod + "x", "x", "Package x owns the x.", true},
		{mod + "cmd/y", "main", "Command y runs the y.", true},
		{mod + "x", "x", "", false},
		{mod + "x", "x", "Package y owns the x.", false},
		{mod + "cmd/y", "main", "Package main runs the y.", false},
		{mod + "x", "x", "Package x owns the x, and writes:", false},
		{mod + "x", "x", long, false},
	} {
		if got := summaryProblem(c.pkg, c.name, c.summary); (got == "") != c.ok {
			t.Errorf("summaryProblem(%q, %q, %q) = %q, want ok=%v", c.pkg, c.name, c.summary, got, c.ok)
		}
	}
}
