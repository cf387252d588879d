package rbac

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/identity"
)

// FuzzParse: no input panics the parser; a refusal is a *FileError with a position inside
// the input; an accepted file's assignments are whole (a role, a scope that reads back as
// itself) and deciding with them does not panic. The seeds are testdata/good and
// testdata/bad, and the corpus under testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/good", "testdata/bad"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for _, name := range files {
			data, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pol, err := Parse(data)
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FileError", err)
			}
			lines := 1
			for _, c := range data {
				if c == '\n' {
					lines++
				}
			}
			if fe.Line < 1 || fe.Line > lines || fe.Col < 1 {
				t.Fatalf("error at line %d col %d of a %d-line input: %v", fe.Line, fe.Col, lines, err)
			}
			return
		}
		for _, a := range pol.Assignments() {
			if a.Role == nil || a.Principal == "" {
				t.Fatalf("incomplete assignment %+v", a)
			}
			sc, err := ParseScope(a.Scope.String())
			if err != nil || sc != a.Scope {
				t.Fatalf("scope %+v reads back as %+v, %v", a.Scope, sc, err)
			}
			p := identity.Principal{ObjectID: a.Principal, AppID: a.Principal, Groups: []string{a.Principal}, Roles: []string{a.Principal}, Issuer: a.Issuer}
			for op := auth.OpQueryEntities; op <= auth.OpUnknown; op++ {
				_ = pol.Check(p, a.Scope.Account, a.Scope.Table, op)
			}
		}
	})
}
