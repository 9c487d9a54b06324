package baton_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMECode checks that every Go block of README.md is a copy of
// lines of a runnable example (an *example*_test.go file of any module),
// which its module's tests compile and run: so the README's code compiles
// and works. Indentation is ignored.
func TestREADMECode(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var examples []string
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != "." {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.Contains(d.Name(), "example") && strings.HasSuffix(d.Name(), "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			examples = append(examples, path+"\n"+string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(readme))
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go code")
	}
	for _, b := range blocks {
		lines := trimmed(b)
		found := false
		for _, ex := range examples {
			if containsLines(trimmed(ex), lines) || isImports(lines) && hasAll(trimmed(ex), lines[1:len(lines)-1]) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("README's Go block is in no runnable example:\n%s", b)
		}
	}
}

// goBlocks returns the contents of the ```go blocks of a Markdown text.
func goBlocks(md string) []string {
	var out []string
	for {
		i := strings.Index(md, "```go\n")
		if i < 0 {
			return out
		}
		md = md[i+len("```go\n"):]
		j := strings.Index(md, "```")
		if j < 0 {
			return out
		}
		out = append(out, md[:j])
		md = md[j+3:]
	}
}

// trimmed is s's lines without their indentation, blank lines dropped.
func trimmed(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// isImports reports whether lines are an import block.
func isImports(lines []string) bool {
	return len(lines) > 2 && lines[0] == "import (" && lines[len(lines)-1] == ")"
}

// hasAll reports whether every one of want is a line of all.
func hasAll(all, want []string) bool {
	for _, w := range want {
		found := false
		for _, l := range all {
			if l == w {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// containsLines reports whether sub is a run of consecutive lines of all.
func containsLines(all, sub []string) bool {
	for i := 0; i+len(sub) <= len(all); i++ {
		match := true
		for j := range sub {
			if all[i+j] != sub[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}
