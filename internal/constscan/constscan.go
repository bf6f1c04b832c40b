// Package constscan lists an enumeration's members as a Go package's
// source declares them: the constants of one type, each with its literal
// value. The completeness tests of the tables (engine's operations,
// cluster's op versions) use it, so that a member a table forgot is found
// from the declarations, not from the table itself (docs/design.md, "Where
// things go").
package constscan

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
)

// Literals returns the constants of the non-test Go files of dir declared
// with the type typeName, by name, with their values. A constant of that
// type without a literal value (iota, an expression) is an error: an
// enumeration on the wire or on disk gives each member its number.
func Literals(dir, typeName string) (map[string]uint64, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, fmt.Errorf("constscan: %w", err)
	}
	out := map[string]uint64{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return nil, fmt.Errorf("constscan: %w", err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typeName {
					continue
				}
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						return nil, fmt.Errorf("constscan: %s: %s %s has no literal value", path, typeName, name.Name)
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok {
						return nil, fmt.Errorf("constscan: %s: %s %s is not a literal: give it its number", path, typeName, name.Name)
					}
					n, err := strconv.ParseUint(lit.Value, 0, 64)
					if err != nil {
						return nil, fmt.Errorf("constscan: %s: %s %s = %s: %w", path, typeName, name.Name, lit.Value, err)
					}
					out[name.Name] = n
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("constscan: no constant of type %s in %s", typeName, dir)
	}
	return out, nil
}
